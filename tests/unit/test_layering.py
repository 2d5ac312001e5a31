"""The import layering of README.md ("Layers"), checked on the source.

lab/ is one package per stage of the data path; README's Layers table says which lab package may
import which (and which of runner's two contract modules). This file reads that table and checks the
tree against it: runner never imports lab, tasks.py imports only lab, every lab module imports only its
own package and those its package's row allows (function-level and relative imports included), no
module sits loose in lab/, and there is no import cycle between packages nor between modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER_CONTRACTS = {"runner.rundir", "runner.source"}


def imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every project module ``path`` imports, at any depth of the file: 'lab.x.y', 'runner.y', 'lab'."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                pkg = path.relative_to(root).with_suffix("").parts[: -node.level]
                base = ".".join([*pkg, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in ("lab", "runner")}


def table_rows(readme: Path) -> dict[str, list[str]]:
    """package -> its row's cells (package, holds, may import), from README's Layers table."""
    section = readme.read_text(encoding="utf-8").split("### Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) == 3 and cells[0].startswith("`lab."):
            rows[cells[0].strip("`").removeprefix("lab.")] = cells
    return rows


def read_table(readme: Path) -> dict[str, set[str]]:
    """package -> what it may import (lab packages by name, runner modules by dotted name), from README's Layers."""
    section = readme.read_text(encoding="utf-8").split("### Layers", 1)[1].split("\n## ", 1)[0]
    allowed = {}
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("package", "---") or not cells[0].startswith("`lab."):
            continue
        name = cells[0].strip("`").removeprefix("lab.")
        assert name not in allowed, f"README.md Layers: lab.{name} has two rows"
        allowed[name] = {
            x.strip().strip("`").removeprefix("lab.")
            for x in cells[2].split(",")
            if x.strip() and x.strip() != "nothing"
        }
    return allowed


def packages(root: Path) -> list[str]:
    return sorted(p.parent.name for p in (root / "lab").glob("*/__init__.py"))


def violations(root: Path, allowed: dict[str, set[str]]) -> list[str]:
    """Every import of a lab module that its package's row does not allow, and every package-level cycle."""
    wrong = []
    loose = sorted(p.name for p in (root / "lab").glob("*.py") if p.name != "__init__.py")
    wrong += [f"lab/{name} is in no package" for name in loose]
    for path in sorted((root / "lab").rglob("*.py")):
        rel = path.relative_to(root / "lab").parts
        if len(rel) < 2:
            continue
        mine = rel[0]
        may = allowed.get(mine, set()) | {mine}
        for mod in sorted(imports(path, root)):
            parts = mod.split(".")
            if parts[0] == "runner":
                if mod != "runner" and not any(mod == c or mod.startswith(c + ".") for c in may & RUNNER_CONTRACTS):
                    wrong.append(f"{path.relative_to(root)} (lab.{mine}) imports {mod}")
            elif len(parts) > 1 and parts[1] in packages(root) and parts[1] not in may:
                wrong.append(f"{path.relative_to(root)} (lab.{mine}) imports {mod} (lab.{parts[1]})")
    graph = {p: {d for d in allowed.get(p, set()) if d in allowed} for p in allowed}
    wrong += [f"the Layers table has a cycle: {c}" for c in cycles(graph)]
    return wrong


def cycles(graph: dict[str, set[str]]) -> list[str]:
    state, found = {}, []

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def module_graph(root: Path) -> dict[str, set[str]]:
    """lab module (dotted; a package's ``__init__`` by the package's name) -> lab modules it imports, at any depth
    of the file. ``from lab.x import y`` imports the package lab.x (its ``__init__`` runs) and lab.x.y."""
    mods = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (root / "lab").rglob("*.py")
    }
    return {m: {d for d in imports(p, root) if d in mods and d != m} for m, p in mods.items()}


def test_the_table_names_every_lab_package_and_only_real_ones():
    allowed = read_table(ROOT / "README.md")
    assert set(allowed) == set(packages(ROOT))
    for name, may in allowed.items():
        assert may <= set(allowed) | RUNNER_CONTRACTS, f"README.md Layers: lab.{name} may import an unknown package"


def test_each_package_row_names_every_module_of_the_package():
    """README's Layers table shows the tree: each module of lab/<package>/ is named (in backquotes) in its row."""
    rows = table_rows(ROOT / "README.md")
    missing = {}
    for name in packages(ROOT):
        named = set(re.findall(r"`(\w+)`", rows[name][1]))
        mods = {p.stem for p in (ROOT / "lab" / name).glob("*.py") if p.stem != "__init__"}
        if mods - named:
            missing[name] = sorted(mods - named)
    assert missing == {}, "README.md Layers does not name these modules"


