"""The conversation, rendered as one rich-text document.

Finished messages are rendered once; the streaming reply is re-rendered in
place (from a saved cursor position to the end) on the window's repaint
timer, never once per token. With even streaming on (``StreamPacer``), a
round's text is revealed over the time a round takes instead of at once.
Messages are Markdown (``markdown.render``, Qt's own reader). Links open in
the system browser (http, https and mailto only: replies are untrusted
text), never inside the app; a code block's "Copy" link puts its code on the
clipboard.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from PySide6.QtCore import QUrl, Slot
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocumentFragment,
)
from PySide6.QtWidgets import QTextBrowser, QWidget

from gambit.engine.pacing import StreamPacer
from gambit.storage.reply_stats import reply_footer as reply_footer  # (re-exported)
from gambit.ui import markdown

log = logging.getLogger(__name__)

OPENABLE_SCHEMES: Final = frozenset({"http", "https", "mailto"})
MESSAGE_GAP: Final = 14  # px under each message


@dataclass
class ChatMessage:
    role: str
    text: str
    drafted: list[bool] = field(default_factory=list)
    footer: str = ""  # reply_footer(): "128 tokens · 95.0 tok/s · … · 1.42× vs plain"


class ChatView(QTextBrowser):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setOpenLinks(False)  # every click comes to _on_anchor_clicked
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._on_anchor_clicked)
        self.setPlaceholderText("Start the conversation below.")
        self.document().setDocumentMargin(16)
        self.highlight_drafted = True
        # Even streaming: bursts of tokens revealed over a round's time.
        self.pacing = True
        self.pacer = StreamPacer()
        self.clock: Callable[[], float] = time.monotonic
        self.messages: list[ChatMessage] = []
        self._streaming: ChatMessage | None = None
        self._stream_anchor = 0
        self._stream_dirty = False
        self._code: dict[str, str] = {}  # copy address -> code block text
        self.last_copied = ""

    # ---- whole conversation
    def set_messages(self, messages: list[ChatMessage]) -> None:
        self.messages = list(messages)
        self._streaming = None
        self._render_all()

    def append_message(self, message: ChatMessage) -> None:
        self.messages.append(message)
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._insert_message(cursor, message, len(self.messages) - 1)
        self._scroll_to_end()

    def set_highlight(self, on: bool) -> None:
        self.highlight_drafted = on
        self._render_all()

    # ---- the streaming reply
    def begin_reply(self) -> ChatMessage:
        self.pacer.reset()
        reply = ChatMessage("assistant", "")
        self.messages.append(reply)
        self._streaming = reply
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._stream_anchor = cursor.position()
        self._render_stream()
        return reply

    def add_to_reply(self, text: str, drafted: tuple[bool, ...], round_s: float = 0.0) -> None:
        """A round's text arrived (``round_s``: how long that round took)."""
        if self._streaming is None:
            return
        if self.pacing:
            self._show(*self.pacer.push(text, drafted, round_s, self.clock()))
        else:
            self._show(text, drafted)

    def flush_reply(self) -> None:
        """Reveal what is due and re-render the streaming reply if it changed
        (called from the window's repaint timer)."""
        if self._streaming is None:
            return
        if self.pacer.pending:
            self._show(*self.pacer.take(self.clock()))
        if self._stream_dirty:
            self._render_stream()

    def set_pacing(self, on: bool) -> None:
        self.pacing = on
        if not on:
            self._show(*self.pacer.flush())

    def streamed(self) -> tuple[str, tuple[bool, ...]]:
        """The streaming reply as far as it arrived, shown or held back, with
        its drafted flags (what is saved); ("", ()) when none streams."""
        if self._streaming is None:
            return "", ()
        text, drafted = self.pacer.held()
        return self._streaming.text + text, (*self._streaming.drafted, *drafted)

    def _show(self, text: str, drafted: tuple[bool, ...] | list[bool]) -> None:
        if self._streaming is None or not text:
            return
        self._streaming.text += text
        self._streaming.drafted.extend(drafted)
        self._stream_dirty = True

    def end_reply(self, footer: str) -> None:
        if self._streaming is None:
            return
        self._show(*self.pacer.flush())
        self._streaming.footer = footer
        self._render_stream(final=True)
        self._streaming = None

    @property
    def streaming(self) -> ChatMessage | None:
        return self._streaming

    # ---- rendering
    def _render_all(self) -> None:
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        self.clear()
        self._code.clear()
        cursor = QTextCursor(self.document())
        for index, m in enumerate(self.messages):
            if m is not self._streaming:
                self._insert_message(cursor, m, index)
        if self._streaming is not None:
            cursor = QTextCursor(self.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            self._stream_anchor = cursor.position()
            self._render_stream()
        if at_end:
            self._scroll_to_end()

    def _render_stream(self, final: bool = False) -> None:
        reply = self._streaming
        if reply is None:
            return
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._stream_anchor)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._insert_message(cursor, reply, self.messages.index(reply), streaming=not final)
        self._stream_dirty = False
        if at_end:
            self._scroll_to_end()

    def _insert_message(
        self, cursor: QTextCursor, m: ChatMessage, index: int, streaming: bool = False
    ) -> None:
        """Insert ``m`` at ``cursor`` (at the end of the document): name, body, footer."""
        who = {"user": "You", "assistant": "Gambit", "system": "System"}.get(m.role, m.role)
        colour = "#3b82f6" if m.role == "user" else "#10b981"
        if m.role == "assistant":
            # while streaming, a caret at the end of the text shows it is still coming
            text = m.text + markdown.CARET if streaming else m.text
            body = markdown.render(text, m.drafted, self.highlight_drafted, key=str(index))
        else:
            body = markdown.render(m.text, None, False, key=str(index))
        self._code.update(body.code_blocks)

        if cursor.position() > 0:  # below the previous message
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        name = QTextCharFormat()
        name.setFontWeight(QFont.Weight.DemiBold)
        name.setForeground(QColor(colour))
        heading = QTextBlockFormat()
        heading.setBottomMargin(4)
        cursor.setBlockFormat(heading)
        cursor.insertText(who, name)
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        body_start = cursor.position()
        cursor.insertFragment(QTextDocumentFragment(body.document))
        first = self.document().findBlock(body_start)
        if first.length() == 1 and first.textList() is None and body_start < cursor.position():
            # a body opening with a list or a table left an empty line under the name
            QTextCursor(first).deletePreviousChar()
        if m.footer:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            footer = QTextCharFormat()
            footer.setForeground(QColor("#9ca3af"))
            footer.setFontPointSize(max(6.0, self.font().pointSizeF() * 0.85))
            cursor.insertText(m.footer, footer)
        gap = cursor.blockFormat()
        gap.setBottomMargin(MESSAGE_GAP)
        cursor.setBlockFormat(gap)

    @Slot(QUrl)
    def _on_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == markdown.COPY_SCHEME:
            code = self._code.get(url.path())
            if code is not None:
                QGuiApplication.clipboard().setText(code)
                self.last_copied = code
            return
        if url.scheme().lower() in OPENABLE_SCHEMES:
            QDesktopServices.openUrl(url)  # the system browser, never inside the app
        else:
            log.info("link not opened (scheme %r): %s", url.scheme(), url.toDisplayString())

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
