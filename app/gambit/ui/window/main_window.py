"""The main window: conversations, the chat, the input, the bet's statistics."""

from __future__ import annotations

import logging

from PySide6.QtCore import QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QListWidgetItem, QSplitter

from gambit.engine.text.pacing import REPAINT_S
from gambit.models.library import ModelLibrary
from gambit.models.settings_check import model_file_problems
from gambit.qt.compat import give_to_qt_parents
from gambit.qt.reply_stream import ReplyResult
from gambit.qt.worker import EngineInfo, EngineRequest, WorkerThread
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.documents import compose
from gambit.storage.history_memory import HistoryMemory, memory_folder
from gambit.storage.presets import PresetStore
from gambit.storage.settings import MODEL_FIELDS, RELOADS, Settings, SettingsStore
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.settings.settings_dialog import SettingsDialog
from gambit.ui.window.attachments import Attachments
from gambit.ui.window.chat_presets import ChatPresets
from gambit.ui.window.conversation import Conversation
from gambit.ui.window.drafter_refused import drop_layer_skip
from gambit.ui.window.menus import MenuBar
from gambit.ui.window.message_actions import MessageActions
from gambit.ui.window.panel_follow import PanelFollow
from gambit.ui.window.reply_flow import ReplyFlow
from gambit.ui.window.window_layout import WindowPanes
from gambit.ui.window.window_widgets import LatencyProbe, exec_once, named, speculation_text
from gambit.ui.window.worker_lost import offer_local
from gambit.ui.window.writing_mode import WritingMode

log = logging.getLogger(__name__)


