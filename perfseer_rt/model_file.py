"""The one check of a model path before anything opens it.

Extraction and the profiler both take a model by its path; whatever is
there is checked with one ``stat`` (which opens nothing), so a user's mistake
is one :class:`~perfseer_rt.errors.ModelLoadError` naming the path: a
missing file, a folder, a name no file can have, or something that is not
a regular file (a named pipe nobody writes to blocks an ``open`` for ever,
``/dev/zero`` a read).
"""

from __future__ import annotations

import os
import stat

from perfseer_rt.errors import ModelLoadError


def check_model_file(path: str | os.PathLike[str]) -> None:
    """Raise :class:`ModelLoadError` unless ``path`` is a regular file."""
    shown = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ModelLoadError(f"{shown}: no such file") from None
    except ValueError:  # a NUL byte
        raise ModelLoadError(f"{shown!r}: no file can have this name") from None
    except OSError as exc:
        raise ModelLoadError(f"{shown}: cannot read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise ModelLoadError(f"{shown}: is a directory, expected an .onnx file")
    if not stat.S_ISREG(mode):
        raise ModelLoadError(f"{shown}: not a regular file (a pipe, device or socket); save the "
                             "model to a file and give its path")
