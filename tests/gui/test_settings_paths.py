"""Every "Settings → Page → Control" a message names leads somewhere: the
paths are collected from every string of the package (its messages,
tooltips, help and docstrings), the README and the user docs, and each page
and control is found in the real Settings dialog (offscreen Qt)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from PySide6.QtWidgets import QAbstractButton, QGroupBox, QLabel, QWidget
from pytestqt.qtbot import QtBot

import gambit
from gambit.storage.settings import Settings
from gambit.ui.settings.settings_dialog import SettingsDialog

PACKAGE = Path(gambit.__file__).parent
ROOT = PACKAGE.parents[1]
# What users read besides the messages: the README and the user docs (not the
# decision records, which keep the words of their day).
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ARROW = " → "
# A mention and what follows it, enough for the longest page and control names
MENTION = re.compile(r"(?=(Settings → [^\n]{0,60}))")


def _strings(path: Path) -> list[str]:
    """The string literals of a module, f-strings with their fields as "{}"."""
    strings: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            strings.append(
                "".join(
                    v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                    for v in node.values
                )
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
    return strings


def settings_paths() -> dict[str, str]:
    """Each "Settings → …" mention (with the text after it) and where it is."""
    sources = {str(p.relative_to(PACKAGE)): _strings(p) for p in sorted(PACKAGE.rglob("*.py"))}
    for doc in USER_DOCS:
        sources[str(doc.relative_to(ROOT))] = [doc.read_text(encoding="utf-8")]
    found: dict[str, str] = {}
    for where, strings in sources.items():
        for text in strings:
            # (a sentence wrapped over lines in a document reads as one line)
            for mention in MENTION.findall(re.sub(r"\s*\n\s*", " ", text)):
                found.setdefault(mention, where)
    return found


def _text(widget: QWidget) -> str:
    if isinstance(widget, QLabel | QAbstractButton):
        text = widget.text()
    elif isinstance(widget, QGroupBox):
        text = widget.title()
    else:
        return ""
    return text.replace("&", "").removesuffix(":").strip()


def _longest_prefix(text: str, names: set[str]) -> str | None:
    matches = [n for n in names if n and text.startswith(n)]
    return max(matches, key=len) if matches else None


@pytest.fixture
def dialog(qtbot: QtBot) -> SettingsDialog:
    d = SettingsDialog(Settings())
    qtbot.addWidget(d)
    return d


def test_every_settings_path_a_message_names_exists(dialog: SettingsDialog) -> None:
    tabs = dialog.tabs
    pages = {tabs.tabText(i).replace("&", ""): tabs.widget(i) for i in range(tabs.count())}
    paths = settings_paths()
    # The collection sees the messages it is meant to check (not an empty pass).
    assert len(paths) >= 8, sorted(paths)
    assert sum(m.count(ARROW) >= 2 for m in paths) >= 3, sorted(paths)  # pages and controls
    wrong: list[str] = []
    for mention, where in paths.items():
        rest = mention.removeprefix("Settings" + ARROW)
        page = _longest_prefix(rest, set(pages))
        if page is None:
            wrong.append(f"{where}: {mention!r} names no page of {sorted(pages)}")
            continue
        rest = rest.removeprefix(page)
        if not rest.startswith(ARROW):
            continue  # the page alone
        controls = {_text(w) for w in pages[page].findChildren(QWidget)}
        if _longest_prefix(rest.removeprefix(ARROW), controls) is None:
            wrong.append(f"{where}: {mention!r} names no control of the {page} page")
    assert not wrong, "\n".join(wrong)
