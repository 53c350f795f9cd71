"""``perfseer-rt serve`` without the ``[serve]`` extra: one line naming the
extra, exit 2 (a real process in which the web stack cannot be imported;
runs whether or not the extra is installed here)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# a process where `import <module>` fails as if the package were not installed
# (sys.modules[name] = None makes the import raise ImportError naming it)
RUN = """
import sys
sys.modules[{module!r}] = None
from perfseer_rt.cli import main
main(["serve", "--port", "0"])
"""


@pytest.mark.parametrize("module", ["uvicorn", "fastapi", "pydantic", "prometheus_client",
                                    "python_multipart"])
def test_serve_without_the_extra_says_which_to_install(module):
    res = subprocess.run([sys.executable, "-c", RUN.format(module=module)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert "[serve]" in res.stderr and f"{module} is missing" in res.stderr
    assert "pip install 'perfseer-rt[serve]'" in res.stderr  # the CPU build is installed here
    assert res.stdout == ""
