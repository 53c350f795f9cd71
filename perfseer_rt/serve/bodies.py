"""A request body in, a model file on disk out, never a whole upload in
memory.

Accepted (anything else is 415 naming these):

- ``application/octet-stream`` (or no type, or ``application/onnx``): the
  ONNX file itself, streamed to a temporary file;
- ``multipart/form-data``: one file part, the model (``curl -F
  file=@m.onnx``), streamed to a temporary file as it is parsed; other
  (text) parts are options;
- ``application/json``: an object naming a model file under the model folder
  (``{"path": "m.onnx"}``) with options as further keys.

The size limit holds for the whole body: a declared ``Content-Length`` over
it is refused before a byte is read, and a stream is cut (413) once it
passes it. Text parts and JSON are small by nature and capped at
:data:`MAX_FIELDS_BYTES`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from python_multipart import MultipartParser
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import parse_options_header

from perfseer_rt.serve.errors import HTTPError

#: Media types read as the raw ONNX file.
RAW_TYPES = ("application/octet-stream", "application/onnx", "application/x-onnx",
             "application/x-protobuf")
ACCEPTED = ("application/octet-stream", "multipart/form-data", "application/json")
#: JSON bodies and the text parts of a form, bytes in all.
MAX_FIELDS_BYTES = 1 << 20


@dataclass
class Body:
    """What a request body gave: the uploaded model in a temporary file
    (None: no upload), its file name from a multipart form, and option
    values by name (JSON keys, form fields; ``path`` among them)."""

    file: Path | None = None
    filename: str | None = None
    fields: dict[str, list[str]] = field(default_factory=dict)

    def discard(self) -> None:
        if self.file is not None:
            self.file.unlink(missing_ok=True)
            self.file = None


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def unsupported(kind: str) -> HTTPError:
    return HTTPError(415, f"content type {kind!r} is not accepted; send {', '.join(ACCEPTED)}: "
                     "the ONNX file as the body (curl --data-binary @m.onnx -H 'Content-Type: "
                     "application/octet-stream'), a form with the file (curl -F file=@m.onnx), "
                     "or JSON naming a file under the model folder ({\"path\": \"m.onnx\"})",
                     "UnsupportedMediaType")


def too_large(limit_bytes: int) -> HTTPError:
    return HTTPError(413, f"upload larger than the limit of {limit_bytes / 2**20:g} MiB",
                     "UploadTooLarge")


def check_declared(headers: Any, limit_bytes: int) -> str:
    """The body's media type, refused (415) unless accepted, and its declared
    length refused (413) when over the limit: both before a byte is read."""
    kind = media_type(headers.get("content-type"))
    if kind and kind not in RAW_TYPES and kind not in ("multipart/form-data", "application/json"):
        raise unsupported(kind)
    declared = headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit_bytes:
        raise too_large(limit_bytes)
    return kind


async def receive(chunks: AsyncIterator[bytes], content_type: str | None, limit_bytes: int,
                  upload_dir: Path | None) -> Body:
    """Read the body (``chunks``, as they arrive) into a :class:`Body`."""
    kind = media_type(content_type)
    stream = _capped(chunks, limit_bytes)
    if kind == "application/json":
        return Body(fields=_json_fields(await _small(stream)))
    if kind == "multipart/form-data":
        return await _form(stream, content_type or "", upload_dir)
    body = Body()
    handle, body_file = _temp(upload_dir)
    try:
        with handle:
            async for chunk in stream:
                handle.write(chunk)
            size = handle.tell()
    except BaseException:
        body_file.unlink(missing_ok=True)
        raise
    if size:
        body.file = body_file
    else:
        body_file.unlink()
    return body


async def _capped(chunks: AsyncIterator[bytes], limit_bytes: int) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        if seen > limit_bytes:
            raise too_large(limit_bytes)
        if chunk:
            yield chunk


async def _small(stream: AsyncIterator[bytes]) -> bytes:
    buf = bytearray()
    async for chunk in stream:
        buf += chunk
        if len(buf) > MAX_FIELDS_BYTES:
            raise HTTPError(413, f"JSON body larger than {MAX_FIELDS_BYTES >> 10} KiB; a JSON "
                            "body names a model (path) and options, it does not carry one",
                            "UploadTooLarge")
    return bytes(buf)


def _temp(upload_dir: Path | None) -> tuple[BinaryIO, Path]:
    fd, name = tempfile.mkstemp(prefix="perfseer-rt-upload-", suffix=".onnx", dir=upload_dir)
    return os.fdopen(fd, "wb"), Path(name)


def _json_fields(data: bytes) -> dict[str, list[str]]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, f"the JSON body does not parse ({exc})", "BadRequest") from None
    if not isinstance(doc, dict):
        raise HTTPError(400, "the JSON body must be an object, e.g. {\"path\": \"m.onnx\", "
                        "\"dim\": [\"seq=128\"]}", "BadRequest")
    return {str(k): _texts(str(k), v) for k, v in doc.items()}


def _texts(key: str, value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise HTTPError(400, f"JSON key {key!r}: expected a string or a number (or a list "
                            f"of them), got {json.dumps(v)[:60]}", "BadRequest")
        out.append(v if isinstance(v, str) else json.dumps(v))
    return out


class _Form:
    """Callbacks of python-multipart's streaming parser: the file part goes
    to a temporary file, text parts to ``fields``."""

    def __init__(self, upload_dir: Path | None) -> None:
        self.upload_dir = upload_dir
        self.body = Body()
        self._handle: BinaryIO | None = None
        self._headers: dict[str, bytes] = {}
        self._header = [bytearray(), bytearray()]
        self._name: str | None = None
        self._text: bytearray | None = None
        self._text_bytes = 0
        self.ended = False

    def callbacks(self) -> Any:
        return {"on_part_begin": self._begin, "on_header_field": self._hfield,
                "on_header_value": self._hvalue, "on_header_end": self._hend,
                "on_headers_finished": self._headers_done, "on_part_data": self._data,
                "on_part_end": self._end, "on_end": self._finish}

    def _begin(self) -> None:
        self._headers, self._name, self._text = {}, None, None

    def _hfield(self, data: bytes, start: int, end: int) -> None:
        self._header[0] += data[start:end]

    def _hvalue(self, data: bytes, start: int, end: int) -> None:
        self._header[1] += data[start:end]

    def _hend(self) -> None:
        self._headers[bytes(self._header[0]).decode("latin-1").lower()] = bytes(self._header[1])
        self._header = [bytearray(), bytearray()]

    def _headers_done(self) -> None:
        _, opts = parse_options_header(self._headers.get("content-disposition", b""))
        self._name = opts.get(b"name", b"").decode("utf-8", "replace")
        filename = opts.get(b"filename")
        if filename is None:
            self._text = bytearray()
            return
        if self.body.file is not None:
            raise HTTPError(400, "the form holds more than one file; send one model per "
                            "request", "BadRequest")
        self._handle, self.body.file = _temp(self.upload_dir)
        self.body.filename = safe_filename(filename.decode("utf-8", "replace"))

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._handle is not None:
            self._handle.write(data[start:end])
        elif self._text is not None:
            self._text_bytes += end - start
            if self._text_bytes > MAX_FIELDS_BYTES:
                raise HTTPError(413, f"the form's text fields hold more than "
                                f"{MAX_FIELDS_BYTES >> 10} KiB", "UploadTooLarge")
            self._text += data[start:end]

    def _end(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        elif self._text is not None and self._name:
            self.body.fields.setdefault(self._name, []).append(
                bytes(self._text).decode("utf-8", "replace"))

    def _finish(self) -> None:
        self.ended = True

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


async def _form(stream: AsyncIterator[bytes], content_type: str, upload_dir: Path | None) -> Body:
    _, opts = parse_options_header(content_type)
    boundary = opts.get(b"boundary")
    if not boundary:
        raise HTTPError(400, "multipart/form-data without a boundary", "BadRequest")
    form = _Form(upload_dir)
    parser = MultipartParser(boundary, form.callbacks())
    try:
        async for chunk in stream:
            parser.write(chunk)
        parser.finalize()
        if not form.ended:
            raise HTTPError(400, "the multipart body ends before its closing boundary",
                            "BadRequest")
    except MultipartParseError as exc:
        form.close()
        form.body.discard()
        raise HTTPError(400, f"malformed multipart body ({exc})", "BadRequest") from None
    except BaseException:
        form.close()
        form.body.discard()
        raise
    if form.body.file is not None and form.body.file.stat().st_size == 0:
        form.body.discard()
    return form.body


_UNSAFE = re.compile(r"[^\w.+-]")


def safe_filename(name: str) -> str:
    """A form's file name as the answer may name it: its last part, with
    anything but letters, digits and ``.+-_`` replaced."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    return _UNSAFE.sub("_", base)[:200] or "upload.onnx"
