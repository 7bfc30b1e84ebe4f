"""The conversation, rendered as one rich-text document.

Finished messages are rendered once; the streaming reply is re-rendered in
place (from a saved cursor position to the end) on the window's repaint
timer, never once per token. With even streaming on (``StreamPacer``), a
round's text is revealed over the time a round takes instead of at once.
Messages are Markdown (``markdown.render``, Qt's own reader). Links open in
the system browser (http, https and mailto only: replies are untrusted
text), never inside the app; a code block's "Copy" link puts its code on the
clipboard. A document attached to a message (``gambit.storage.documents``)
shows as one line, its name and size, with a link that shows its text.

A conversation in completion mode (a base model's) is one text: its parts
flow on in place, the model's in a colour of their own, with no names and
no Markdown, and only the last part's footer under it all.

The view knows where each message starts, so that a click, a right-click or
Alt+Up/Down makes one the current message (``current``), which the
per-message actions act on (``gambit.ui.window.message_actions``).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from PySide6.QtCore import QPoint, QUrl, Signal, Slot
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QMouseEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
    QTextImageFormat,
)
from PySide6.QtWidgets import QMenu, QStyle, QTextBrowser, QWidget

from gambit.engine.text.pacing import StreamPacer
from gambit.storage.documents import Document, format_size, split
from gambit.storage.reply_stats import ReplyRecord
from gambit.storage.reply_stats import reply_footer as reply_footer  # (re-exported)
from gambit.ui.window import markdown

log = logging.getLogger(__name__)

OPENABLE_SCHEMES: Final = frozenset({"http", "https", "mailto"})
MESSAGE_GAP: Final = 14  # px under each message
DOCUMENT_SCHEME: Final = "gambit-document"  # a link that shows or hides a document
FILE_ICON: Final = QUrl("gambit-icon:file")  # the image an attached document's name follows
GENERATED_COLOUR: Final = "#10b981"  # the model's text: its name's colour in a chat


@dataclass
class ChatMessage:
    role: str
    text: str
    drafted: list[bool] = field(default_factory=list)
    footer: str = ""  # reply_footer(): "128 tokens · 95.0 tok/s · … · 1.42× vs plain"
    id: int | None = None  # the stored message's (None: not stored)
    record: ReplyRecord | None = None  # what is stored with a reply (None: none yet)


class ChatView(QTextBrowser):
    # The context menu of a message is about to show: (menu, message index);
    # the per-message actions add themselves to it.
    message_menu = Signal(QMenu, int)
    # Another message became the current one (its index; None: none is).
    current_changed = Signal(object)

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
        self._starts: list[int] = []  # document position where each message begins
        self._expanded: set[str] = set()  # documents shown whole ("<message>.<n>")
        self._current: int | None = None  # the message the per-message actions act on
        self.completion = False  # one text continued in place, not turns

    @property
    def current(self) -> int | None:
        """The index of the message the per-message actions act on (None: none)."""
        return self._current

    @current.setter
    def current(self, index: int | None) -> None:
        if index != self._current:
            self._current = index
            self.current_changed.emit(index)

    # ---- whole conversation
    def set_messages(self, messages: list[ChatMessage]) -> None:
        self.messages = list(messages)
        self._streaming = None
        self._expanded.clear()
        self.current = None
        self._render_all()

    def set_completion(self, on: bool) -> None:
        """Show the conversation as one text (completion mode) or as turns."""
        if on != self.completion:
            self.completion = on
            self._render_all()

    def append_message(self, message: ChatMessage) -> None:
        self.messages.append(message)
        if self.completion:  # (the last footer moves under the new part)
            self._render_all()
            return
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._insert_message(cursor, message, len(self.messages) - 1)
        self._scroll_to_end()

    def set_highlight(self, on: bool) -> None:
        self.highlight_drafted = on
        self._render_all()

    # ---- the streaming reply
    def begin_reply(self, msg_id: int | None = None) -> ChatMessage:
        self.pacer.reset()
        reply = ChatMessage("assistant", "", id=msg_id)
        self.messages.append(reply)
        self._streaming = reply
        if self.completion:
            self._render_all()
            return reply
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        self._stream_anchor = cursor.position()
        self._render_stream()
        return reply

    def resume_reply(self) -> ChatMessage | None:
        """Stream more of the last message, a reply (Continue): what arrives is
        added to its text. None when the last message is not a reply."""
        if not self.messages or self.messages[-1].role != "assistant":
            return None
        self.pacer.reset()
        reply = self._streaming = self.messages[-1]
        reply.footer = ""
        self._stream_anchor = self._starts[-1]
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
        self._starts.clear()
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
        del self._starts[index:]
        self._starts.append(cursor.position())
        if self.completion:
            self._insert_part(cursor, m, index == len(self.messages) - 1, streaming)
            return
        who = {"user": "You", "assistant": "Gambit", "system": "System"}.get(m.role, m.role)
        colour = "#3b82f6" if m.role == "user" else GENERATED_COLOUR
        if cursor.position() > 0:  # below the previous message
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        name = QTextCharFormat()
        name.setFontWeight(QFont.Weight.DemiBold)
        name.setForeground(QColor(colour))
        heading = QTextBlockFormat()
        heading.setBottomMargin(4)
        cursor.setBlockFormat(heading)
        cursor.insertText(who, name)
        if m.role == "assistant":
            # while streaming, a caret at the end of the text shows it is still coming
            text = m.text + markdown.CARET if streaming else m.text
            self._insert_markdown(cursor, text, m.drafted, str(index))
        else:  # the user's: documents attached to it are shown collapsed
            for n, part in enumerate(split(m.text)):
                if isinstance(part, Document):
                    self._insert_document(cursor, part, f"{index}.{n}")
                else:
                    self._insert_markdown(cursor, part, None, f"{index}.{n}")
        if m.footer:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cursor.insertText(m.footer, self._footer_format())
        gap = cursor.blockFormat()
        gap.setBottomMargin(MESSAGE_GAP)
        cursor.setBlockFormat(gap)

    def _insert_part(
        self, cursor: QTextCursor, m: ChatMessage, last: bool, streaming: bool
    ) -> None:
        """A part of a completion-mode text, inline after the part before it;
        the model's in green, its drafted runs washed as in a reply. A system
        prompt is no part of it (a base model has no system role): not drawn."""
        plain = QTextCharFormat()
        if m.role == "system":
            return
        if m.role != "assistant":
            cursor.insertText(m.text, plain)
        else:
            plain.setForeground(QColor(GENERATED_COLOUR))
            drafted = m.drafted if self.highlight_drafted else []
            washed = QTextCharFormat(plain)
            washed.setBackground(markdown.DRAFT_BG)
            flags = (i < len(drafted) and drafted[i] for i in range(len(m.text)))
            start = 0
            for flag, run in itertools.groupby(flags):  # (runs of one wash)
                end = start + sum(1 for _ in run)
                cursor.insertText(m.text[start:end], washed if flag else plain)
                start = end
            if streaming:
                cursor.insertText(markdown.CARET, plain)
        if last and m.footer:
            cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cursor.insertText(m.footer, self._footer_format())

    def _footer_format(self) -> QTextCharFormat:
        footer = QTextCharFormat()
        footer.setForeground(QColor("#9ca3af"))
        footer.setFontPointSize(max(6.0, self.font().pointSizeF() * 0.85))
        return footer

    def _insert_markdown(
        self, cursor: QTextCursor, text: str, drafted: list[bool] | None, key: str
    ) -> None:
        body = markdown.render(text, drafted, drafted is not None and self.highlight_drafted, key)
        self._code.update(body.code_blocks)
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        body_start = cursor.position()
        cursor.insertFragment(QTextDocumentFragment(body.document))
        first = self.document().findBlock(body_start)
        if first.length() == 1 and first.textList() is None and body_start < cursor.position():
            # a body opening with a list or a table left an empty line above it
            QTextCursor(first).deletePreviousChar()

    def _file_icon(self) -> QTextImageFormat:
        """The style's file icon as an image of the document, a line high (not
        an emoji: fonts without one draw a box)."""
        size = self.fontMetrics().height()
        if self.document().resource(QTextDocument.ResourceType.ImageResource, FILE_ICON) is None:
            icon = self.style().standardIcon(QStyle.StandardPixmap.SP_FileIcon)
            image = icon.pixmap(size, size).toImage()
            self.document().addResource(QTextDocument.ResourceType.ImageResource, FILE_ICON, image)
        image_format = QTextImageFormat()
        image_format.setName(FILE_ICON.toString())
        image_format.setWidth(size)
        image_format.setHeight(size)
        image_format.setVerticalAlignment(QTextCharFormat.VerticalAlignment.AlignMiddle)
        return image_format

    def _insert_document(self, cursor: QTextCursor, document: Document, key: str) -> None:
        """An attached document: its name and size, and a link that shows its
        text (as it is, not as Markdown) or hides it again."""
        shown = key in self._expanded
        cursor.insertBlock(QTextBlockFormat(), QTextCharFormat())
        label = QTextCharFormat()
        label.setFontWeight(QFont.Weight.DemiBold)
        cursor.insertImage(self._file_icon())
        cursor.insertText(f" {document.name} · {format_size(document.size)}  ", label)
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(f"{DOCUMENT_SCHEME}:{key}")
        link.setFontUnderline(True)
        link.setForeground(QGuiApplication.palette().link())
        cursor.insertText("Hide" if shown else "Show", link)
        if shown:
            code = QTextBlockFormat()
            code.setBackground(markdown.CODE_BG)
            mono = QTextCharFormat()
            mono.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
            cursor.insertBlock(code, mono)
            cursor.insertText(document.text, mono)  # (its lines become blocks like this one)

    # ---- the current message, for the per-message actions
    def message_at(self, position: int) -> int | None:
        """The index of the message at document ``position`` (None: none)."""
        index = bisect.bisect_right(self._starts, position) - 1
        return index if 0 <= index < len(self.messages) else None

    def message_point(self, index: int) -> QPoint:
        """A point of the viewport on message ``index``'s name line (for a click)."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._starts[index] + (1 if index else 0))
        self.setTextCursor(cursor)
        self.ensureCursorVisible()
        return self.cursorRect(cursor).center()

    def select_message(self, index: int) -> None:
        """Make message ``index`` the current one, its text selected and in view."""
        if not 0 <= index < len(self.messages):
            return
        self.current = index
        end = self._starts[index + 1] if index + 1 < len(self._starts) else None
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._starts[index] + (1 if index else 0))  # (after the gap)
        if end is None:
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        else:
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        self.setTextCursor(cursor)
        self.ensureCursorVisible()

    def step_message(self, step: int) -> None:
        """Make the message ``step`` away from the current one current (from the
        last when none is)."""
        if self.messages:
            start = len(self.messages) if self.current is None else self.current
            self.select_message(min(max(start + step, 0), len(self.messages) - 1))

    def message_menu_at(self, point: QPoint) -> QMenu:
        """The context menu at ``point`` (viewport coordinates): the text's own
        entries, and the message's (``message_menu``) when one is there."""
        menu = self.createStandardContextMenu(point)
        index = self.message_at(self.cursorForPosition(point).position())
        if index is not None:
            self.current = index
            self.message_menu.emit(menu, index)
        return menu

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 - Qt override
        menu = self.message_menu_at(event.pos())
        menu.exec(event.globalPos())
        menu.deleteLater()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        at = self.cursorForPosition(event.position().toPoint()).position()
        self.current = self.message_at(at)
        super().mousePressEvent(event)

    @Slot(QUrl)
    def _on_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == DOCUMENT_SCHEME:
            self._expanded ^= {url.path()}
            self._render_all()
            return
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
