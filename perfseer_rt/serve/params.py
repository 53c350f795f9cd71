"""A request's options: the query string, plus the fields of a JSON or
multipart body, read through the one table of
:mod:`perfseer_rt.predict.options` (the CLI's), checked against the
server's limits, and described on the OpenAPI page from that same table.

Over HTTP an option is named as its flag without dashes (``?dim=seq=128``,
``?max_memory_mb=512``); a repeatable one is repeated (``?dim=a=1&dim=b=2``,
or a list in JSON). Besides the options, ``path`` names a model file under
the server's model folder and ``name`` is the upload's name in the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from perfseer_rt.errors import OptionError
from perfseer_rt.predict.options import Option, options_for, parse_options

#: Parameters of the service itself (not options of the library call).
SERVICE_PARAMS: dict[str, str] = {
    "path": "A model file under the server's model folder (relative to it), instead of an "
            "uploaded model.",
    "name": "The uploaded model's name in the answer (default: the multipart file's name, "
            "else upload.onnx).",
}

#: Characters no parameter may hold: C0 controls (NUL included), DEL, and
#: U+FFFD (what a percent-escaped byte that is not UTF-8 decodes to).
_BAD = {chr(c) for c in range(32)} | {"\x7f", "\ufffd"}


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask for (checked before any body is read when
    given in the query)."""

    max_batches: int = 64
    max_batch: int = 1 << 16
    max_dim: int = 1 << 20
    max_named: int = 64


@dataclass
class Request:
    """A request's parsed parameters: the keyword arguments for the library
    call, and the service's own ``path`` and ``name``."""

    kwargs: dict[str, Any]
    path: str | None
    name: str | None


def clean(key: str, value: str) -> str:
    """``value``, refused (400) when it holds a control character, NUL
    included, or bytes that are not UTF-8."""
    bad = next((ch for ch in value if ch in _BAD), None)
    if bad is not None:
        what = "bytes that are not UTF-8" if bad == "\ufffd" else f"the control character {bad!r}"
        raise OptionError(f"{key}: the value holds {what}")
    return value


def gather(query: Iterable[tuple[str, str]],
           body: Mapping[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Values by name from the query and the body; a name in both is refused."""
    given: dict[str, list[str]] = {}
    for key, value in query:
        given.setdefault(clean("parameter name", key), []).append(clean(key, value))
    for key, values in (body or {}).items():
        if key in given:
            raise OptionError(f"{key} given both in the query and in the body; give it once")
        given[clean("field name", key)] = [clean(key, v) for v in values]
    return given


def parse_request(fn: Callable[..., Any], given: dict[str, list[str]],
                  limits: RequestLimits) -> Request:
    """The parameters of a call of ``fn``, checked against ``limits``.

    Raises:
        OptionError: an unknown parameter, a bad value, or one over a limit.
    """
    given = dict(given)
    own = {k: _single(k, given.pop(k)) for k in list(given) if k in SERVICE_PARAMS}
    offered = [opt.name for opt, _ in options_for(fn)]
    unknown = sorted(set(given) - set(offered))
    if unknown:
        raise OptionError(f"unknown parameter {unknown[0]!r}; this endpoint takes "
                          f"{', '.join(offered + list(SERVICE_PARAMS))}")
    kwargs = parse_options(fn, given, flag=lambda o: o.name)
    check_limits(kwargs, limits)
    return Request(kwargs, own.get("path"), own.get("name"))


def _single(key: str, values: list[str]) -> str:
    if len(values) != 1:
        raise OptionError(f"{key} given {len(values)} times; give it once")
    return values[0]


def check_limits(kwargs: Mapping[str, Any], limits: RequestLimits) -> None:
    batches = list(kwargs.get("batches") or []) + ([kwargs["batch"]] if kwargs.get("batch") else [])
    if len(batches) > limits.max_batches:
        raise OptionError(f"batch: {len(batches)} batch sizes; this server takes at most "
                          f"{limits.max_batches} per request")
    big = [b for b in batches if b is not None and b > limits.max_batch]
    if big:
        raise OptionError(f"batch {big[0]}: this server takes batch sizes up to {limits.max_batch}")
    dims = dict(kwargs.get("dims") or {})
    shapes = dict(kwargs.get("input_shapes") or {})
    if len(dims) + len(shapes) > limits.max_named:
        raise OptionError(f"dim and input: {len(dims) + len(shapes)} given; this server takes at "
                          f"most {limits.max_named}")
    for label, value in [(f"dim {k}={v}", v) for k, v in dims.items()] + \
            [(f"input {k}", d) for k, shape in shapes.items() for d in shape]:
        if value > limits.max_dim:
            raise OptionError(f"{label}: this server takes dims up to {limits.max_dim}")


# ------------------------------------------------------------------ OpenAPI
def _schema(opt: Option) -> dict[str, Any]:
    one: dict[str, Any] = {"type": "boolean" if opt.switch else "string"}
    if opt.choices:
        one["enum"] = list(opt.choices)
    if opt.default is not None:
        one["default"] = opt.default
    return {"type": "array", "items": one} if opt.multiple else one


def openapi_parameters(fn: Callable[..., Any]) -> list[dict[str, Any]]:
    """The query parameters of an endpoint calling ``fn``, from the options table."""
    out = []
    for opt, kw in options_for(fn):
        param: dict[str, Any] = {
            "name": opt.name, "in": "query", "required": False, "schema": _schema(opt),
            "description": f"{opt.help} CLI: `{opt.flag}`; Python: `{kw}=`."
                           + (" Repeatable." if opt.multiple else "")}
        if opt.example is not None:
            param["example"] = [opt.example] if opt.multiple else opt.example
        out.append(param)
    out += [{"name": k, "in": "query", "required": False, "schema": {"type": "string"},
             "description": text} for k, text in SERVICE_PARAMS.items()]
    return out


def openapi_body(fn: Callable[..., Any]) -> dict[str, Any]:
    """The request body's three accepted forms, their fields from the options table."""
    fields = {opt.name: {**_schema(opt), "description": opt.help} for opt, _ in options_for(fn)}
    return {"required": False, "description": (
        "The ONNX model: the raw file (application/octet-stream), or a multipart form whose "
        "file part is the model (`curl -F file=@m.onnx`), or JSON naming a file under the "
        "model folder ({\"path\": \"m.onnx\"}). Omit the body when `?path=` names the model. "
        "Options may also be form fields or JSON keys (a repeatable one as a list), never both "
        "there and in the query."),
        "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "multipart/form-data": {"schema": {"type": "object", "properties": {
                "file": {"type": "string", "format": "binary"}, **fields}, "required": ["file"]}},
            "application/json": {"schema": {"type": "object", "properties": {
                "path": {"type": "string", "description": SERVICE_PARAMS["path"]}, **fields},
                "required": ["path"]}},
        }}
