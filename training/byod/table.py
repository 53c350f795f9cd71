"""Reading a measurements CSV: columns checked, numbers parsed, rows selected.

Rows are numbered from 1, the first data row after the header (as a
spreadsheet shows them, minus the header line); every error names the row,
the column and the file, in one line (:class:`~training.byod.errors.ByodError`).

Row selections (``--train-rows``, ``--test-rows``) use the same numbers:
comma-separated single rows and inclusive ranges, e.g. ``1-900`` or
``1-10,20,31-40``.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from training.byod.errors import ByodError
from training.seernet.evaluate import metric_unit


@dataclass
class Measurements:
    """The parsed CSV: one entry per data row, in file order.

    Attributes:
        path: the CSV file.
        models: the model column's text per row.
        batches: batch size per row.
        metrics: metric name -> values per row (``nan`` = empty cell).
        row_numbers: the 1-based row number of each entry (for messages).
    """

    path: Path
    models: list[str]
    batches: list[int]
    metrics: dict[str, list[float]]
    row_numbers: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.models)


def read_csv(path: str | Path, model_column: str, metric_columns: Sequence[str],
             batch_column: str | None = None, batch: int | None = None) -> Measurements:
    """Read and check a measurements CSV.

    Args:
        path: the CSV (a header line, then one row per measured configuration).
        model_column: column holding an ONNX path or a zoo spec per row.
        metric_columns: metric columns; each name must end in a unit suffix
            (``_ms``, ``_mb``, ``_mj``, ...); values are positive numbers, an
            empty cell means "not measured".
        batch_column: column of batch sizes, or None to use ``batch``.
        batch: the batch size of every row when there is no batch column
            (default 1).

    Raises:
        ByodError: missing file or column, metric without unit suffix,
            unparsable or non-positive number, empty model cell (names row
            and column).
    """
    path = Path(path)
    if not path.is_file():
        raise ByodError(f"no CSV file {str(path)!r}")
    if not metric_columns:
        raise ByodError("no metric column given; name one or more with --metric COL (e.g. latency_ms)")
    if batch_column is not None and batch is not None:
        raise ByodError("give either --batch-column or --batch, not both")
    for m in metric_columns:
        try:
            metric_unit(m)
        except ValueError as exc:
            raise ByodError(f"{path}: {exc}; rename the column") from None
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            raise ByodError(f"{path}: empty file; expected a header line naming the columns")
        header = [h.strip() for h in header]
        wanted = [model_column, *metric_columns] + ([batch_column] if batch_column else [])
        for col in wanted:
            if col not in header:
                raise ByodError(f"{path}: missing column {col!r}; the header has: {', '.join(header)}")
        dup = [c for c in set(wanted) if header.count(c) > 1]
        if dup:
            raise ByodError(f"{path}: column {dup[0]!r} appears more than once in the header")
        pos = {c: header.index(c) for c in wanted}
        out = Measurements(path, [], [], {m: [] for m in metric_columns}, [])
        for row_no, row in enumerate(reader, start=1):
            if not row or all(not c.strip() for c in row):
                continue  # blank line
            if len(row) != len(header):
                raise ByodError(f"{path}: row {row_no} (line {row_no + 1}) has {len(row)} fields, "
                                f"the header has {len(header)}")
            model = row[pos[model_column]].strip()
            if not model:
                raise ByodError(f"{path}: row {row_no} (line {row_no + 1}), column {model_column!r}: "
                                "empty; expected an ONNX path or a zoo spec")
            b = _parse_batch(row[pos[batch_column]], path, row_no, batch_column) if batch_column \
                else (1 if batch is None else int(batch))
            for m in metric_columns:
                out.metrics[m].append(_parse_metric(row[pos[m]], path, row_no, m))
            out.models.append(model)
            out.batches.append(b)
            out.row_numbers.append(row_no)
    if not out.models:
        raise ByodError(f"{path}: no data rows after the header")
    return out


def _parse_batch(text: str, path: Path, row: int, col: str) -> int:
    t = text.strip()
    try:
        value = float(t)
        ok = value == int(value) and value >= 1
    except (ValueError, OverflowError):
        ok = False
    if not ok:
        raise ByodError(f"{path}: row {row} (line {row + 1}), column {col!r}: {t!r} is not a "
                        "batch size; expected a positive integer")
    return int(value)


def _parse_metric(text: str, path: Path, row: int, col: str) -> float:
    t = text.strip()
    if not t:
        return math.nan  # not measured
    try:
        value = float(t)
    except ValueError:
        raise ByodError(f"{path}: row {row} (line {row + 1}), column {col!r}: {t!r} is not a "
                        "number") from None
    if not math.isfinite(value) or value <= 0:
        raise ByodError(f"{path}: row {row} (line {row + 1}), column {col!r}: {t!r} is not a "
                        "positive finite number (leave the cell empty for a missing measurement)")
    return value


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_rows(spec: str, n_rows: int, option: str = "--train-rows") -> list[int]:
    """Row selection ``"1-900,950"`` -> sorted 0-based positions.

    Raises:
        ByodError: malformed part, empty or reversed range, row out of range.
    """
    picked: set[int] = set()
    for part in spec.split(","):
        if not part.strip():
            continue
        m = _RANGE.match(part)
        if not m:
            raise ByodError(f"{option} {spec!r}: bad part {part.strip()!r}; expected rows like "
                            "1-900 or 1-10,20,31-40 (rows count from 1 after the header)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if lo < 1 or hi < lo:
            raise ByodError(f"{option} {spec!r}: bad range {part.strip()!r}; rows count from 1 "
                            "and a range reads low-high")
        if hi > n_rows:
            raise ByodError(f"{option} {spec!r}: row {hi} is past the last data row ({n_rows})")
        picked.update(range(lo - 1, hi))
    if not picked:
        raise ByodError(f"{option} {spec!r}: selects no rows")
    return sorted(picked)
