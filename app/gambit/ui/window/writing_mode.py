"""How the open conversation is written: chat turns, or one text that the
model continues in place (completion mode).

A base model has no chat template, so it cannot take turns; it can continue
a text. A new conversation follows the loaded model (completion mode where it
has no template), an empty one follows a model loaded later, and View →
Completion mode switches any conversation, for any model: an instruct model
continues a text as well. The mode is stored with the conversation
(``ConversationStore.set_mode``), so it opens as it was left.
"""

from __future__ import annotations

import logging
from typing import Final

from PySide6.QtCore import QObject, QSignalBlocker, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

from gambit.qt.worker import EngineInfo
from gambit.ui.window.window_layout import CHAT_HINT, WindowPanes

log = logging.getLogger(__name__)

COMPLETION_HINT: Final = (
    "Text for the model to continue — Enter sends it; Continue (or Enter with "
    "nothing typed) writes more"
)


def mode_for(info: EngineInfo | None) -> str:
    """The mode a new conversation starts in with this model loaded."""
    return "completion" if info is not None and not info.chat_template else "chat"


class WritingMode(QObject):
    """View → Completion mode (added to ``menu``), and the chat view and input
    that follow it."""

    def __init__(self, window: WindowPanes, menu: QMenu) -> None:
        super().__init__(window)
        self.window = window
        self.conversation_id: int | None = None
        self.action = QAction("&Completion mode", window)
        self.action.setObjectName("completionModeAction")
        self.action.setCheckable(True)
        self.action.setToolTip(
            "Write this conversation as one text that the model continues (base models, "
            "which have no chat template), instead of chat turns"
        )
        self.action.setStatusTip(self.action.toolTip())
        self.action.toggled.connect(self._on_toggled)
        menu.addSeparator()
        menu.addAction(self.action)
        window.input.setPlaceholderText(CHAT_HINT)

    @property
    def completion(self) -> bool:
        return self.action.isChecked()

    @property
    def has_text(self) -> bool:
        """Whether the conversation is a completion-mode text to write more of."""
        return self.completion and any(m.text for m in self.window.chat.messages)

    def refuses(self, info: EngineInfo) -> bool:
        """Whether a reply cannot start: a chat with a model that cannot chat
        (then the window says what to do)."""
        if info.chat_template or self.completion:
            return False
        self.window.show_error(
            "This model cannot chat",
            f"{info.target_name} has no chat template (it is a base model): it continues "
            "text. Turn on View → Completion mode for this conversation, or start a new "
            "chat, which opens in completion mode.",
        )
        return True

    def show(self, conv_id: int | None, completion: bool) -> None:
        """Conversation ``conv_id`` is open, written as ``completion`` says."""
        self.conversation_id = conv_id
        with QSignalBlocker(self.action):
            self.action.setChecked(completion)
        self._follow(completion)

    def fit_model(self, info: EngineInfo | None) -> None:
        """An empty conversation takes the mode the loaded model needs (one with
        messages keeps its own: the user chose it, or wrote in it)."""
        wanted = mode_for(info) == "completion"
        if info is None or self.conversation_id is None or wanted == self.completion:
            return
        if not self.window.chat.messages:
            self.action.setChecked(wanted)

    def set_enabled(self, idle: bool) -> None:
        self.action.setEnabled(idle and self.conversation_id is not None)

    @Slot(bool)
    def _on_toggled(self, on: bool) -> None:
        if self.conversation_id is not None:
            try:
                self.window.store.set_mode(self.conversation_id, "completion" if on else "chat")
            except Exception as exc:
                with QSignalBlocker(self.action):
                    self.action.setChecked(not on)
                self.window.report("The conversation's mode could not be changed", exc)
                return
        self._follow(on)

    def _follow(self, completion: bool) -> None:
        self.window.chat.set_completion(completion)
        self.window.input.setPlaceholderText(COMPLETION_HINT if completion else CHAT_HINT)