class MainWindow(WindowPanes):
    """Lays out the panes and wires them to the open ``Conversation``, the
    engine's loads and the settings."""

    request_load = Signal(object, object)  # EngineRequest (or EngineConfig), None
    request_forget_memory = Signal(object)  # folder, to EngineWorker.forget_lookup_memory

    def __init__(
        self,
        settings_store: SettingsStore,
        conversations: ConversationStore,
        worker: WorkerThread | None = None,
        history_notice: str | None = None,  # storage.chat_store.recovery.OpenedHistory.notice
    ) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("Gambit")
        self.resize(1280, 820)
        self.settings_store = settings_store
        self.settings: Settings = settings_store.load()
        self.store = conversations
        self.worker_thread = worker or WorkerThread()
        self.worker = self.worker_thread.worker
        # A setting that reloads the models changed while a reply was running.
        self._reload_after_reply = False
        self._deriving = False  # the load under way searches for layers to skip first
        self._build()
        give_to_qt_parents(self)  # one owner per widget (see there)
        self._connect()
        self.worker.set_lookup_memory(lookup_memory(self.store, self.settings.lookup_memory))
        self.latency = LatencyProbe(self)
        self._refresh_list()
        if settings_store.load_errors:
            self.show_error("Some settings could not be read and were reset",
                            "\n".join(settings_store.load_errors))  # fmt: skip
        if history_notice:
            self.show_error("Chat history", history_notice, warning=True)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        splitter = named(QSplitter(), "mainSplitter")
        splitter.addWidget(self._build_sidebar())
        splitter.addWidget(self._build_chat_area())
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 900])
        self.setCentralWidget(splitter)
        self._build_stats()
        self._build_toolbar()
        self._build_status_bar()
        self._repaint = QTimer(self)  # streaming text repaints on a timer, not per token
        self._repaint.setInterval(round(REPAINT_S * 1000))
        self._repaint.timeout.connect(self.chat.flush_reply)
        self._repaint.start()
        self.conversation = c = Conversation(self.store, self.worker, self.chat,
                                             lambda: self.settings, self)  # fmt: skip
        self.menus = MenuBar(self, c, self.apply_settings)
        self.replies = ReplyFlow(c, self.worker, self.stats)
        self.panel_follow = PanelFollow(self.chat, self.stats, lambda: c.streaming)
        self.message_actions = MessageActions(self, c)
        self.writing = WritingMode(c, self.menus.menus["viewMenu"], self.input)
        presets = PresetStore(self.settings_store.path.with_name("presets.json"))  # (beside)
        self.presets = ChatPresets(self, c, self.menus.menus, presets)
        self.menuBar().insertMenu(
            self.menus.menus["viewMenu"].menuAction(), self.message_actions.menu("&Message")
        )
        self.attachments = Attachments(self, self.attachment_bar,
                                       (self.input.viewport(), self.chat.viewport()))  # fmt: skip
        self.attach_button.setToolTip(self.attachments.action.toolTip())
        file_menu = self.menus.menus["fileMenu"]
        file_menu.insertAction(file_menu.actions()[2], self.attachments.action)
        self.update_buttons()

    def _connect(self) -> None:
        w, c = self.worker, self.conversation
        self.request_load.connect(w.load)
        self.request_forget_memory.connect(w.forget_lookup_memory)
        w.load_progress.connect(self.statusBar().showMessage)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.load_cancelled.connect(self._on_load_cancelled)
        w.served.connect(self.stats.set_snapshot)  # replies of the local server
        w.engine_lost.connect(self._on_engine_lost)
        c.changed.connect(self.update_buttons)
        c.listed.connect(self._refresh_list)
        c.opened.connect(lambda _: self.panel_follow.conversation_shown())  # (never another's)
        c.created.connect(lambda: self.input.setFocus())
        c.said.connect(self.statusBar().showMessage)
        c.failed.connect(self.show_error)
        c.lost.connect(lambda why: offer_local(self, why, self.continue_locally))
        self.replies.ended.connect(self._on_reply_ended)
        self.input.submitted.connect(self.send)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.replies.stop)
        self.cancel_load_button.clicked.connect(self.cancel_load)
        self.load_button.clicked.connect(self.load_engine)
        self.regen_button.clicked.connect(lambda: c.regenerate())
        self.continue_button.clicked.connect(c.continue_reply)
        self.attach_button.clicked.connect(self.attachments.pick)
        self.new_button.clicked.connect(lambda: c.new())
        self.search.textChanged.connect(lambda: self._refresh_list(follow=True))
        self.list.currentItemChanged.connect(self._on_conversation_selected)
        self.list.renamed.connect(c.rename)
        self.list.delete_requested.connect(c.delete)
        self.speculation_action.toggled.connect(self._on_speculation_toggled)
        self.settings_action.triggered.connect(self.open_settings)
        self.models_action.triggered.connect(self.open_models)

    # ------------------------------------------------------------------ engine
    def load_engine(self) -> None:
        s = self.settings
        self.conversation.engine_info = None
        self.conversation.worker_lost = None
        self.worker.set_speculation(s.speculation)
        self.model_label.setText("Loading…")
        self.stats.set_engine(None)  # the old model and drafter are going
        self.stats.clear()  # and their figures with them: the next model measures its own
        self.load_busy.show()
        request = EngineRequest(
            target=s.target_path(),
            make_config=s.engine_config,
            drafter=s.drafter,  # a derived draft file is found before the load
            options=s.target_options(),
        )
        self.cancel_load_button.setEnabled(True)
        self.cancel_load_button.setToolTip(
            "Stop the search for layers to skip (the model then loads without it)"
            if request.derives
            else "Stop loading the model"
        )
        self.cancel_load_button.show()
        self.load_button.hide()
        self._deriving = request.derives
        self.request_load.emit(request, None)
        self.update_buttons()

    @Slot()
    def cancel_load(self) -> None:
        """Stop the load at its next step; a layer-skip search stops and the
        model then loads without a drafter."""
        self.worker.cancel()
        self.cancel_load_button.setEnabled(False)
        what = "the search for layers to skip" if self._deriving else "the load"
        self.statusBar().showMessage(f"Cancelling {what}…")

    @Slot()
    def _on_load_cancelled(self) -> None:
        self._without_model("Loading cancelled: no model is loaded")
        self.load_button.show()

    def _without_model(self, status: str, timeout_ms: int = 0) -> None:
        """A load ended with no model: nothing claims one, and no figure
        outlives the model it measured."""
        self.conversation.engine_info = None
        self.load_busy.hide()
        self.cancel_load_button.hide()
        self.stats.set_engine(None)
        self.stats.clear()
        self.model_label.setText("No model loaded")
        self.statusBar().showMessage(status, timeout_ms)
        self.update_buttons()

    @Slot(object)
    def _on_loaded(self, info: EngineInfo) -> None:
        self.conversation.engine_info = info
        self.load_busy.hide()
        self.cancel_load_button.hide()
        if info.drafter_refused:
            self.settings = drop_layer_skip(self, self.settings_store, info.drafter_refused)
        drafter = f" + {info.drafter_label}" if info.drafter_label else ""
        if info.draft_name:
            drafter += f" ({info.draft_name})"
        self.model_label.setText(f"{info.target_name}{drafter}")
        self.stats.set_engine(info)
        self.conversation.fit_model(info)  # (an empty chat follows a base model)
        self.statusBar().showMessage(f"Ready — loaded in {info.load_seconds:.1f} s", 5000)
        self._update_speculation_label()
        self.update_buttons()

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        if self.conversation.closing:  # (a load the closing window stopped: nobody to tell)
            return
        self._without_model("The model could not be loaded — see Settings", 10000)
        self.show_error("The model could not be loaded", message)

    @Slot(str, object)
    def _on_engine_lost(self, message: str, partial: ReplyResult | None) -> None:
        """A worker holding the target's layers is gone and the engine with it: the
        reply so far is saved, and the window offers to go on on this machine.
        (Lost during a measurement, there is no reply: nothing is stored.)"""
        self.replies.finish(partial, error=message)
        self.conversation.engine_info = None
        self.conversation.worker_lost = message
        self.stats.set_engine(None)
        self.model_label.setText("No model loaded: a worker was lost")
        self.update_buttons()
        if not self.conversation.closing:
            offer_local(self, message, self.continue_locally)

    @Slot()
    def continue_locally(self) -> None:
        """Clear the workers setting (saved) and load the whole model here."""
        if self.conversation.streaming:
            return
        if self.settings.rpc_workers:
            self.apply_settings(self.settings.with_(rpc_workers=()))  # a reload setting
        else:
            self.load_engine()

    # ------------------------------------------------------------- chatting
    @Slot()
    def send(self) -> None:
        """The typed text (and documents) as the next message; in completion
        mode, as typed (spaces count), and with nothing typed, more of the text.
        They leave the input once stored (else it said why)."""
        c = self.conversation
        typed = self.input.toPlainText()
        text = typed if c.completion and typed.strip() else typed.strip()
        documents = self.attachment_bar.documents
        if not (text or documents or c.has_text):
            return
        if c.send(compose(text, documents)):
            self.input.clear()
            self.attachment_bar.take()

    @Slot()
    def _on_reply_ended(self) -> None:
        if self.conversation.closing:
            return
        if self._reload_after_reply:
            self._reload_after_reply = False
            self.load_engine()  # settings changed during the reply
        self._refresh_list()

    # --------------------------------------------------------- conversations
    @Slot(bool)
    def _refresh_list(self, reveal: bool = False, follow: bool = False) -> None:
        """List the conversations (``reveal``: with a search cleared, so that the
        open one shows; ``follow``, a search: where the open one is not listed,
        open the first). With none open, the first listed opens, or a new one."""
        c = self.conversation
        if reveal:
            self.search.blockSignals(True)
            self.search.clear()
            self.search.blockSignals(False)
        self.list.fill(c.listing(self.search.text()), c.id, follow and not c.streaming)
        if c.id is None:
            if self.list.count():
                self.list.setCurrentRow(0)
            else:
                c.new()

    @Slot(object, object)
    def _on_conversation_selected(self, item: QListWidgetItem | None, _prev: object) -> None:
        if item is not None:
            self.conversation.select(self.list.conversation_id(item))

    # ------------------------------------------------------------- settings
    @Slot(bool)
    def _on_speculation_toggled(self, on: bool) -> None:
        self.worker.set_speculation(on)  # the next round already follows it
        self.settings = self.settings.with_(speculation=on)
        self.settings_store.save(self.settings)
        self._update_speculation_label()

    @Slot()
    def forget_lookup_memory(self) -> None:
        """Delete what prompt lookup remembers of the conversations (on the
        engine's thread, after the reply it may be writing)."""
        self.request_forget_memory.emit(memory_folder(self.store.path))
        self.statusBar().showMessage("Prompt lookup's memory of your chats is deleted.", 5000)

    @Slot()
    def open_settings(self) -> None:
        info = self.conversation.engine_info
        gpu = bool(info and info.backend.gpu_offload)
        dialog = SettingsDialog(
            self.settings, self, gpu_offload=gpu, forget_memory=self.forget_lookup_memory
        )
        if exec_once(dialog):
            self.apply_settings(dialog.settings())

    @Slot()
    def open_models(self) -> None:
        dialog = ModelsDialog(ModelLibrary(), self.settings, self)
        if exec_once(dialog):
            self.apply_settings(dialog.chosen_settings())

    def apply_settings(self, new: Settings) -> bool:
        """Save and use ``new``; False (and nothing saved or unloaded) if a model
        file it names cannot be loaded."""
        old = self.settings
        # (MODEL_FIELDS: the settings declared model_file=True in storage/settings.py)
        if any(getattr(old, f) != getattr(new, f) for f in MODEL_FIELDS):
            problems = model_file_problems(new)
            if problems:
                self.show_error("The settings were not applied", "\n".join(problems.values()))
                return False
        self.settings = new
        self.settings_store.save(new)
        self.speculation_action.setChecked(new.speculation)
        self.chat.set_highlight(new.highlight_drafted)
        self.chat.set_pacing(new.even_streaming)
        self.stats.setVisible(new.show_stats)
        if new.lookup_memory != old.lookup_memory:
            self.worker.set_lookup_memory(lookup_memory(self.store, new.lookup_memory))
        # (RELOADS: the settings declared reloads=True in storage/settings.py)
        if any(getattr(old, f) != getattr(new, f) for f in RELOADS):
            if self.conversation.streaming:  # the reply runs on the models it started with
                self._reload_after_reply = True
                self.statusBar().showMessage("The new settings apply when this reply ends.", 8000)
            else:
                self.load_engine()
        self._update_speculation_label()
        return True

    # ---------------------------------------------------------------- helpers
    @Slot()
    def update_buttons(self) -> None:
        c = self.conversation
        ready, busy = c.engine_info is not None, c.streaming
        # (after a lost worker, Send says what happened and offers to go on here)
        lost = c.worker_lost is not None
        self.send_button.setEnabled((ready or lost) and not busy)
        self.stop_button.setEnabled(busy)
        idle = ready and not busy
        msgs = self.chat.messages
        self.regen_button.setEnabled(idle and bool(msgs) and msgs[-1].role == "assistant")
        continuable = c.continuable
        self.continue_button.setEnabled(idle and continuable)
        self.list.setEnabled(not busy)
        self.new_button.setEnabled(not busy)
        self.message_actions.update(continuable=continuable)

    def _update_speculation_label(self) -> None:
        on = self.speculation_action.isChecked()
        info = self.conversation.engine_info
        self.spec_label.setText(speculation_text(info, on, self.settings.policy))

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        if self.conversation.closing:  # (closed already: the app closes it again after exec())
            return super().closeEvent(event)
        self.conversation.closing = True
        self.replies.save_on_close()  # (before anything else can fail)
        if self.menus.local_service is not None:
            self.menus.local_service.stop()  # its requests end with the window's engine
        self.worker_thread.stop()
        self.store.close()
        super().closeEvent(event)


def lookup_memory(store: ConversationStore, on: bool) -> HistoryMemory | None:
    """What prompt lookup may copy from: the stored conversations, when ``on``
    (from the next reply)."""
    return HistoryMemory(store.path) if on else None
