"""No module of lab/, runner/ or tasks.py imports another module's private name (issue 44): a helper that two
modules share is public in its owner (``from lab.validate.verdict import host_field``), and a ``_name`` is used
only in the module that defines it. Found on the source, by its imports: ``from X import _name`` and
``X._name`` where X is an imported project module, at any depth of the file."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Each private name ``path`` takes from another project module: 'LINE: from X import _y' or 'LINE: X._y'."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pkg = path.relative_to(root).with_suffix("").parts[:-1]
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = (
                ".".join([*pkg[: len(pkg) - node.level + 1], *([node.module] if node.module else [])])
                if node.level
                else (node.module or "")
            )
            if base.split(".")[0] not in ("lab", "runner"):
                continue
            for a in node.names:
                if private(a.name):
                    found.append(f"{node.lineno}: from {base} import {a.name}")
                else:
                    modules.add(a.asname or a.name)  # maybe a module: its attributes are checked below
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("lab", "runner") and a.asname:
                    modules.add(a.asname)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names():
    paths = [*sorted((ROOT / "lab").rglob("*.py")), *sorted((ROOT / "runner").rglob("*.py")), ROOT / "tasks.py"]
    found = {str(p.relative_to(ROOT)): private_imports(p) for p in paths}
    assert {k: v for k, v in found.items() if v} == {}


def test_a_planted_private_import_is_found(tmp_path):
    (tmp_path / "lab" / "validate").mkdir(parents=True)
    planted = tmp_path / "lab" / "validate" / "fleet.py"
    planted.write_text(
        "from lab.validate.verdict import _fmt, FAIL\n"
        "from .gpuchecks import _gpu_checks\n"
        "from lab.validate import hostchecks as hc\n"
        "import json\n"
        "def f():\n    return hc._stack_checks(json._default_decoder)\n",
        encoding="utf-8",
    )
    assert private_imports(planted, tmp_path) == [
        "1: from lab.validate.verdict import _fmt",
        "2: from lab.validate.gpuchecks import _gpu_checks",
        "6: hc._stack_checks",
    ]
