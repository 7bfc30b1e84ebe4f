"""The conversation open in the window, below its widgets.

``Conversation`` owns what a chat action needs and nothing a widget draws:
the open conversation's id and summary (its mode, its preset), the history
it is stored in, the loaded model (or why there is none) and whether a
reply is streaming. Every action on a conversation — send, edit and resend,
regenerate, continue, branch, delete, rename, a new one — goes through it,
behind one set of preconditions (``ready_for_reply``), and says how it went
through its signals. The window lays out and wires; the reply flow, the
message actions, chat files, presets and the writing mode act through this
object, never through the window.

Every step from Send to the request reaching the worker either completes or
leaves the window idle with a message: the typed text (and its documents)
stay in the input until stored (``send`` returns whether they were).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Signal

from gambit.engine.text.reply import GenerationConfig
from gambit.errors import GambitError
from gambit.qt.worker import EngineInfo, EngineWorker
from gambit.storage.chat_store.conversations import ConversationStore, message_title
from gambit.storage.chat_store.rows import ConversationSummary, StoredMessage
from gambit.storage.presets import DEFAULT_PRESET, Preset, find_preset
from gambit.storage.prompts.continuing import can_continue
from gambit.storage.settings import Settings
from gambit.ui.window.chat_view import ChatMessage, ChatView
from gambit.ui.window.reply_record import shown_messages

log = logging.getLogger(__name__)


def mode_for(info: EngineInfo | None) -> str:
    """The mode a new conversation starts in with this model loaded: a model
    without a chat template (a base model) continues text."""
    return "completion" if info is not None and not info.chat_template else "chat"


def error_text(title: str, exc: Exception) -> str:
    """What a user is told of ``exc``: a GambitError's reason; for anything
    else (a bug) a line, with the traceback sent to the log."""
    if isinstance(exc, GambitError):
        return str(exc)
    log.error("%s", title, exc_info=exc)
    return f"Unexpected error: {exc!r}. The log has the details."


class Conversation(QObject):
    """The open conversation of ``chat``, stored in ``store``, replied to by
    ``worker``'s engine with ``settings()`` and the chat's preset."""

    opened = Signal(object)  # ConversationSummary | None: drawn anew from the store
    created = Signal()  # a new conversation is open (to type its first message)
    listed = Signal(bool)  # the conversations changed; True: show this one (clear a search)
    changed = Signal()  # what can be done now changed (a reply, a model, a mode)
    said = Signal(str, int)  # a status line, and for how many ms
    failed = Signal(str, str, bool)  # an error box: title, message, a warning only
    lost = Signal(str)  # a reply asked of an engine a lost worker took (why)
    reply_wanted = Signal(int, object)  # conversation id, GenerationConfig
    resume_wanted = Signal(object, object)  # the stored messages (the last cut), config

    def __init__(
        self,
        store: ConversationStore,
        worker: EngineWorker,
        chat: ChatView,
        settings: Callable[[], Settings],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.store, self.worker, self.chat = store, worker, chat
        self._settings = settings
        self.id: int | None = None
        self.summary: ConversationSummary | None = None
        self.completion = False  # written as one text the model continues
        self.engine_info: EngineInfo | None = None
        self.worker_lost: str | None = None  # why the engine went with a lost worker
        self.streaming = False  # a reply is under way (from its row's making to its end)
        self.closing = False  # the window is closing: nothing more is said
        self.presets: list[Preset] = []  # the named presets (Default: the settings)

    # ------------------------------------------------------------ reading
    @property
    def settings(self) -> Settings:
        return self._settings()

    @property
    def has_text(self) -> bool:
        """Whether it is a completion-mode text to write more of."""
        return self.completion and any(m.text for m in self.chat.messages)

    @property
    def continuable(self) -> bool:
        """Whether Continue may go on: a cut last reply, or more of a text."""
        return self.has_text or self._last_was_cut()

    def _last_was_cut(self) -> bool:
        if self.id is None or not self.chat.messages:
            return False
        try:
            return can_continue(self.store.messages(self.id))
        except Exception:  # (a store that cannot be read says so where it is used)
            return False

    def settings_for(self, preset: str) -> Settings:
        """The settings a reply of a chat from ``preset`` is written with."""
        found = find_preset(self.presets, preset)
        return found.applied_to(self.settings) if found else self.settings

    def fallback_prompt(self, conversation: ConversationSummary) -> str:
        """The settings' system prompt, for a chat from before presets (one from
        a preset keeps its own, or none: ``gambit.storage.presets``)."""
        return "" if conversation.preset else self.settings.system_prompt

    # --------------------------------------------------------- telling
    def say(self, text: str, ms: int = 5000) -> None:
        self.said.emit(text, ms)

    def show_error(self, title: str, message: str, warning: bool = False) -> None:
        self.failed.emit(title, message, warning)

    def report(self, title: str, exc: Exception) -> None:
        """Tell the user about ``exc``; the traceback goes to the log if it is a bug."""
        self.show_error(title, error_text(title, exc))

    # ------------------------------------------------------- preconditions
    def ready_for_reply(self) -> bool:
        """Whether a reply can start now (else it says why)."""
        info = self.engine_info
        if self.streaming:
            return False
        if info is None:
            if self.worker_lost is not None:  # say again what happened and what helps
                self.lost.emit(self.worker_lost)
            else:
                self.say("The model is not loaded yet.")
            return False
        if not info.chat_template and not self.completion:
            self.show_error(
                "This model cannot chat",
                f"{info.target_name} has no chat template (it is a base model): it continues "
                "text. Turn on View → Completion mode for this conversation, or start a new "
                "chat, which opens in completion mode.",
            )
            return False
        return True

    def generation_config(self) -> GenerationConfig | None:
        """The open chat's sampling (its preset's), or None (and why, said); the
        worker drafts the reply or not as the toolbar and the preset say."""
        preset = self.summary.preset if self.summary else ""
        settings = self.settings_for(preset)
        try:
            config = settings.generation_config()
        except ValueError as exc:
            problems = settings.validate() or [str(exc)]
            where = f"the preset {preset}" if find_preset(self.presets, preset) else "Settings"
            self.show_error(
                "The settings cannot be used",
                "\n".join(problems) + f"\n\nCorrect them in {where}, then send again.",
            )
            return None
        self.worker.set_speculation(self.settings.speculation and settings.speculation)
        return config

    def _reply_config(self) -> GenerationConfig | None:
        """The config of a reply to the open conversation, when one may start."""
        if self.id is None or not self.ready_for_reply():
            return None
        return self.generation_config()

    # ------------------------------------------------------------ replies
    def send(self, content: str) -> bool:
        """Store ``content`` as the user's message (a new chat's title made from
        it) and start the reply; in completion mode, empty ``content`` writes more
        of the text. False (and why, said) when nothing was stored."""
        if not self.ready_for_reply():
            return False
        config = self.generation_config()
        if config is None:
            return False
        if self.id is None:
            self.new()
            if self.id is None:
                return False  # it said why; the text stays in the input box
        if not content:
            self.reply_wanted.emit(self.id, config)
            return True
        try:
            msg_id = self.store.add_message(self.id, "user", content)
        except Exception as exc:
            self.report("The message could not be saved, so it was not sent", exc)
            return False
        try:
            if self.store.get(self.id).title == "New chat":
                self.store.rename(self.id, message_title(content))
        except Exception as exc:  # the message is stored; only its title is missing
            log.warning("could not title conversation %s: %s", self.id, exc)
        self.chat.append_message(ChatMessage("user", content, id=msg_id))
        self.reply_wanted.emit(self.id, config)
        return True

    def send_edited(self, msg_id: int, content: str) -> None:
        """Edit and resend: ``content`` replaces message ``msg_id`` and those after it."""
        conv_id = self.id
        if conv_id is None or self._reply_config() is None:  # (said why; nothing deleted yet)
            return
        try:
            retitle = self.store.titled_after(msg_id)
            self.store.delete_from(msg_id)  # (the new text gets a new row: see history_memory)
            if retitle:  # (a title made from the old text follows the new)
                self.store.rename(conv_id, message_title(content))
        except Exception as exc:
            self.report("The message could not be replaced", exc)
            return
        self.show(conv_id)
        self.send(content)

    def regenerate(self, reply_id: int | None = None) -> None:
        """Write reply ``reply_id`` (None: the last message, a reply) again; the
        messages after it go."""
        config = self._reply_config()
        if config is None or self.id is None:
            return
        try:
            messages = self.store.messages(self.id)
            chosen = [m for m in messages if m.id == reply_id] if reply_id else messages[-1:]
            if not chosen or chosen[0].role != "assistant":
                return
            self.store.delete_from(chosen[0].id)
            self.show(self.id)
        except Exception as exc:
            self.report("The reply could not be regenerated", exc)
            return
        self.reply_wanted.emit(self.id, config)

    def continue_reply(self) -> None:
        """Continue: more of the last reply, which was cut (completion mode:
        more of the text, as a new part)."""
        config = self._reply_config()
        if config is None or self.id is None:
            return
        if self.completion:
            if self.has_text:
                self.reply_wanted.emit(self.id, config)
            return
        try:
            messages = self.store.messages(self.id)
        except Exception as exc:
            self.report("The reply could not be continued", exc)
            return
        if not can_continue(messages):
            self.say("The last message is not a cut reply to continue.")
            return
        self.show(self.id)  # (as stored: the view may be behind)
        self.resume_wanted.emit(messages, config)

    # ------------------------------------------------------------ messages
    def stored_with(self, msg_id: int | None, what: str, done: str) -> list[StoredMessage] | None:
        """The conversation as stored, when message ``msg_id`` is in it (else a
        status line saying there is nothing to ``what``, or why it was not ``done``)."""
        if msg_id is None or self.id is None or self.streaming:
            self.say(f"There is no message to {what} here.")
            return None
        try:
            stored = self.store.messages(self.id)
        except Exception as exc:
            self.report(f"The message could not be {done}", exc)
            return None
        if all(m.id != msg_id for m in stored):  # (gone since it was shown)
            self.show(self.id)
            return None
        return stored

    def branch(self, msg_id: int) -> None:
        """A new conversation with message ``msg_id`` and those before it, opened."""
        try:
            conv_id = self.store.branch(msg_id)
        except Exception as exc:
            self.report("The conversation could not be branched", exc)
            return
        self.open(conv_id)

    def delete_message(self, msg_id: int) -> None:
        conv_id = self.id
        try:
            self.store.delete_message(msg_id)
        except Exception as exc:
            self.report("The message could not be deleted", exc)
        if conv_id is not None:
            self.show(conv_id)

    def set_mode(self, completion: bool) -> bool:
        """Write the open conversation as one text (or as chat turns); False
        (and why, said) when the change could not be stored."""
        if self.id is not None:
            try:
                self.store.set_mode(self.id, "completion" if completion else "chat")
            except Exception as exc:
                self.report("The conversation's mode could not be changed", exc)
                return False
        self.completion = completion
        self.chat.set_completion(completion)
        self.changed.emit()
        return True

    def set_system_prompt(self, conv: ConversationSummary, text: str) -> None:
        try:
            self.store.set_system_prompt(conv.id, text)
            if not conv.preset:  # now its own: the settings' no longer applies
                self.store.set_preset(conv.id, DEFAULT_PRESET)
        except Exception as exc:
            self.report("The system prompt could not be saved", exc)
            return
        if conv.id == self.id:
            self.show(conv.id)

    # ------------------------------------------------------- conversations
    def new(self, preset: str = DEFAULT_PRESET) -> None:
        """A new chat from ``preset``, with its system prompt, in the model's mode."""
        if self.streaming:
            return
        try:
            conv_id = self.store.create(
                mode=mode_for(self.engine_info), preset=preset,
                system_prompt=self.settings_for(preset).system_prompt,
            )  # fmt: skip
        except Exception as exc:  # a full disk at start must not stop the window opening
            self.report("A new chat could not be started", exc)
            return
        self.open(conv_id)
        self.created.emit()

    def open(self, conv_id: int) -> None:
        """Show conversation ``conv_id``, listed and selected (a search cleared)."""
        self.id = conv_id
        self.listed.emit(True)
        self.show(conv_id)

    def select(self, conv_id: int) -> None:
        """The user chose ``conv_id`` in the list."""
        if self.streaming:
            return
        if conv_id != self.id or not self.chat.messages:
            self.id = conv_id
            self.show(conv_id)

    def show(self, conv_id: int) -> None:
        """Draw conversation ``conv_id`` (the open one) as stored."""
        messages, conversation = self.store.messages(conv_id), self.store.get(conv_id)
        self.summary = conversation
        self.completion = conversation.completion
        self.chat.set_completion(self.completion)
        self.chat.set_messages(shown_messages(messages))
        self.opened.emit(conversation)
        self.changed.emit()

    def rename(self, conv_id: int, title: str) -> None:
        if title.strip():
            self.store.rename(conv_id, title.strip())
            self.listed.emit(False)

    def delete(self, conv_id: int) -> None:
        """Delete conversation ``conv_id``; when it was open, none is (the list
        then opens another: ``listed``)."""
        self.store.delete(conv_id)
        if conv_id == self.id:
            self.id, self.summary, self.completion = None, None, False
            self.chat.set_completion(False)
            self.chat.set_messages([])
            self.opened.emit(None)
            self.changed.emit()
        self.listed.emit(False)

    def fit_model(self, info: EngineInfo | None) -> None:
        """A model is loaded: an empty conversation takes the mode it needs (one
        with messages keeps its own: the user chose it, or wrote in it)."""
        wanted = mode_for(info) == "completion"
        if info is None or self.id is None or wanted == self.completion or self.chat.messages:
            return
        self.set_mode(wanted)

    def listing(self, search: str) -> Sequence[ConversationSummary]:
        return self.store.list(search)
