"""Sizes a maintainer can hold in mind: every Python module of lab/, runner/ and tasks.py under
MODULE_LINES lines, every function (and method) under FUNCTION_LINES (ast: end_lineno - lineno + 1,
decorators not counted)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES = 400
FUNCTION_LINES = 80


def sources(root: Path) -> list[Path]:
    return sorted(p for d in ("lab", "runner") for p in (root / d).rglob("*.py")) + [root / "tasks.py"]


def module_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def function_lines(path: Path, root: Path) -> dict[str, int]:
    """``path:qualified.name`` -> lines of each function and method in ``path``."""
    rel = path.relative_to(root).as_posix()
    out: dict[str, int] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[f"{rel}:{name}"] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return out


def over(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    modules = {p.relative_to(root).as_posix(): n for p in sources(root) if (n := module_lines(p)) >= MODULE_LINES}
    functions = {k: n for p in sources(root) for k, n in function_lines(p, root).items() if n >= FUNCTION_LINES}
    return modules, functions


def test_every_module_is_under_the_limit():
    modules, _ = over(ROOT)
    assert modules == {}, f"modules of {MODULE_LINES} lines or more (split along a seam): {modules}"


def test_every_function_is_under_the_limit():
    _, functions = over(ROOT)
    assert functions == {}, f"functions of {FUNCTION_LINES} lines or more (split along a seam): {functions}"


def test_the_measure_counts_what_it_says(tmp_path):
    # a planted long module and a long nested method are found (the test is not a formality)
    (tmp_path / "lab").mkdir()
    (tmp_path / "runner").mkdir()
    (tmp_path / "tasks.py").write_text("")
    body = "".join(f"        x{i} = {i}\n" for i in range(FUNCTION_LINES))
    (tmp_path / "lab" / "big.py").write_text("class A:\n    def f(self):\n" + body + "\n" * MODULE_LINES)
    (tmp_path / "runner" / "ok.py").write_text("def g():\n    return 1\n")
    modules, functions = over(tmp_path)
    assert modules == {"lab/big.py": 2 + FUNCTION_LINES + MODULE_LINES}
    assert functions == {"lab/big.py:A.f": FUNCTION_LINES + 1}
