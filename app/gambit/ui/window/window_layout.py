"""The main window's panes, built: the conversation sidebar, the chat area,
the statistics dock, the toolbar and the status bar. ``MainWindow`` lays them
out and gives them their behaviour; this module only makes the widgets and
names them, and opens the window's message boxes."""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings
from gambit.ui.stats.stats_panel import StatsPanel
from gambit.ui.window.chat_view import ChatView
from gambit.ui.window.window_widgets import (
    AttachmentBar,
    ConversationList,
    InputEdit,
    named,
    open_message,
)

# The input box's hint in a chat (gambit.ui.window.writing_mode has completion mode's).
CHAT_HINT: Final = "Message Gambit — Enter to send, Shift+Enter for a new line"


class WindowPanes(QMainWindow):
    """The widgets of ``MainWindow``, built from the window's settings
    (``highlight_drafted``, ``show_stats``) and history (``in_memory``)."""

    settings: Settings
    store: ConversationStore

    def _build_sidebar(self) -> QWidget:
        self.sidebar = sidebar = named(QWidget(), "sidebar")
        side = QVBoxLayout(sidebar)
        side.setContentsMargins(8, 8, 4, 8)
        self.new_button = named(QPushButton("New chat"), "newChatButton")
        self.search = named(QLineEdit(placeholderText="Search conversations"), "searchEdit")
        self.search.setClearButtonEnabled(True)
        self.list = named(ConversationList(), "conversationList")
        side.addWidget(self.new_button)
        side.addWidget(self.search)
        side.addWidget(self.list, 1)
        return sidebar

    def _build_chat_area(self) -> QWidget:
        centre = named(QWidget(), "chatArea")
        col = QVBoxLayout(centre)
        col.setContentsMargins(4, 8, 8, 8)
        self.chat = ChatView()
        self.chat.highlight_drafted = self.settings.highlight_drafted
        self.chat.pacing = self.settings.even_streaming
        self.input = named(InputEdit(), "inputEdit")
        self.input.setFixedHeight(96)
        self.attachment_bar = AttachmentBar()
        buttons = QHBoxLayout()
        self.attach_button = named(QPushButton("Attach…"), "attachButton")
        self.send_button = named(QPushButton("Send"), "sendButton")
        self.send_button.setDefault(True)
        self.stop_button = named(QPushButton("Stop"), "stopButton")
        self.regen_button = named(QPushButton("Regenerate"), "regenerateButton")
        self.continue_button = named(QPushButton("Continue"), "continueButton")
        buttons.addWidget(self.attach_button)
        buttons.addStretch(1)
        for b in (self.continue_button, self.regen_button, self.stop_button, self.send_button):
            buttons.addWidget(b)
        # The conversation's preset and system prompt (gambit.ui.window.chat_presets).
        bar = QHBoxLayout()
        self.preset_label = named(QLabel(""), "presetLabel")
        self.system_prompt_button = named(QPushButton("System prompt…"), "systemPromptButton")
        self.system_prompt_button.setToolTip("Show or change this conversation's system prompt")
        bar.addWidget(self.preset_label, 1)
        bar.addWidget(self.system_prompt_button)
        col.addLayout(bar)
        col.addWidget(self.chat, 1)
        col.addWidget(self.attachment_bar)
        col.addWidget(self.input)
        col.addLayout(buttons)
        return centre

    def _build_status_bar(self) -> None:
        self.model_label = named(QLabel("No model"), "modelLabel")
        self.spec_label = named(QLabel(""), "speculationLabel")
        self.load_busy = named(QProgressBar(), "loadBusy")  # moves while a load runs
        self.load_busy.setRange(0, 0)  # busy: loads report stages, not a fraction
        self.load_busy.setMaximumSize(120, 14)
        self.load_busy.setTextVisible(False)
        self.load_busy.hide()
        # Stops a load at its next step (a layer-skip search: the model then
        # loads without it); after a cancelled load, Load starts it again.
        self.cancel_load_button = named(QPushButton("Cancel"), "cancelLoadButton")
        self.cancel_load_button.hide()
        self.load_button = named(QPushButton("Load model"), "loadModelButton")
        self.load_button.setToolTip("Load the models chosen in Settings")
        self.load_button.hide()
        self.statusBar().addPermanentWidget(self.load_busy)
        self.statusBar().addPermanentWidget(self.cancel_load_button)
        self.statusBar().addPermanentWidget(self.load_button)
        self.statusBar().addPermanentWidget(self.spec_label)
        self.statusBar().addPermanentWidget(self.model_label)
        if self.store.in_memory:
            self.statusBar().addPermanentWidget(
                named(QLabel("⚠ Chats are not being saved"), "historyNotSavedLabel")
            )

    def _build_stats(self) -> None:
        self.stats = StatsPanel(self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.stats)
        self.resizeDocks([self.stats], [420], Qt.Orientation.Horizontal)
        self.stats.setVisible(self.settings.show_stats)

    def _build_toolbar(self) -> None:
        """The toolbar's actions (the menus give them their keys and tips)."""
        toolbar = named(QToolBar("Main"), "mainToolbar")
        toolbar.setMovable(False)
        self.addToolBar(toolbar)
        self.speculation_action = named(QAction("Speculation", self), "speculationAction")
        self.speculation_action.setCheckable(True)
        self.speculation_action.setChecked(self.settings.speculation)
        self.models_action = named(QAction("Models…", self), "modelsAction")
        self.settings_action = named(QAction("Settings…", self), "settingsAction")
        toolbar.addAction(self.speculation_action)
        toolbar.addAction(self.stats.toggleViewAction())
        toolbar.addSeparator()
        toolbar.addAction(self.models_action)
        toolbar.addAction(self.settings_action)

    def show_error(self, title: str, message: str, warning: bool = False) -> None:
        open_message(self, title, message, warning)
