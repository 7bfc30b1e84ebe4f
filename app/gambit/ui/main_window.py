"""The main window: conversations, the chat, the input, the bet's statistics."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import QInputDialog, QListWidgetItem, QMenu, QSplitter, QToolBar

from gambit.engine.pacing import REPAINT_S
from gambit.engine.reply import GenerationConfig
from gambit.errors import GambitError
from gambit.models.library import ModelLibrary
from gambit.models.settings_check import model_file_problems
from gambit.qt.reply_stream import ReplyDelta, ReplyResult
from gambit.qt.worker import EngineInfo, EngineRequest, WorkerThread
from gambit.storage.conversations import ConversationStore
from gambit.storage.history import prompt_messages
from gambit.storage.history_memory import HistoryMemory, memory_folder
from gambit.storage.settings import MODEL_FIELDS, RELOADS, Settings, SettingsStore
from gambit.ui.chat_view import ChatMessage, reply_footer
from gambit.ui.menus import MenuBar
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.reply_record import run_lengths, shown_messages, stats_dict, title_from
from gambit.ui.settings_dialog import SettingsDialog
from gambit.ui.stats_panel import StatsPanel
from gambit.ui.window_layout import WindowPanes
from gambit.ui.window_widgets import LatencyProbe, named, open_message
from gambit.ui.worker_lost import offer_local

if TYPE_CHECKING:
    from gambit.qt.served import LocalService  # (the web stack loads only when served)

log = logging.getLogger(__name__)

# The streaming reply is written to the history this often (and at every stop),
# so that a crash or a kill loses at most this much of it.
AUTOSAVE_MS = 1000


class MainWindow(WindowPanes):
    request_load = Signal(object, object)  # EngineRequest (or EngineConfig), None
    request_generate = Signal(object, object)  # list[Message], GenerationConfig
    request_forget_memory = Signal(object)  # folder, to EngineWorker.forget_lookup_memory

    def __init__(
        self,
        settings_store: SettingsStore,
        conversations: ConversationStore,
        worker: WorkerThread | None = None,
        history_notice: str | None = None,  # storage.recovery.OpenedHistory.notice
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
        self.engine_info: EngineInfo | None = None
        self.conversation_id: int | None = None
        self.generating = False
        self._reply_id: int | None = None
        self._saved_text: str | None = None  # the reply's text as last written
        self._worker_lost: str | None = None  # why the engine went with a lost worker
        # A setting that reloads the models changed while a reply was running.
        self._reload_after_reply = False
        self.local_service: LocalService | None = None  # Tools → Local server, once opened
        self._closing = False
        self._build()
        self._connect()
        self._use_lookup_memory(self.settings.lookup_memory)
        self.latency = LatencyProbe(self)
        self._refresh_list()
        if self.list.count():
            self.list.setCurrentRow(0)
        else:
            self.new_conversation()
        if settings_store.load_errors:
            self._show_error("Some settings could not be read and were reset",
                             "\n".join(settings_store.load_errors))  # fmt: skip
        if history_notice:
            self._show_error("Chat history", history_notice, warning=True)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        splitter = named(QSplitter(), "mainSplitter")
        splitter.addWidget(self._build_sidebar())
        splitter.addWidget(self._build_chat_area())
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 900])
        self.setCentralWidget(splitter)

        self.stats = StatsPanel(self)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.stats)
        self.resizeDocks([self.stats], [420], Qt.Orientation.Horizontal)
        self.stats.setVisible(self.settings.show_stats)
        self._build_toolbar()
        self._build_status_bar()
        self._repaint = QTimer(self)  # streaming text repaints on a timer, not per token
        self._repaint.setInterval(round(REPAINT_S * 1000))
        self._repaint.timeout.connect(self.chat.flush_reply)
        self._repaint.start()
        self._autosave = QTimer(self)
        self._autosave.setInterval(AUTOSAVE_MS)
        self._autosave.timeout.connect(self._save_partial)
        self._update_buttons()

    def _build_toolbar(self) -> None:
        toolbar = named(QToolBar("Main"), "mainToolbar")
        toolbar.setMovable(False)
        self.addToolBar(toolbar)
        self.speculation_action = named(QAction("Speculation", self), "speculationAction")
        self.speculation_action.setCheckable(True)
        self.speculation_action.setChecked(self.settings.speculation)
        self.models_action = named(QAction("Models…", self), "modelsAction")
        self.settings_action = named(QAction("Settings…", self), "settingsAction")
        self.menus = MenuBar(self, self)  # shortcuts and tooltips for these actions too
        toolbar.addAction(self.speculation_action)
        toolbar.addAction(self.menus.stats)
        toolbar.addSeparator()
        toolbar.addAction(self.models_action)
        toolbar.addAction(self.settings_action)

    def _connect(self) -> None:
        w = self.worker
        self.request_load.connect(w.load)
        self.request_generate.connect(w.generate)
        self.request_forget_memory.connect(w.forget_lookup_memory)
        w.load_progress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.delta.connect(self._on_delta)
        w.served.connect(self.stats.set_snapshot)  # replies of the local server
        w.finished.connect(self._on_finished)
        w.failed.connect(self._on_failed)
        w.engine_lost.connect(self._on_engine_lost)
        self.input.submitted.connect(self.send)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.cancel_load_button.clicked.connect(self.cancel_load)
        self.regen_button.clicked.connect(self.regenerate)
        self.new_button.clicked.connect(self.new_conversation)
        self.search.textChanged.connect(self._refresh_list)
        self.list.currentItemChanged.connect(self._on_conversation_selected)
        self.list.customContextMenuRequested.connect(self._on_list_menu)
        self.speculation_action.toggled.connect(self._on_speculation_toggled)
        self.settings_action.triggered.connect(self.open_settings)
        self.models_action.triggered.connect(self.open_models)

    # ------------------------------------------------------------------ engine
    def load_engine(self) -> None:
        s = self.settings
        self.engine_info = None
        self._worker_lost = None
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
        self.cancel_load_button.setVisible(request.derives)
        self.request_load.emit(request, None)
        self._update_buttons()

    @Slot(str)
    def _on_load_progress(self, text: str) -> None:
        self.statusBar().showMessage(text)

    @Slot()
    def cancel_load(self) -> None:
        """Stop the layer-skip search; the model then loads without a drafter."""
        self.worker.cancel()
        self.cancel_load_button.setEnabled(False)
        self.statusBar().showMessage("Cancelling the search for layers to skip…")

    @Slot(object)
    def _on_loaded(self, info: EngineInfo) -> None:
        self.engine_info = info
        self.load_busy.hide()
        self.cancel_load_button.hide()
        if info.drafter_refused:
            self._drop_layer_skip(info.drafter_refused)
        drafter = f" + {info.drafter_label}" if info.drafter_label else ""
        if info.draft_name:
            drafter += f" ({info.draft_name})"
        self.model_label.setText(f"{info.target_name}{drafter}")
        self.stats.set_engine(info)
        self.statusBar().showMessage(f"Ready — loaded in {info.load_seconds:.1f} s", 5000)
        self._update_speculation_label()
        self._update_buttons()

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self.engine_info = None
        self.load_busy.hide()
        self.cancel_load_button.hide()
        self.stats.set_engine(None)
        self.stats.clear()  # no figure may outlive the model it measured
        self.model_label.setText("No model loaded")
        self.statusBar().showMessage("The model could not be loaded — see Settings", 10000)
        self._show_error("The model could not be loaded", message)
        self._update_buttons()

    def _drop_layer_skip(self, reason: str) -> None:
        """Self-speculation was chosen but is not used: the settings say so too
        (drafter back to none), so that nothing claims a drafter that is not there."""
        self.settings = self.settings.with_(drafter="none")
        try:
            self.settings_store.save(self.settings)
        except Exception as exc:  # the model runs; only the choice is not remembered
            log.warning("could not save the settings: %s", exc)
        self._show_error(
            "Self-speculation is off",
            f"{reason}\n\nReplies use plain decoding; the drafter (Settings → Models → "
            "Drafter) is set back to None (choose one there again at any time).",
            warning=True,
        )

    # ------------------------------------------------------------- chatting
    # Every step from Send to the request reaching the worker either completes
    # or leaves the window idle with a message: the typed text stays in the
    # input box until it is stored, and "generating" is set only once the
    # reply's row exists and the request is about to go.
    @Slot()
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.generating:
            return
        if self.engine_info is None:
            if self._worker_lost is not None:  # say again what happened and what helps
                offer_local(self, self._worker_lost, self.continue_locally)
            else:
                self.statusBar().showMessage("The model is not loaded yet.", 5000)
            return
        config = self._generation_config()
        if config is None:
            return
        if self.conversation_id is None:
            self.new_conversation()
            if self.conversation_id is None:
                return  # it said why; the text stays in the input box
        try:
            self.store.add_message(self.conversation_id, "user", text)
        except Exception as exc:
            self._report("The message could not be saved, so it was not sent", exc)
            return
        self.input.clear()  # stored: from here on it is in the history
        self.chat.append_message(ChatMessage("user", text))
        try:
            if self.store.get(self.conversation_id).title == "New chat":
                self.store.rename(self.conversation_id, title_from(text))
        except Exception as exc:  # the message is stored; only its title is missing
            log.warning("could not title conversation %s: %s", self.conversation_id, exc)
        self._start_reply(config)

    def _generation_config(self) -> GenerationConfig | None:
        """The reply's sampling settings, or None (and a message) if they cannot be used."""
        try:
            return self.settings.generation_config()
        except ValueError as exc:
            problems = self.settings.validate() or [str(exc)]
            self._show_error(
                "The settings cannot be used",
                "\n".join(problems) + "\n\nCorrect them in Settings, then send again.",
            )
            return None

    def _start_reply(self, config: GenerationConfig) -> None:
        assert self.conversation_id is not None
        try:
            stored = self.store.messages(self.conversation_id)
            history = prompt_messages(stored, self.settings.system_prompt)
            self._reply_id = self.store.add_message(
                self.conversation_id, "assistant", "", complete=False
            )
        except Exception as exc:
            self._report("The reply could not be started", exc)
            return
        self._saved_text = ""
        self.chat.begin_reply()
        self.stats.start_reply()
        self.generating = True
        self._update_buttons()
        self._autosave.start()
        self.request_generate.emit(history, config)

    @Slot()
    def stop(self) -> None:
        if self.generating:
            self.worker.cancel()
            self._save_partial()
            self.statusBar().showMessage("Stopping…", 2000)

    @Slot()
    def regenerate(self) -> None:
        if self.generating or self.conversation_id is None or self.engine_info is None:
            return
        config = self._generation_config()
        if config is None:
            return
        try:
            messages = self.store.messages(self.conversation_id)
            if not messages or messages[-1].role != "assistant":
                return
            self.store.delete_from(messages[-1].id)
            self._show_conversation(self.conversation_id)
        except Exception as exc:
            self._report("The reply could not be regenerated", exc)
            return
        self._start_reply(config)

    @Slot()
    def _save_partial(self) -> None:
        """Write the reply as far as it has streamed, if it grew since the last write."""
        text, drafted = self.chat.streamed()  # held back by even streaming too
        if self._reply_id is None or self.chat.streaming is None or text == self._saved_text:
            return
        stats = {"stop": "interrupted", "drafted": run_lengths(drafted)}
        try:
            self.store.update_message(self._reply_id, text, False, stats)
        except Exception as exc:
            # Not again for this reply (a locked file would stall the window each
            # time); the write at the end tries once more and says if it fails.
            self._autosave.stop()
            log.warning("could not save the streaming reply: %s", exc)
            self.statusBar().showMessage(f"The reply is not being saved: {exc}", 10000)
            return
        self._saved_text = text

    @Slot(object)
    def _on_delta(self, delta: ReplyDelta) -> None:
        self.chat.add_to_reply(delta.text, delta.drafted, delta.round_s)
        if delta.snapshot is not None:
            self.stats.set_snapshot(delta.snapshot)

    @Slot(object)
    def _on_finished(self, result: ReplyResult) -> None:
        self._finish_reply(result, error=None)

    @Slot(str, object)
    def _on_failed(self, message: str, partial: ReplyResult | None) -> None:
        self._finish_reply(partial, error=message)
        if not self._closing:
            self._show_error("The reply could not be completed", message)

    @Slot(str, object)
    def _on_engine_lost(self, message: str, partial: ReplyResult | None) -> None:
        """A worker holding the target's layers is gone and the engine with it: the
        reply so far is saved, and the window offers to go on on this machine.
        (Lost during a measurement, there is no reply: nothing is stored.)"""
        if self.generating:
            self._finish_reply(partial, error=message)
        self.engine_info = None
        self._worker_lost = message
        self.stats.set_engine(None)
        self.model_label.setText("No model loaded: a worker was lost")
        self._update_buttons()
        if not self._closing:
            offer_local(self, message, self.continue_locally)

    @Slot()
    def continue_locally(self) -> None:
        """Clear the workers setting (saved) and load the whole model here."""
        if self.generating:
            return
        if self.settings.rpc_workers:
            self.apply_settings(self.settings.with_(rpc_workers=()))  # a reload setting
        else:
            self.load_engine()

    def _finish_reply(self, result: ReplyResult | None, error: str | None) -> None:
        self._autosave.stop()
        text = result.text if result else self.chat.streamed()[0]
        failure: Exception | None = None
        stats = stats_dict(result, error)
        if self._reply_id is not None:
            complete = result is not None and error is None and not result.stopped_early
            try:
                self.store.update_message(self._reply_id, text, complete, stats)
            except Exception as exc:
                failure = exc
        try:
            self.chat.end_reply(reply_footer(stats))  # as it will read when reopened
            if result is not None and result.snapshot.n_tokens:
                self.stats.set_snapshot(result.snapshot)  # every figure from this reply
            else:
                self.stats.clear()  # no reply (refused, stopped at once): no figure at all
        finally:  # whatever failed, the window is idle again
            self.generating = False
            self._reply_id = None
            self._saved_text = None
            self._update_buttons()
            if self._reload_after_reply and not self._closing:
                self._reload_after_reply = False
                self.load_engine()  # settings changed during the reply
        if failure is not None:
            if not self._closing:
                self._report("The reply is shown but could not be saved", failure)
            return
        self._refresh_list(keep_selection=True)

    # --------------------------------------------------------- conversations
    def _refresh_list(self, *_: object, keep_selection: bool = True) -> None:
        select = self.conversation_id if keep_selection else None
        self.list.fill(self.store.list(self.search.text()), select)

    @Slot()
    def new_conversation(self) -> None:
        if self.generating:
            return
        try:
            conv_id = self.store.create()
        except Exception as exc:  # a full disk at start must not stop the window opening
            self._report("A new chat could not be started", exc)
            return
        self.search.clear()
        self.conversation_id = conv_id
        self._refresh_list()
        self._show_conversation(conv_id)
        self.input.setFocus()

    @Slot(object, object)
    def _on_conversation_selected(self, item: QListWidgetItem | None, _prev: object) -> None:
        if item is None or self.generating:
            return
        conv_id = self.list.conversation_id(item)
        if conv_id != self.conversation_id or not self.chat.messages:
            self.conversation_id = conv_id
            self._show_conversation(conv_id)

    def _show_conversation(self, conv_id: int) -> None:
        self.chat.set_messages(shown_messages(self.store.messages(conv_id)))
        self._update_buttons()

    @Slot(QPoint)
    def _on_list_menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None or self.generating:
            return
        conv_id = self.list.conversation_id(item)
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete")
        chosen = menu.exec(self.list.mapToGlobal(pos))
        if chosen is rename:
            self.rename_conversation(conv_id)
        elif chosen is delete:
            self.delete_conversation(conv_id)

    def rename_conversation(self, conv_id: int, title: str | None = None) -> None:
        if title is None:
            old = self.store.get(conv_id).title
            title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=old)
            if not ok:
                return
        if title.strip():
            self.store.rename(conv_id, title.strip())
            self._refresh_list()

    def delete_conversation(self, conv_id: int) -> None:
        self.store.delete(conv_id)
        if conv_id == self.conversation_id:
            self.conversation_id = None
            self.chat.set_messages([])
        self._refresh_list()
        if self.conversation_id is None:
            if self.list.count():
                self.list.setCurrentRow(0)
            else:
                self.new_conversation()

    # ------------------------------------------------------------- settings
    @Slot(bool)
    def _on_speculation_toggled(self, on: bool) -> None:
        self.worker.set_speculation(on)  # the next round already follows it
        self.settings = self.settings.with_(speculation=on)
        self.settings_store.save(self.settings)
        self._update_speculation_label()

    def _use_lookup_memory(self, on: bool) -> None:
        """Let prompt lookup copy from the stored conversations (from the next reply)."""
        self.worker.set_lookup_memory(HistoryMemory(self.store.path) if on else None)

    @Slot()
    def forget_lookup_memory(self) -> None:
        """Delete what prompt lookup remembers of the conversations (on the
        engine's thread, after the reply it may be writing)."""
        self.request_forget_memory.emit(memory_folder(self.store.path))
        self.statusBar().showMessage("Prompt lookup's memory of your chats is deleted.", 5000)

    @Slot()
    def open_settings(self) -> None:
        gpu = bool(self.engine_info and self.engine_info.backend.gpu_offload)
        dialog = SettingsDialog(
            self.settings, self, gpu_offload=gpu, forget_memory=self.forget_lookup_memory
        )
        if dialog.exec() != SettingsDialog.DialogCode.Accepted:
            return
        self.apply_settings(dialog.settings())

    @Slot()
    def open_models(self) -> None:
        dialog = ModelsDialog(ModelLibrary(), self.settings, self)
        if dialog.exec() != ModelsDialog.DialogCode.Accepted:
            return
        self.apply_settings(dialog.chosen_settings())

    def apply_settings(self, new: Settings) -> bool:
        """Save and use ``new``; False (and nothing saved or unloaded) if a model
        file it names cannot be loaded."""
        old = self.settings
        # (MODEL_FIELDS: the settings declared model_file=True in storage/settings.py)
        if any(getattr(old, f) != getattr(new, f) for f in MODEL_FIELDS):
            problems = model_file_problems(new)
            if problems:
                self._show_error("The settings were not applied", "\n".join(problems.values()))
                return False
        self.settings = new
        self.settings_store.save(new)
        self.speculation_action.setChecked(new.speculation)
        self.chat.set_highlight(new.highlight_drafted)
        self.chat.set_pacing(new.even_streaming)
        self.stats.setVisible(new.show_stats)
        if new.lookup_memory != old.lookup_memory:
            self._use_lookup_memory(new.lookup_memory)
        # (RELOADS: the settings declared reloads=True in storage/settings.py)
        if any(getattr(old, f) != getattr(new, f) for f in RELOADS):
            if self.generating:  # the reply runs on the models it started with
                self._reload_after_reply = True
                self.statusBar().showMessage("The new settings apply when this reply ends.", 8000)
            else:
                self.load_engine()
        self._update_speculation_label()
        return True

    # ---------------------------------------------------------------- helpers
    def _update_buttons(self) -> None:
        ready = self.engine_info is not None
        # (after a lost worker, Send says what happened and offers to go on here)
        lost = self._worker_lost is not None
        self.send_button.setEnabled((ready or lost) and not self.generating)
        self.stop_button.setEnabled(self.generating)
        msgs = self.chat.messages
        self.regen_button.setEnabled(
            ready and not self.generating and bool(msgs) and msgs[-1].role == "assistant"
        )
        self.list.setEnabled(not self.generating)
        self.new_button.setEnabled(not self.generating)

    def _update_speculation_label(self) -> None:
        info = self.engine_info
        if info is None or info.drafter_label is None:
            text = "Speculation: no drafter"
        elif not self.speculation_action.isChecked():
            text = "Speculation: off"
        else:
            text = f"Speculation: {info.drafter_label}, {self.settings.policy}"
        self.spec_label.setText(text)

    def _report(self, title: str, exc: Exception) -> None:
        """Tell the user about ``exc``; the traceback goes to the log if it is a bug."""
        if isinstance(exc, GambitError):
            message = str(exc)
        else:
            log.error("%s", title, exc_info=exc)
            message = f"Unexpected error: {exc!r}. The log has the details."
        self._show_error(title, message)

    def _show_error(self, title: str, message: str, warning: bool = False) -> None:
        open_message(self, title, message, warning)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._closing = True
        if self.generating and self._reply_id is not None:
            # Save what has streamed so far before anything else can fail.
            partial = self.chat.streamed()[0]
            try:
                self.store.update_message(self._reply_id, partial, False, {"stop": "window closed"})
            except Exception:  # closing must not fail: the last autosave is what remains
                log.exception("could not save the reply while closing")
        if self.local_service is not None:
            self.local_service.stop()  # its requests end with the window's engine
        self.worker_thread.stop()
        self.store.close()
        super().closeEvent(event)
