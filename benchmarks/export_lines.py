"""The protocol of the export scripts that ``benchmarks.real_exports`` runs
under other interpreters (``tf_export.py``, ``ultralytics_export.py``,
``optimum_export.py``, ``jax_export.py``): one line per model on stdout,
``ok NAME`` or ``failed NAME: error``. Standard library only: the scripts
import it as ``export_lines`` (run as files, their folder is on the path)
under interpreters that may not have this project's packages."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def report(names: Iterable[str], export: Callable[[str], object]) -> int:
    """Export each name with ``export(name)`` and print its line; 0."""
    for name in names:
        try:
            export(name)
            print(f"ok {name}", flush=True)
        except Exception as exc:  # noqa: BLE001 - the exporter's failure: reported
            print(f"failed {name}: {type(exc).__name__}: {exc}"[:400].replace("\n", " "),
                  flush=True)
    return 0
