"""Presets in the window: File → New chat from preset ▸, Tools → Presets…,
and the bar over the chat that names a conversation's preset and opens its
system prompt.

A conversation keeps the name of the preset it started from and its own copy
of the preset's system prompt (``gambit.storage.presets``); its replies are
sampled with that preset's values while the preset exists, and with the
settings' (Default) once it is deleted. The system prompt can be changed
for one conversation (System prompt… over the chat) without touching the
preset; the next reply reads it.
"""

from __future__ import annotations

import logging
from functools import partial

from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog, QMenu

from gambit.storage.chat_store.rows import ConversationSummary
from gambit.storage.presets import DEFAULT_PRESET, Preset, PresetStore, find_preset
from gambit.ui.settings.presets_dialog import PresetsDialog
from gambit.ui.window.conversation import Conversation
from gambit.ui.window.window_layout import WindowPanes

log = logging.getLogger(__name__)

# What the bar says of a conversation from before presets (the settings' prompt applies).
NO_PRESET = "Preset: none (the settings' system prompt and sampling)"


class ChatPresets(QObject):
    """The presets kept in ``store``, in ``window``'s menus (``menus``) and in
    the bar over its chat, for ``conversation`` (which samples with them)."""

    def __init__(
        self,
        window: WindowPanes,
        conversation: Conversation,
        menus: dict[str, QMenu],
        store: PresetStore,
    ) -> None:
        super().__init__(window)
        self.window, self.conversation = window, conversation
        self.store = store
        conversation.presets = self.store.load()
        if self.store.load_errors:
            log.warning("presets: %s", " ".join(self.store.load_errors))
        self.summary: ConversationSummary | None = None
        self.menu = QMenu("New chat from &preset", window)
        self.menu.setObjectName("newFromPresetMenu")
        self.menu.menuAction().setObjectName("newFromPresetMenuAction")
        self.menu.aboutToShow.connect(self._fill_menu)
        file_menu = menus["fileMenu"]
        file_menu.insertMenu(file_menu.actions()[1], self.menu)
        self._fill_menu()
        self.edit_action = QAction("&Presets…", window)
        self.edit_action.setObjectName("presetsAction")
        self.edit_action.setToolTip("Named system prompts with their sampling, for new chats")
        self.edit_action.triggered.connect(self.open_editor)
        tools = menus["toolsMenu"]
        tools.insertAction(tools.actions()[4], self.edit_action)  # (after Settings…)
        window.system_prompt_button.clicked.connect(self.edit_system_prompt)
        conversation.opened.connect(self.show)
        conversation.changed.connect(lambda: self.set_enabled(not conversation.streaming))

    # ------------------------------------------------------------ a chat's
    @property
    def presets(self) -> list[Preset]:
        return self.conversation.presets

    @Slot(object)
    def show(self, summary: ConversationSummary | None) -> None:
        """The conversation ``summary`` is open (None: none): the bar names its preset."""
        self.summary = summary
        self.window.system_prompt_button.setEnabled(summary is not None)
        if summary is None:
            self.window.preset_label.setText("")
        elif not summary.preset:
            self.window.preset_label.setText(NO_PRESET)
        else:
            found = find_preset(self.presets, summary.preset)
            note = ""
            if found is None and summary.preset != DEFAULT_PRESET:
                note = " (deleted: the settings' sampling)"
            elif found is not None and not found.applied_to(self.conversation.settings).speculation:
                note = " · no speculation"
            self.window.preset_label.setText(f"Preset: {summary.preset}{note}")

    def set_enabled(self, idle: bool) -> None:
        for widget in (self.menu, self.edit_action, self.window.system_prompt_button):
            widget.setEnabled(idle)

    @Slot()
    def edit_system_prompt(self) -> None:
        """System prompt…: this conversation's, shown and changed in place."""
        conv = self.summary
        if conv is None:
            return
        try:
            stored = self.conversation.store.messages(conv.id)
        except Exception as exc:
            self.conversation.report("The system prompt could not be read", exc)
            return
        current = stored[0].content if stored and stored[0].role == "system" else ""
        if not current and not conv.preset:  # (an older chat: the settings' applies)
            current = self.conversation.settings.system_prompt
        dialog = QInputDialog(self.window)
        dialog.setObjectName("systemPromptDialog")
        dialog.setWindowTitle("System prompt")
        dialog.setLabelText(
            "This conversation's system prompt (its preset keeps its own); blank: none."
        )
        dialog.setOption(QInputDialog.InputDialogOption.UsePlainTextEditForTextInput)
        dialog.setTextValue(current)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.textValueSelected.connect(partial(self.conversation.set_system_prompt, conv))
        dialog.open()

    # ----------------------------------------------------------- the presets
    def _fill_menu(self) -> None:
        self.menu.clear()
        for name in (DEFAULT_PRESET, *(p.name for p in self.presets)):
            action = self.menu.addAction(name.replace("&", "&&"))
            action.setObjectName(f"newFromPreset:{name}")
            action.triggered.connect(partial(self.conversation.new, name))

    @Slot()
    def open_editor(self) -> None:
        """Tools → Presets…: edited in a dialog, saved when it is accepted."""
        dialog = PresetsDialog(self.presets, self.conversation.settings, self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._save(dialog))
        dialog.open()

    def _save(self, dialog: PresetsDialog) -> None:
        presets = dialog.presets()
        try:
            self.store.save(presets)
        except Exception as exc:
            self.conversation.report("The presets could not be saved", exc)
            return
        self.conversation.presets = presets
        self._fill_menu()
        self.show(self.summary)
