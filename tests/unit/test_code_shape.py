"""The package keeps the shape the restructure left it in: no module over 600
lines and no function over 80, so each still fits in a reader's head."""

from __future__ import annotations

import ast
from pathlib import Path

import gambit

PACKAGE = Path(gambit.__file__).parent
MODULE_LINES_MAX = 600
FUNCTION_LINES_MAX = 80


def _modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert found, PACKAGE
    return found


def test_no_module_is_over_600_lines() -> None:
    long = {}
    for path in _modules():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MODULE_LINES_MAX:
            long[str(path.relative_to(PACKAGE))] = n
    assert not long, f"modules over {MODULE_LINES_MAX} lines: {long}"


def test_no_function_is_over_80_lines() -> None:
    long = {}
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                n = node.end_lineno - node.lineno + 1  # from "def" to its last line
                if n > FUNCTION_LINES_MAX:
                    long[f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {FUNCTION_LINES_MAX} lines: {long}"
