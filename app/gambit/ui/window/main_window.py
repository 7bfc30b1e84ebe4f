"""The main window: conversations, the chat, the input, the bet's statistics."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import QInputDialog, QListWidgetItem, QSplitter, QToolBar

from gambit.engine.text.pacing import REPAINT_S
from gambit.engine.text.reply import GenerationConfig
from gambit.models.library import ModelLibrary
from gambit.models.settings_check import model_file_problems
from gambit.qt.compat import give_to_qt_parents
from gambit.qt.reply_stream import ReplyResult
from gambit.qt.worker import EngineInfo, EngineRequest, WorkerThread
from gambit.storage.chat_store.conversations import ConversationStore, message_title
from gambit.storage.documents import compose
from gambit.storage.history_memory import HistoryMemory, memory_folder
from gambit.storage.presets import DEFAULT_PRESET, PresetStore
from gambit.storage.prompts.continuing import can_continue
from gambit.storage.settings import MODEL_FIELDS, RELOADS, Settings, SettingsStore
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.settings.settings_dialog import SettingsDialog
from gambit.ui.stats.stats_panel import StatsPanel
from gambit.ui.window.attachments import Attachments
from gambit.ui.window.chat_presets import ChatPresets
from gambit.ui.window.chat_view import ChatMessage
from gambit.ui.window.drafter_refused import drop_layer_skip
from gambit.ui.window.menus import MenuBar
from gambit.ui.window.message_actions import MessageActions
from gambit.ui.window.panel_follow import PanelFollow
from gambit.ui.window.reply_flow import ReplyFlow
from gambit.ui.window.reply_record import shown_messages
from gambit.ui.window.window_layout import WindowPanes
from gambit.ui.window.window_widgets import LatencyProbe, exec_once, named, speculation_text
from gambit.ui.window.worker_lost import offer_local
from gambit.ui.window.writing_mode import WritingMode, mode_for

if TYPE_CHECKING:
    from gambit.qt.served import LocalService  # (the web stack loads only when served)

log = logging.getLogger(__name__)


class MainWindow(WindowPanes):
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
        self.engine_info: EngineInfo | None = None
        self.conversation_id: int | None = None
        self._worker_lost: str | None = None  # why the engine went with a lost worker
        # A setting that reloads the models changed while a reply was running.
        self._reload_after_reply = False
        self._deriving = False  # the load under way searches for layers to skip first
        self.local_service: LocalService | None = None  # Tools → Local server, once opened
        self.closing = False
        self._build()
        give_to_qt_parents(self)  # one owner per widget (see there)
        self._connect()
        self._use_lookup_memory(self.settings.lookup_memory)
        self.latency = LatencyProbe(self)
        self._refresh_list()
        if self.list.count():
            self.list.setCurrentRow(0)
        else:
            self.new_conversation()
        if settings_store.load_errors:
            self.show_error("Some settings could not be read and were reset",
                            "\n".join(settings_store.load_errors))  # fmt: skip
        if history_notice:
            self.show_error("Chat history", history_notice, warning=True)

    @property
    def generating(self) -> bool:
        """Whether a reply is under way (from its row's making to its end)."""
        return self.replies.generating

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
        self.replies = ReplyFlow(self, self, self.worker, self.stats)
        self.panel_follow = PanelFollow(self.chat, self.stats, lambda: self.generating)
        self.message_actions = MessageActions(self, self)
        self.writing = WritingMode(self, self.menus.menus["viewMenu"])
        presets = PresetStore(self.settings_store.path.with_name("presets.json"))  # (beside)
        self.presets = ChatPresets(self, self.menus.menus, presets, self.new_conversation,
                                   self.show_conversation)  # fmt: skip
        self.menuBar().insertMenu(
            self.menus.menus["viewMenu"].menuAction(), self.message_actions.menu("&Message")
        )
        self.attachments = Attachments(self, self.attachment_bar,
                                       (self.input.viewport(), self.chat.viewport()))  # fmt: skip
        self.attach_button.setToolTip(self.attachments.action.toolTip())
        file_menu = self.menus.menus["fileMenu"]
        file_menu.insertAction(file_menu.actions()[2], self.attachments.action)
        self.update_buttons()

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
        self.request_forget_memory.connect(w.forget_lookup_memory)
        w.load_progress.connect(self._on_load_progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.load_cancelled.connect(self._on_load_cancelled)
        w.served.connect(self.stats.set_snapshot)  # replies of the local server
        w.engine_lost.connect(self._on_engine_lost)
        self.replies.ended.connect(self._on_reply_ended)
        self.input.submitted.connect(self.send)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(self.replies.stop)
        self.cancel_load_button.clicked.connect(self.cancel_load)
        self.load_button.clicked.connect(self.load_engine)
        self.regen_button.clicked.connect(lambda: self.regenerate())
        self.continue_button.clicked.connect(self.continue_reply)
        self.attach_button.clicked.connect(self.attachments.pick)
        self.new_button.clicked.connect(self.new_conversation)
        self.search.textChanged.connect(lambda: self._refresh_list(follow=True))
        self.list.currentItemChanged.connect(self._on_conversation_selected)
        self.list.rename_requested.connect(self.rename_conversation)
        self.list.delete_requested.connect(self.delete_conversation)
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

    @Slot(str)
    def _on_load_progress(self, text: str) -> None:
        self.statusBar().showMessage(text)

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
        self.engine_info = None
        self.load_busy.hide()
        self.cancel_load_button.hide()
        self.stats.set_engine(None)
        self.stats.clear()
        self.model_label.setText("No model loaded")
        self.statusBar().showMessage(status, timeout_ms)
        self.update_buttons()

    @Slot(object)
    def _on_loaded(self, info: EngineInfo) -> None:
        self.engine_info = info
        self.load_busy.hide()
        self.cancel_load_button.hide()
        if info.drafter_refused:
            self.settings = drop_layer_skip(self, self.settings_store, info.drafter_refused)
        drafter = f" + {info.drafter_label}" if info.drafter_label else ""
        if info.draft_name:
            drafter += f" ({info.draft_name})"
        self.model_label.setText(f"{info.target_name}{drafter}")
        self.stats.set_engine(info)
        self.writing.fit_model(info)  # (an empty chat follows a base model)
        self.statusBar().showMessage(f"Ready — loaded in {info.load_seconds:.1f} s", 5000)
        self._update_speculation_label()
        self.update_buttons()

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        if self.closing:  # (a load the closing window stopped: nobody to tell)
            return
        self._without_model("The model could not be loaded — see Settings", 10000)
        self.show_error("The model could not be loaded", message)

    # ------------------------------------------------------------- chatting
    # Every step from Send to the request reaching the worker either completes
    # or leaves the window idle with a message: the typed text (and the
    # attached documents) stay in the input until stored (``ReplyFlow``).
    @Slot()
    def send(self) -> None:
        """The typed text (and documents) as the next message; in completion
        mode, as typed (spaces count), and with nothing typed, more of the text."""
        typed = self.input.toPlainText()
        text = typed if self.writing.completion and typed.strip() else typed.strip()
        documents = self.attachment_bar.documents
        if not (text or documents or self.writing.has_text) or not self._ready_for_reply():
            return
        if self._send(compose(text, documents)):
            self.input.clear()
            self.attachment_bar.take()

    def send_edited(self, msg_id: int, content: str) -> None:
        """Edit and resend: ``content`` replaces message ``msg_id`` and those after it."""
        if self.conversation_id is None or not self._ready_for_reply():
            return
        if self._generation_config() is None:  # (said why; nothing deleted yet)
            return
        try:
            retitle = self.store.titled_after(msg_id)
            self.store.delete_from(msg_id)  # (the new text gets a new row: see history_memory)
            if retitle:  # (a title made from the old text follows the new)
                self.store.rename(self.conversation_id, message_title(content))
        except Exception as exc:
            self.report("The message could not be replaced", exc)
            return
        self.show_conversation(self.conversation_id)
        self._send(content)

    def _ready_for_reply(self) -> bool:
        """Whether a reply can start now (else the window says why)."""
        if self.generating:
            return False
        if self.engine_info is None:
            if self._worker_lost is not None:  # say again what happened and what helps
                offer_local(self, self._worker_lost, self.continue_locally)
            else:
                self.statusBar().showMessage("The model is not loaded yet.", 5000)
            return False
        return not self.writing.refuses(self.engine_info)

    def _send(self, content: str) -> bool:
        """Store ``content`` as the user's message (a new chat's title made from
        it) and start the reply; False (and why, said) when it was not stored."""
        config = self._generation_config()
        if config is None:
            return False
        if self.conversation_id is None:
            self.new_conversation()
            if self.conversation_id is None:
                return False  # it said why; the text stays in the input box
        if not content:  # (completion mode: more of the text as it is)
            self.replies.start(self.conversation_id, config)
            return True
        try:
            msg_id = self.store.add_message(self.conversation_id, "user", content)
        except Exception as exc:
            self.report("The message could not be saved, so it was not sent", exc)
            return False
        self.chat.append_message(ChatMessage("user", content, id=msg_id))
        try:
            if self.store.get(self.conversation_id).title == "New chat":
                self.store.rename(self.conversation_id, message_title(content))
        except Exception as exc:  # the message is stored; only its title is missing
            log.warning("could not title conversation %s: %s", self.conversation_id, exc)
        self.replies.start(self.conversation_id, config)
        return True

    def _generation_config(self) -> GenerationConfig | None:
        """The open chat's sampling (its preset's), or None (and why, said); the
        worker drafts the reply or not as the toolbar and the preset say."""
        found = self.presets.generation_config()
        if found is not None:
            self.worker.set_speculation(found[1])
        return found[0] if found is not None else None

    def regenerate(self, reply_id: int | None = None) -> None:
        """Write reply ``reply_id`` (None: the last message, a reply) again; the
        messages after it go."""
        if self.conversation_id is None or not self._ready_for_reply():
            return
        config = self._generation_config()
        if config is None:
            return
        try:
            messages = self.store.messages(self.conversation_id)
            chosen = [m for m in messages if m.id == reply_id] if reply_id else messages[-1:]
            if not chosen or chosen[0].role != "assistant":
                return
            self.store.delete_from(chosen[0].id)
            self.show_conversation(self.conversation_id)
        except Exception as exc:
            self.report("The reply could not be regenerated", exc)
            return
        self.replies.start(self.conversation_id, config)

    @Slot()
    def continue_reply(self) -> None:
        """Continue: more of the last reply, which was cut (completion mode:
        more of the text, as a new part)."""
        if self.conversation_id is None or not self._ready_for_reply():
            return
        config = self._generation_config()
        if config is None:
            return
        if self.writing.completion:
            if self.writing.has_text:
                self.replies.start(self.conversation_id, config)
            return
        try:
            messages = self.store.messages(self.conversation_id)
        except Exception as exc:
            self.report("The reply could not be continued", exc)
            return
        if not can_continue(messages):
            self.statusBar().showMessage("The last message is not a cut reply to continue.", 5000)
            return
        self.show_conversation(self.conversation_id)  # (as stored: the view may be behind)
        self.replies.resume(messages, config)

    @Slot(str, object)
    def _on_engine_lost(self, message: str, partial: ReplyResult | None) -> None:
        """A worker holding the target's layers is gone and the engine with it: the
        reply so far is saved, and the window offers to go on on this machine.
        (Lost during a measurement, there is no reply: nothing is stored.)"""
        self.replies.finish(partial, error=message)
        self.engine_info = None
        self._worker_lost = message
        self.stats.set_engine(None)
        self.model_label.setText("No model loaded: a worker was lost")
        self.update_buttons()
        if not self.closing:
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

    @Slot()
    def _on_reply_ended(self) -> None:
        self.update_buttons()
        if self.closing:
            return
        if self._reload_after_reply:
            self._reload_after_reply = False
            self.load_engine()  # settings changed during the reply
        self._refresh_list(keep_selection=True)

    # --------------------------------------------------------- conversations
    def _refresh_list(self, *_: object, keep_selection: bool = True, follow: bool = False) -> None:
        """``follow`` (a search): where the open conversation is not listed, open the first."""
        select = self.conversation_id if keep_selection else None
        self.list.fill(self.store.list(self.search.text()), select, follow and not self.generating)

    @Slot()
    def new_conversation(self, preset: str = DEFAULT_PRESET) -> None:
        """A new chat from ``preset``, with its system prompt, in the model's mode."""
        if self.generating:
            return
        try:
            prompt = self.presets.settings_for(preset).system_prompt
            conv_id = self.store.create(mode=mode_for(self.engine_info), preset=preset,
                                        system_prompt=prompt)  # fmt: skip
        except Exception as exc:  # a full disk at start must not stop the window opening
            self.report("A new chat could not be started", exc)
            return
        self.search.clear()
        self.conversation_id = conv_id
        self._refresh_list()
        self.show_conversation(conv_id)
        self.input.setFocus()

    @Slot(object, object)
    def _on_conversation_selected(self, item: QListWidgetItem | None, _prev: object) -> None:
        if item is None or self.generating:
            return
        conv_id = self.list.conversation_id(item)
        if conv_id != self.conversation_id or not self.chat.messages:
            self.conversation_id = conv_id
            self.show_conversation(conv_id)

    def show_conversation(self, conv_id: int) -> None:
        messages, conversation = self.store.messages(conv_id), self.store.get(conv_id)
        self.writing.show(conv_id, conversation.completion)
        self.presets.show(conversation)
        self.chat.set_messages(shown_messages(messages))
        self.panel_follow.conversation_shown()  # (its figures: never another's)
        self.update_buttons()

    def open_conversation(self, conv_id: int) -> None:
        """Show conversation ``conv_id`` (one just made: Branch from here), selected."""
        self.search.clear()
        self.conversation_id = conv_id
        self._refresh_list()
        self.show_conversation(conv_id)

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
            self.writing.show(None, False)
            self.presets.show(None)
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
    def update_buttons(self) -> None:
        ready = self.engine_info is not None
        # (after a lost worker, Send says what happened and offers to go on here)
        lost = self._worker_lost is not None
        self.send_button.setEnabled((ready or lost) and not self.generating)
        self.stop_button.setEnabled(self.generating)
        idle = ready and not self.generating
        msgs = self.chat.messages
        self.regen_button.setEnabled(idle and bool(msgs) and msgs[-1].role == "assistant")
        cut = self._last_was_cut() or self.writing.has_text
        self.continue_button.setEnabled(idle and cut)
        self.writing.set_enabled(not self.generating)
        self.presets.set_enabled(not self.generating)
        self.list.setEnabled(not self.generating)
        self.new_button.setEnabled(not self.generating)
        self.message_actions.update(continuable=cut)

    def _last_was_cut(self) -> bool:
        """Whether the conversation's last message is a reply that may be continued."""
        if self.conversation_id is None or not self.chat.messages:
            return False
        try:
            return can_continue(self.store.messages(self.conversation_id))
        except Exception:  # (a store that cannot be read says so where it is used)
            return False

    def _update_speculation_label(self) -> None:
        on = self.speculation_action.isChecked()
        self.spec_label.setText(speculation_text(self.engine_info, on, self.settings.policy))

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        if self.closing:  # (closed already: the app closes it again after exec())
            return super().closeEvent(event)
        self.closing = True
        self.replies.save_on_close()  # (before anything else can fail)
        if self.local_service is not None:
            self.local_service.stop()  # its requests end with the window's engine
        self.worker_thread.stop()
        self.store.close()
        super().closeEvent(event)
