"""The import layering of README.md ("Layers"), checked on the source: runner never imports lab,
lab imports only the contracts runner.rundir and runner.source from runner, tasks.py imports only lab, each lab module only its own
and the allowed layers, and no import cycle among lab modules (function-level imports included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB_MODULES = sorted(p.stem for p in (ROOT / "lab").glob("*.py") if p.stem != "__init__")


def imports(path: Path) -> set[str]:
    """Every project module ``path`` imports, at any depth of the file: 'lab.x', 'runner.y.z', 'lab'."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:   # relative: resolve against the file's package
                pkg = path.relative_to(ROOT).with_suffix("").parts[:-node.level]
                base = ".".join([*pkg, node.module])
            else:
                base = node.module
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in ("lab", "runner")}


def lab_deps(path: Path) -> set[str]:
    return {m.split(".")[1] for m in imports(path) if m.startswith("lab.") and m.split(".")[1] in LAB_MODULES}


def layers() -> tuple[dict[str, str], dict[str, set[str]]]:
    """(module -> layer, layer -> layers it may import) from README.md's Layers table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Layers", 1)[1].split("\n## ", 1)[0]
    layer_of, allowed = {}, {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---") or not line.startswith("|"):
            continue
        name = cells[0]
        allowed[name] = {name} | {x.strip() for x in cells[2].split(",") if x.strip()}
        for mod in re.findall(r"`(\w+)`", cells[1]):
            assert mod not in layer_of, f"README.md Layers: {mod} is in two layers"
            layer_of[mod] = name
    return layer_of, allowed


def test_the_readme_table_names_real_modules_and_layers():
    layer_of, allowed = layers()
    assert set(allowed) == {"foundation", "catalogues", "hosts", "results", "operations"}
    assert set(layer_of) - set(LAB_MODULES) == set(), "README.md Layers names a module lab/ does not have"
    for name, may in allowed.items():
        assert may <= set(allowed), f"README.md Layers: {name} may import an unknown layer"


def test_runner_never_imports_lab():
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imports(p) if m.split(".")[0] == "lab")
           for p in (ROOT / "runner").rglob("*.py")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_lab_imports_only_the_contracts_from_runner():
    import runner.rundir
    import runner.source

    found = {str(p.relative_to(ROOT)): sorted(m for m in imports(p) if m.split(".")[0] == "runner")
             for p in (ROOT / "lab").rglob("*.py")}
    allowed = {"runner"}
    for mod in (runner.rundir, runner.source):
        allowed |= {mod.__name__} | {f"{mod.__name__}.{n}" for n in dir(mod)}
    assert {k: v for k, v in found.items() if set(v) - allowed} == {}


def test_tasks_imports_only_lab():
    assert {m for m in imports(ROOT / "tasks.py") if not m.startswith("lab")} == set()


def test_each_lab_module_imports_only_its_own_and_the_allowed_layers():
    layer_of, allowed = layers()
    wrong = []
    for mod in LAB_MODULES:
        mine = layer_of.get(mod, "operations")
        for dep in sorted(lab_deps(ROOT / "lab" / f"{mod}.py")):
            theirs = layer_of.get(dep, "operations")
            if theirs not in allowed[mine]:
                wrong.append(f"lab.{mod} ({mine}) imports lab.{dep} ({theirs})")
    assert wrong == []


def test_no_import_cycles_among_lab_modules():
    graph = {mod: lab_deps(ROOT / "lab" / f"{mod}.py") - {mod} for mod in LAB_MODULES}
    state, cycles = {}, []

    def visit(mod, path):
        state[mod] = "open"
        for dep in sorted(graph[mod]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[mod] = "done"

    for mod in LAB_MODULES:
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def test_the_checks_see_what_they_check(tmp_path):
    """The import reader finds function-level and relative imports (so the tests above can fail)."""
    (tmp_path / "x.py").write_text("def f():\n    from lab import report\n    import runner.cli\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert imports(tmp_path / "x.py") == {"lab", "lab.report", "runner.cli"}
    finally:
        ROOT = saved
