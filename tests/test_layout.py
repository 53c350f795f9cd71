"""tests/README.md maps every test file to the package it tests (the
documented equivalent of a mirrored tree); a new test file must be listed."""

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_every_test_file_is_mapped_to_its_package():
    table = (HERE / "README.md").read_text()
    listed = set(re.findall(r"`(test_\w+\.py)`", table))
    present = {p.name for p in HERE.glob("test_*.py")}
    assert present - listed == set(), "add these to tests/README.md"
    assert listed - present == set(), "tests/README.md lists files that are gone"
