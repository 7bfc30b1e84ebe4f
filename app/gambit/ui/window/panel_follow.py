"""The statistics panel follows the reply you look at.

While a reply streams, the panel shows it live (``ReplyFlow``). Otherwise it
shows the figures stored with the reply last selected in the chat (a click,
a right-click, Alt+Up/Down), or with the last reply of the conversation just
opened; none where that reply has none. Selecting a question leaves the
panel as it is: a question has no figures of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Slot

from gambit.ui.stats.stats_panel import StatsPanel
from gambit.ui.window.chat_view import ChatView


class PanelFollow(QObject):
    """Keeps ``stats`` on the reply ``chat`` shows as current; ``busy`` says a
    reply is streaming (the panel is its, live)."""

    def __init__(self, chat: ChatView, stats: StatsPanel, busy: Callable[[], bool]) -> None:
        super().__init__(chat)
        self.chat, self.stats, self.busy = chat, stats, busy
        chat.current_changed.connect(self._on_current)

    def conversation_shown(self) -> None:
        """A conversation was drawn (opened, or changed by an action): the
        figures of its last reply, unless the panel shows one of its replies
        already (the one just written, with its charts as they were drawn)."""
        if self.busy():
            return
        messages = self.chat.messages
        if self.stats.reply_id is not None and self.stats.reply_id in {m.id for m in messages}:
            return
        last = next((m for m in reversed(messages) if m.role == "assistant"), None)
        if last is None:
            self.stats.clear()
        else:
            self.stats.show_stored(last.id, last.record)

    @Slot(object)
    def _on_current(self, index: int | None) -> None:
        if index is None or self.busy() or not 0 <= index < len(self.chat.messages):
            return
        message = self.chat.messages[index]
        if message.role == "assistant" and message.id != self.stats.reply_id:
            self.stats.show_stored(message.id, message.record)
