"""Replies rendered as Markdown by Qt's own reader, on a real ChatView: tables,
links opened in the system browser (never inside the app), code blocks with a
Copy link, and the green wash over characters from accepted draft tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QObject, QPoint, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QGuiApplication, QTextCursor, QTextTable
from pytestqt.qtbot import QtBot

from gambit.ui.window import markdown
from gambit.ui.window.chat_view import ChatMessage, ChatView

CODE = 'def hello() -> None:\n    print("hi")'
REPLY = (
    "Here is a table:\n\n"
    "| colour | hex |\n|---|---|\n| red | #f00 |\n| blue | #00f |\n\n"
    "See [the docs](https://example.com/docs) for more.\n\n"
    f"```python\n{CODE}\n```\n\nDone."
)


class _UrlCatcher(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


@pytest.fixture
def view(qtbot: QtBot) -> Iterator[ChatView]:
    v = ChatView()
    qtbot.addWidget(v)
    v.resize(640, 720)
    v.show()
    qtbot.waitExposed(v)
    yield v
    v.close()


@pytest.fixture
def browser() -> Iterator[_UrlCatcher]:
    catcher = _UrlCatcher()
    for scheme in ("https", "file"):
        QDesktopServices.setUrlHandler(scheme, catcher, "open")
    try:
        yield catcher
    finally:
        for scheme in ("https", "file"):
            QDesktopServices.unsetUrlHandler(scheme)


def _anchors(view: ChatView) -> dict[str, int]:
    """href -> document position of the anchor's first character."""
    found: dict[str, int] = {}
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            href = fragment.charFormat().anchorHref()
            if href and href not in found:
                found[href] = fragment.position()
            it += 1
        block = block.next()
    return found


def _click_at(qtbot: QtBot, view: ChatView, position: int) -> None:
    cursor = QTextCursor(view.document())
    cursor.setPosition(position + 1)
    view.ensureCursorVisible()
    rect = view.cursorRect(cursor)
    point = QPoint(rect.left() - 2, rect.center().y())
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_a_reply_renders_a_table_a_link_and_a_code_block(view: ChatView) -> None:
    view.set_messages([ChatMessage("user", "Show me"), ChatMessage("assistant", REPLY)])
    doc = view.document()
    tables = [f for f in doc.rootFrame().childFrames() if isinstance(f, QTextTable)]
    assert len(tables) == 1 and (tables[0].rows(), tables[0].columns()) == (3, 2)
    assert tables[0].cellAt(1, 0).firstCursorPosition().block().text() == "red"
    anchors = _anchors(view)
    assert "https://example.com/docs" in anchors
    assert "gambit-copy:1.0" in anchors  # message 1's first code block
    text = view.toPlainText()
    assert CODE in text and "```" not in text and "|---|" not in text
    assert "the docs" in text and "(https://" not in text


def test_copy_puts_the_code_on_the_clipboard(qtbot: QtBot, view: ChatView) -> None:
    view.set_messages([ChatMessage("assistant", REPLY)])
    QGuiApplication.clipboard().setText("something else")
    _click_at(qtbot, view, _anchors(view)["gambit-copy:0.0"])
    qtbot.waitUntil(lambda: QGuiApplication.clipboard().text() == CODE, timeout=2000)


def test_a_link_opens_in_the_system_browser_not_in_the_view(
    qtbot: QtBot, view: ChatView, browser: _UrlCatcher
) -> None:
    view.set_messages([ChatMessage("assistant", REPLY)])
    before = view.toPlainText()
    _click_at(qtbot, view, _anchors(view)["https://example.com/docs"])
    qtbot.waitUntil(lambda: bool(browser.urls), timeout=2000)
    assert [u.toString() for u in browser.urls] == ["https://example.com/docs"]
    assert view.source().isEmpty() and view.toPlainText() == before  # no navigation


def test_only_web_and_mail_links_are_opened(
    qtbot: QtBot, view: ChatView, browser: _UrlCatcher
) -> None:
    view.set_messages([ChatMessage("assistant", "[passwords](file:///etc/passwd)")])
    _click_at(qtbot, view, _anchors(view)["file:///etc/passwd"])
    qtbot.wait(100)
    assert browser.urls == []


def test_raw_html_in_a_reply_is_text(view: ChatView) -> None:
    view.set_messages([ChatMessage("assistant", "a <b>bold</b> claim")])
    assert view.toPlainText().endswith("a <b>bold</b> claim")


def _washed(view: ChatView, word: str) -> bool:
    at = view.toPlainText().index(word)
    cursor = QTextCursor(view.document())
    for i in range(at, at + len(word)):
        cursor.setPosition(i + 1)  # the format of the character before the cursor
        if cursor.charFormat().background().color() != markdown.DRAFT_BG:
            return False
    return True


def test_drafted_characters_keep_their_wash_in_text_tables_and_code(view: ChatView) -> None:
    drafted = [False] * len(REPLY)
    for word in ("table", "blue", "print", "more"):
        at = REPLY.index(word)
        drafted[at : at + len(word)] = [True] * len(word)
    view.set_messages([ChatMessage("assistant", REPLY, drafted)])
    for word in ("table", "blue", "print", "more"):
        assert _washed(view, word), word
    assert not _washed(view, "Here") and not _washed(view, "red")
    view.set_highlight(False)
    assert not _washed(view, "table")


def test_the_streaming_reply_renders_as_it_grows(qtbot: QtBot, view: ChatView) -> None:
    view.set_messages([ChatMessage("user", "Table please")])
    view.begin_reply()
    view.add_to_reply("| a | b |\n|---|---|\n", (False,) * 20)
    view.flush_reply()
    view.add_to_reply("| 1 | 2 |\n\n```\nx = 1", (True,) * 20)
    view.flush_reply()
    assert markdown.CARET in view.toPlainText()
    view.end_reply("2 tokens")
    text = view.toPlainText()
    assert markdown.CARET not in text and text.endswith("2 tokens")
    assert text.startswith("You\nTable please\nGambit")
    assert "gambit-copy:1.0" in _anchors(view)
