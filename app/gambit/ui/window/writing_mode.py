"""How the open conversation is written: chat turns, or one text that the
model continues in place (completion mode).

A base model has no chat template, so it cannot take turns; it can continue
a text. A new conversation follows the loaded model (completion mode where it
has no template), an empty one follows a model loaded later, and View →
Completion mode switches any conversation, for any model: an instruct model
continues a text as well. The mode is the conversation's
(``Conversation.completion``, stored with it), so it opens as it was left;
this module is its menu item and the input box's hint.
"""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import QObject, QSignalBlocker, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QPlainTextEdit

from gambit.ui.window.conversation import Conversation
from gambit.ui.window.window_layout import CHAT_HINT

COMPLETION_HINT: Final = (
    "Text for the model to continue — Enter sends it; Continue (or Enter with "
    "nothing typed) writes more"
)


class WritingMode(QObject):
    """View → Completion mode (added to ``menu``) for ``conversation``, and the
    hint of ``input`` that follows it."""

    def __init__(self, conversation: Conversation, menu: QMenu, input: QPlainTextEdit) -> None:
        super().__init__(menu)
        self.conversation, self.input = conversation, input
        self.action = QAction("&Completion mode", menu)
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
        conversation.changed.connect(self._follow)
        self._follow()

    @Slot(bool)
    def _on_toggled(self, on: bool) -> None:
        if not self.conversation.set_mode(on):
            self._follow()  # (not stored: the check goes back)

    @Slot()
    def _follow(self) -> None:
        """The check, its enabling and the hint, as the conversation is now."""
        c = self.conversation
        with QSignalBlocker(self.action):
            self.action.setChecked(c.completion)
        self.action.setEnabled(not c.streaming and c.id is not None)
        self.input.setPlaceholderText(COMPLETION_HINT if c.completion else CHAT_HINT)