def test_each_package_has_a_docstring_naming_what_it_owns_and_may_import():
    for name in packages(ROOT):
        doc = ast.get_docstring(ast.parse((ROOT / "lab" / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "May import:" in doc and "Entry point" in doc, f"lab/{name}/__init__.py"


def test_every_lab_import_follows_the_table_and_packages_form_no_cycle():
    assert violations(ROOT, read_table(ROOT / "README.md")) == []


def test_no_import_cycles_among_lab_modules():
    assert cycles(module_graph(ROOT)) == []


def code_in_init(path: Path) -> list[str]:
    """What a package's ``__init__.py`` holds beyond its docstring (and ``from __future__``): one entry a statement."""
    body = ast.parse(path.read_text(encoding="utf-8"), str(path)).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [
        f"{path.name}:{node.lineno}: {type(node).__name__}"
        for node in body
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
    ]


def test_each_lab_package_init_only_names_its_public_surface():
    """lab/<package>/__init__.py is its docstring (what it owns, its entry points, what it may import): no code that
    runs on import, no re-exports, so that importing one module of a package loads only that module's imports."""
    found = {str(p.relative_to(ROOT)): code_in_init(p) for p in sorted((ROOT / "lab").glob("*/__init__.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_runner_never_imports_lab():
    bad = {
        str(p.relative_to(ROOT)): sorted(m for m in imports(p) if m.split(".")[0] == "lab")
        for p in (ROOT / "runner").rglob("*.py")
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_runner_contracts_exist():
    import runner.rundir
    import runner.source

    assert {runner.rundir.__name__, runner.source.__name__} == RUNNER_CONTRACTS


def test_tasks_imports_only_lab():
    assert {m for m in imports(ROOT / "tasks.py") if not m.startswith("lab")} == set()


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path


TABLE = {"core": {"runner.rundir"}, "results": {"core"}, "report": {"core", "results"}}


@pytest.mark.parametrize(
    "planted, expected",
    [
        (
            "def f():\n    from lab.report import build\n",
            "lab/results/x.py (lab.results) imports lab.report.build (lab.report)",
        ),
        ("from ..report import build\n", "lab/results/x.py (lab.results) imports lab.report.build (lab.report)"),
        ("import lab.report.build\n", "lab/results/x.py (lab.results) imports lab.report.build (lab.report)"),
        ("from runner import cli\n", "lab/results/x.py (lab.results) imports runner.cli"),
        ("from runner.rundir import STATUS\n", "lab/results/x.py (lab.results) imports runner.rundir"),
    ],
)
def test_a_planted_wrong_way_import_is_found(tmp_path, planted, expected):
    """The checks above can fail: a wrong-way import (function-level, relative, absolute) or a runner module
    the row does not name, planted in a small tree, is reported."""
    root = _tree(
        tmp_path,
        {
            "lab/__init__.py": "",
            "lab/core/__init__.py": "",
            "lab/results/__init__.py": "",
            "lab/report/__init__.py": "",
            "lab/report/build.py": "from lab.results import x\n",
            "lab/results/x.py": planted,
        },
    )
    found = violations(root, TABLE)
    assert any(v.startswith(expected) for v in found), found


def test_a_loose_module_and_a_table_cycle_are_found(tmp_path):
    root = _tree(tmp_path, {"lab/__init__.py": "", "lab/core/__init__.py": "", "lab/stray.py": ""})
    found = violations(root, {"core": {"results"}, "results": {"core"}})
    assert "lab/stray.py is in no package" in found
    assert any(v.startswith("the Layers table has a cycle: core -> results -> core") for v in found)


def test_a_module_cycle_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "lab/__init__.py": "",
            "lab/core/__init__.py": "",
            "lab/core/a.py": "def f():\n    from lab.core import b\n",
            "lab/core/b.py": "from lab.core.a import f\n",
        },
    )
    assert cycles(module_graph(root)) == ["lab.core.a -> lab.core.b -> lab.core.a"]


def test_a_cycle_through_a_package_init_is_found(tmp_path):
    """The cycle issue 44 found: the package's ``__init__`` calls a module that imports the package back."""
    root = _tree(
        tmp_path,
        {
            "lab/__init__.py": "",
            "lab/history/__init__.py": "def f():\n    from lab.history import auto\n",
            "lab/history/auto.py": "from lab.history import quarantine\n",
            "lab/history/quarantine.py": "",
        },
    )
    assert cycles(module_graph(root)) == ["lab.history -> lab.history.auto -> lab.history"]
    assert code_in_init(root / "lab/history/__init__.py") == ["__init__.py:1: FunctionDef"]
    assert code_in_init(root / "lab/__init__.py") == []
