"""The import graph: no cycles, click only in the CLI, imports at the top.

The graph comes from grimp (every ``import`` statement, function-level ones
included, ``if TYPE_CHECKING:`` ones excluded), so a cycle hidden behind an
import inside a function is still a cycle here.
"""

import ast
import re
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")  # the [test] extra
nx = pytest.importorskip("networkx")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("perfseer_rt", "training", "benchmarks")
#: a function-level import is allowed when a comment within this many lines
#: above it (or on its line) says it is deliberately lazy
LAZY_WINDOW = 4
#: paths whose function-level imports are not checked yet (none)
NOT_YET: tuple[str, ...] = ()
#: the trees whose imports must be at the top (benchmarks/ is not yet checked)
TOP_LEVEL_IMPORT_TREES = ("perfseer_rt", "training")


@pytest.fixture(scope="module")
def graph(monkeypatch_module=None):
    import sys

    sys.path.insert(0, str(ROOT))  # training/ and benchmarks/ are not installed packages
    try:
        return grimp.build_graph(*PACKAGES, include_external_packages=True,
                                 exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))


def module_cycles(g) -> list[list[str]]:
    """Every strongly connected set of our own modules (a cycle), sorted."""
    dg = nx.DiGraph()
    ours = {m for m in g.modules if m.split(".")[0] in PACKAGES}
    for m in ours:
        dg.add_node(m)
        dg.add_edges_from((m, i) for i in g.find_modules_directly_imported_by(m) if i in ours)
    return sorted(sorted(c) for c in nx.strongly_connected_components(dg) if len(c) > 1)


def test_no_import_cycle(graph):
    assert module_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    """The check above can fail: a two-module package importing itself in a
    circle (one side inside a function, as hidden cycles were) is found."""
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyclepkg import a\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    g = grimp.build_graph("cyclepkg", cache_dir=None)
    dg = nx.DiGraph((m, i) for m in g.modules for i in g.find_modules_directly_imported_by(m))
    assert [sorted(c) for c in nx.strongly_connected_components(dg) if len(c) > 1] == \
        [["cyclepkg.a", "cyclepkg.b"]]


def test_click_lives_only_in_the_cli(graph):
    users = {m for m in graph.find_modules_that_directly_import("click")
             if m.startswith("perfseer_rt.")}
    assert users, "the CLI imports click"
    assert {m for m in users if not m.startswith("perfseer_rt.cli")} == set()


def _function_level_imports(path: Path) -> list[tuple[int, str]]:
    src = path.read_text()
    lines = src.split("\n")
    found = []
    for fn in ast.walk(ast.parse(src)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    around = "\n".join(lines[max(0, node.lineno - 1 - LAZY_WINDOW):node.lineno])
                    if not re.search(r"#.*\blazy\b", around, re.I):
                        found.append((node.lineno, lines[node.lineno - 1].strip()))
    return sorted(set(found))


@pytest.mark.parametrize("tree", TOP_LEVEL_IMPORT_TREES)
def test_imports_are_at_the_top(tree):
    """perfseer_rt/ and training/: an import inside a function says why it is lazy."""
    paths = sorted((ROOT / tree).rglob("*.py"))
    assert paths
    bad = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(NOT_YET):
            continue
        bad += [f"{rel}:{ln}: {text}" for ln, text in _function_level_imports(path)]
    assert bad == []


def test_the_import_check_finds_an_unexplained_function_level_import(tmp_path):
    """The check above can fail: an import inside a function (or a method) is
    found unless a comment within LAZY_WINDOW lines above it says "lazy"."""
    src = tmp_path / "m.py"
    src.write_text("import os\n\n\n"
                   "def f():\n    import json\n    return json\n\n\n"
                   "class C:\n    def g(self):\n        from pathlib import Path\n        return Path\n\n\n"
                   "def h():\n    # lazy: heavy and optional\n    import sqlite3\n    return sqlite3\n\n\n"
                   "def k():\n    import csv  # lazy: rarely used\n    return csv\n")
    assert _function_level_imports(src) == [(5, "import json"), (11, "from pathlib import Path")]
