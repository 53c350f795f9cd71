"""The one error the byod command reports: a line that names the row and column."""

from __future__ import annotations


class ByodError(ValueError):
    """Bad input to ``python -m training.byod``: a malformed CSV, an unknown
    model spec, a missing ONNX file, a bad row selection. The message is one
    line that names the file, the row (1-based data row, as a spreadsheet
    shows it after the header) and the column, and says what was expected.
    The command prints it and exits with status 2.
    """
