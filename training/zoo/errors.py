"""Errors raised by the model zoo.

:class:`SpecError` is both a :class:`ValueError` (so plain ``except ValueError``
works) and a :class:`perfseer_rt.errors.PerfSeerError` (so the project CLI
reports it on one line with exit code 2).
"""

from __future__ import annotations

from perfseer_rt.errors import PerfSeerError


class SpecError(PerfSeerError, ValueError):
    """A model spec string, config JSON or parameter value is invalid.

    The message names the bad token or value and lists the valid choices.
    """
