"""The service's one error shape: every 4xx and 5xx answers
``{"error": <one line>, "type": <a class name>}`` (:class:`ErrorBody` on the
OpenAPI page), the same line the CLI prints for the same mistake.

No web framework here: the worker processes import this module too.
"""

from __future__ import annotations

import math
from typing import Any

from perfseer_rt.errors import (
    DeviceError,
    GraphError,
    LimitError,
    MetricError,
    ModelLoadError,
    OptionError,
    PerfSeerError,
    ShapeError,
)


class HTTPError(Exception):
    """An answer other than 200: ``status``, the one-line ``message``, the
    ``kind`` clients may switch on, and extra headers (``Retry-After``)."""

    def __init__(self, status: int, message: str, kind: str = "HTTPError",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.headers = headers or {}

    def body(self) -> dict[str, str]:
        return {"error": self.message, "type": self.kind}


#: A user error's status: the model cannot be read or costed -> 422; a bad
#: option, device or metric -> 400 (the request is wrong, not a resource
#: missing); extraction's node cap or time limit -> 422.
_STATUS: tuple[tuple[type[PerfSeerError], int], ...] = (
    (ModelLoadError, 422), (ShapeError, 422), (GraphError, 422), (LimitError, 422),
    (OptionError, 400), (MetricError, 400), (DeviceError, 400))


def status_for(exc: PerfSeerError) -> int:
    return next((s for cls, s in _STATUS if isinstance(exc, cls)), 400)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def from_user_error(exc: PerfSeerError) -> HTTPError:
    return HTTPError(status_for(exc), one_line(exc), type(exc).__name__)


def retry_after(seconds: float) -> dict[str, str]:
    """A ``Retry-After`` header: whole seconds, at least 1, at most 600."""
    return {"Retry-After": str(min(600, max(1, math.ceil(seconds))))}


def busy(status: int, message: str, wait_s: float) -> HTTPError:
    """429 (no room to queue) or 503 (waited past the limit), with Retry-After."""
    return HTTPError(status, message, "Busy", retry_after(wait_s))


def validation_message(errors: list[dict[str, Any]]) -> str:
    """FastAPI's validation errors as one line: ``query batch: ...; ...``."""
    parts = []
    for e in errors:
        where = " ".join(str(x) for x in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg', 'invalid')}".strip(": "))
    return one_line("; ".join(parts) or "invalid request")
