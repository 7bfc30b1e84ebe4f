"""The window lays out and wires; the open conversation (ui/window/conversation.py)
is what the window's helpers act through. These read the code: a helper that
takes the window twice over (its panes, and a protocol for the same object),
or actions drifting back into MainWindow, fail here."""

from __future__ import annotations

import ast
from pathlib import Path

WINDOW = Path(__file__).resolve().parents[2] / "app" / "gambit" / "ui" / "window"
MOST_WINDOW_METHODS = 25


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]


def test_the_main_window_lays_out_and_wires_only() -> None:
    (window,) = [c for c in _classes(WINDOW / "main_window.py") if c.name == "MainWindow"]
    methods = [n.name for n in window.body if isinstance(n, ast.FunctionDef)]
    assert len(methods) <= MOST_WINDOW_METHODS, methods
    # The actions on a conversation are the conversation's.
    assert not {"regenerate", "continue_reply", "send_edited", "new_conversation"} & set(methods)


def test_no_helper_reaches_the_window_through_a_host_protocol() -> None:
    hosts = [
        f"{path.name}: {c.name}"
        for path in sorted(WINDOW.glob("*.py"))
        for c in _classes(path)
        if any(isinstance(b, ast.Name) and b.id == "Protocol" for b in c.bases)
    ]
    assert hosts == []


def test_no_helper_is_given_the_window_twice() -> None:
    """A call passing ``self`` twice (``Helper(self, self, ...)``) in the window."""
    tree = ast.parse((WINDOW / "main_window.py").read_text())
    twice = [
        ast.unparse(call)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and sum(isinstance(a, ast.Name) and a.id == "self" for a in call.args) > 1
    ]
    assert twice == []
