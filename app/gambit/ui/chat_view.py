"""The conversation, rendered as one rich-text document.

Finished messages are rendered once; the streaming reply is re-rendered in
place (from a saved cursor position to the end) on the window's repaint
timer, never once per token.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QTextBrowser, QWidget

from gambit.ui import markdown


@dataclass
class ChatMessage:
    role: str
    text: str
    drafted: list[bool] = field(default_factory=list)
    footer: str = ""  # e.g. "128 tokens · 95 tok/s · 1.42× · stopped"


class ChatView(QTextBrowser):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setOpenExternalLinks(True)
        self.setPlaceholderText("Start the conversation below.")
        self.document().setDocumentMargin(16)
        self.highlight_drafted = True
        self.messages: list[ChatMessage] = []
        self._streaming: ChatMessage | None = None
        self._stream_anchor = 0
        self._stream_dirty = False

    # ---- whole conversation
    def set_messages(self, messages: list[ChatMessage]) -> None:
        self.messages = list(messages)
        self._streaming = None
        self._render_all()

    def append_message(self, message: ChatMessage) -> None:
        self.messages.append(message)
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertHtml(self._message_html(message))
        self._scroll_to_end()

    def set_highlight(self, on: bool) -> None:
        self.highlight_drafted = on
        self._render_all()

    # ---- the streaming reply
    def begin_reply(self) -> ChatMessage:
        reply = ChatMessage("assistant", "")
        self.messages.append(reply)
        self._streaming = reply
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._stream_anchor = cursor.position()
        self._render_stream()
        return reply

    def add_to_reply(self, text: str, drafted: tuple[bool, ...]) -> None:
        if self._streaming is None:
            return
        self._streaming.text += text
        self._streaming.drafted.extend(drafted)
        self._stream_dirty = True

    def flush_reply(self) -> None:
        """Re-render the streaming reply if it changed (called from a timer)."""
        if self._streaming is not None and self._stream_dirty:
            self._render_stream()

    def end_reply(self, footer: str) -> None:
        if self._streaming is None:
            return
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
        self.setHtml(
            "".join(self._message_html(m) for m in self.messages if m is not self._streaming)
        )
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
        cursor.insertHtml(self._message_html(reply, streaming=not final))
        self._stream_dirty = False
        if at_end:
            self._scroll_to_end()

    def _message_html(self, m: ChatMessage, streaming: bool = False) -> str:
        who = {"user": "You", "assistant": "Gambit", "system": "System"}.get(m.role, m.role)
        colour = "#3b82f6" if m.role == "user" else "#10b981"
        if m.role == "assistant":
            # while streaming, a caret at the end of the text shows it is still coming
            text = m.text + "▍" if streaming else m.text
            body = markdown.render(text, m.drafted, self.highlight_drafted)
        else:
            body = markdown.render(m.text, None, False)
        footer = (
            f"<p style='color:#9ca3af; font-size:85%; margin:2px 0 0 0'>{html.escape(m.footer)}</p>"
            if m.footer
            else ""
        )
        return (
            "<table width='100%' cellspacing='0' cellpadding='0' "
            "style='margin-bottom:14px'><tr><td>"
            f"<p style='font-weight:600; color:{colour}; margin:0 0 4px 0'>{who}</p>"
            f"{body}{footer}</td></tr></table>"
        )

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
