"""``?path=``: a model file under the server's model folder, and nothing else.

:func:`model_path` is the only way a client's path reaches a file: it
returns a regular file inside the folder (symlinks followed, ``..``
collapsed, then checked), and every other case — outside the folder,
existing or not, missing inside, a folder, a link out — gets the same 404
with the same message, so no answer tells which files exist outside the
folder. Control characters (NUL included) never get here: the parameter
parser refuses them (400, :func:`perfseer_rt.serve.params.clean`).
"""

from __future__ import annotations

from pathlib import Path

from perfseer_rt.serve.errors import HTTPError

#: Longest path accepted (bytes of its UTF-8), as Linux's PATH_MAX.
MAX_PATH_BYTES = 4096


def model_path(model_dir: Path | None, rel: str) -> Path:
    """The file ``rel`` names under ``model_dir``.

    Raises:
        HTTPError: 403 when the server reads no paths; 404, always the same,
            for anything that is not a regular file inside the folder.
    """
    if model_dir is None:
        raise HTTPError(403, "this server reads no paths (start it with --model-dir)",
                        "PathNotAllowed")
    missing = HTTPError(404, f"no model file {rel!r} under the model folder (a path is "
                        "relative to the folder and stays inside it)", "ModelNotFound")
    if not rel or len(rel.encode("utf-8", "replace")) > MAX_PATH_BYTES:
        raise missing
    root = model_dir.resolve()
    try:
        target = (root / rel).resolve(strict=True)
        inside = target.is_relative_to(root) and target.is_file()
    except (OSError, RuntimeError, ValueError):
        inside = False
    if not inside:
        raise missing
    return target
