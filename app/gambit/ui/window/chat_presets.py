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
from collections.abc import Callable
from functools import partial

from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog, QMenu

from gambit.engine.text.reply import GenerationConfig
from gambit.storage.chat_store.rows import ConversationSummary
from gambit.storage.presets import DEFAULT_PRESET, PresetStore, find_preset
from gambit.storage.settings import Settings
from gambit.ui.settings.presets_dialog import PresetsDialog
from gambit.ui.window.window_layout import WindowPanes

log = logging.getLogger(__name__)

# What the bar says of a conversation from before presets (the settings' prompt applies).
NO_PRESET = "Preset: none (the settings' system prompt and sampling)"


class ChatPresets(QObject):
    """The presets of ``window``, kept in ``store``: ``new_chat(name)`` starts a
    conversation from one, ``shown(conv_id)`` draws a conversation again after
    its system prompt changed."""

    def __init__(
        self,
        window: WindowPanes,
        menus: dict[str, QMenu],
        store: PresetStore,
        new_chat: Callable[[str], None],
        shown: Callable[[int], None],
    ) -> None:
        super().__init__(window)
        self.window, self.new_chat, self.redraw = window, new_chat, shown
        self.store = store
        self.presets = self.store.load()
        if self.store.load_errors:
            log.warning("presets: %s", " ".join(self.store.load_errors))
        self.conversation: ConversationSummary | None = None
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

    # ------------------------------------------------------------ a chat's
    def settings_for(self, preset: str) -> Settings:
        """The settings a reply of a chat from ``preset`` is written with."""
        found = find_preset(self.presets, preset)
        return found.applied_to(self.window.settings) if found else self.window.settings

    def generation_config(self) -> tuple[GenerationConfig, bool] | None:
        """The open chat's sampling and whether it drafts (the toolbar's switch
        and its preset's both on); None (and why, said) when they cannot be used."""
        preset = self.conversation.preset if self.conversation else ""
        settings = self.settings_for(preset)
        try:
            config = settings.generation_config()
        except ValueError as exc:
            problems = settings.validate() or [str(exc)]
            where = f"the preset {preset}" if find_preset(self.presets, preset) else "Settings"
            self.window.show_error(
                "The settings cannot be used",
                "\n".join(problems) + f"\n\nCorrect them in {where}, then send again.",
            )
            return None
        return config, self.window.settings.speculation and settings.speculation

    def show(self, conversation: ConversationSummary | None) -> None:
        """``conversation`` is open (None: none): the bar names its preset."""
        self.conversation = conversation
        self.window.system_prompt_button.setEnabled(conversation is not None)
        if conversation is None:
            self.window.preset_label.setText("")
        elif not conversation.preset:
            self.window.preset_label.setText(NO_PRESET)
        else:
            found = find_preset(self.presets, conversation.preset)
            note = ""
            if found is None and conversation.preset != DEFAULT_PRESET:
                note = " (deleted: the settings' sampling)"
            elif found is not None and not found.applied_to(self.window.settings).speculation:
                note = " · no speculation"
            self.window.preset_label.setText(f"Preset: {conversation.preset}{note}")

    def set_enabled(self, idle: bool) -> None:
        for widget in (self.menu, self.edit_action, self.window.system_prompt_button):
            widget.setEnabled(idle)

    @Slot()
    def edit_system_prompt(self) -> None:
        """System prompt…: this conversation's, shown and changed in place."""
        conv = self.conversation
        if conv is None:
            return
        try:
            stored = self.window.store.messages(conv.id)
        except Exception as exc:
            self.window.report("The system prompt could not be read", exc)
            return
        current = stored[0].content if stored and stored[0].role == "system" else ""
        if not current and not conv.preset:  # (an older chat: the settings' applies)
            current = self.window.settings.system_prompt
        dialog = QInputDialog(self.window)
        dialog.setObjectName("systemPromptDialog")
        dialog.setWindowTitle("System prompt")
        dialog.setLabelText(
            "This conversation's system prompt (its preset keeps its own); blank: none."
        )
        dialog.setOption(QInputDialog.InputDialogOption.UsePlainTextEditForTextInput)
        dialog.setTextValue(current)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.textValueSelected.connect(partial(self._set_system_prompt, conv))
        dialog.open()

    def _set_system_prompt(self, conv: ConversationSummary, text: str) -> None:
        try:
            self.window.store.set_system_prompt(conv.id, text)
            if not conv.preset:  # now its own: the settings' no longer applies
                self.window.store.set_preset(conv.id, DEFAULT_PRESET)
        except Exception as exc:
            self.window.report("The system prompt could not be saved", exc)
            return
        self.redraw(conv.id)

    # ----------------------------------------------------------- the presets
    def _fill_menu(self) -> None:
        self.menu.clear()
        for name in (DEFAULT_PRESET, *(p.name for p in self.presets)):
            action = self.menu.addAction(name.replace("&", "&&"))
            action.setObjectName(f"newFromPreset:{name}")
            action.triggered.connect(partial(self.new_chat, name))

    @Slot()
    def open_editor(self) -> None:
        """Tools → Presets…: edited in a dialog, saved when it is accepted."""
        dialog = PresetsDialog(self.presets, self.window.settings, self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._save(dialog))
        dialog.open()

    def _save(self, dialog: PresetsDialog) -> None:
        presets = dialog.presets()
        try:
            self.store.save(presets)
        except Exception as exc:
            self.window.report("The presets could not be saved", exc)
            return
        self.presets = presets
        self._fill_menu()
        self.show(self.conversation)
