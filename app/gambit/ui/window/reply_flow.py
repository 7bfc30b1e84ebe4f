"""A reply's life in the window: started, streamed, saved as it grows, ended.

A new reply gets a row of its own; a continued one (Continue) goes on in the
row of the reply it continues, whose text, drafted flags and tokens it
starts from. Either way the row holds what has streamed (autosaved every
``AUTOSAVE_MS``, at Stop and when the window closes), with the reply's tokens
while it may still be continued (``gambit.storage.prompts.continuing``).

Every step from the request to the reply's row either completes or leaves
the window idle with a message; ``Conversation.streaming`` is set only once
the row exists and the request is about to go.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from gambit.engine.text.continuation import KeptTokens
from gambit.engine.text.reply import GenerationConfig
from gambit.qt.reply_stream import ReplyDelta, ReplyResult
from gambit.qt.worker import EngineWorker
from gambit.storage.chat_store.rows import StoredMessage, completion_text
from gambit.storage.prompts.continuing import kept_record, kept_tokens
from gambit.storage.prompts.history import prompt_messages
from gambit.storage.reply_stats import CUT_STOPS, ReplyRecord, ReplyStop
from gambit.ui.stats.stats_charts import Sample, sample_of
from gambit.ui.stats.stats_panel import StatsPanel
from gambit.ui.stats.stored_figures import series_of
from gambit.ui.window.chat_view import reply_footer
from gambit.ui.window.conversation import Conversation
from gambit.ui.window.reply_record import continued_record, record_of, run_lengths

log = logging.getLogger(__name__)

# The streaming reply is written to the history this often (and at every stop),
# so that a crash or a kill loses at most this much of it.
AUTOSAVE_MS = 1000


@dataclass
class _Streaming:
    """The reply being written, and what a continued one started from."""

    msg_id: int
    tokenizer: str  # whose tokens ``tokens`` are
    base_text: str = ""
    base_drafted: list[bool] = field(default_factory=list)
    base: ReplyRecord | None = None  # None: a new reply
    tokens: list[int] = field(default_factory=list)  # from the deltas, a continued start first
    saved_text: str = ""  # the text as last written
    completion: bool = False  # a part of a completion-mode text (not a chat turn)
    samples: list[Sample] = field(default_factory=list)  # the panel's charts, as drawn

    @property
    def continued(self) -> bool:
        return self.base is not None


class ReplyFlow(QObject):
    """Starts, streams and ends the replies ``conversation`` asks for, on ``worker``."""

    request_generate = Signal(object, object)  # list[Message], GenerationConfig
    request_complete = Signal(str, object)  # the text to continue, GenerationConfig
    request_continue = Signal(object, object, object)  # list[Message], config, KeptTokens
    ended = Signal()  # a reply is over (written, or why not said)

    def __init__(self, conversation: Conversation, worker: EngineWorker, stats: StatsPanel) -> None:
        super().__init__(conversation)
        self.conversation, self.chat, self.stats = conversation, conversation.chat, stats
        self.worker = worker
        self._reply: _Streaming | None = None
        conversation.reply_wanted.connect(self.start)
        conversation.resume_wanted.connect(self.resume)
        self.request_generate.connect(worker.generate)
        self.request_complete.connect(worker.complete)
        self.request_continue.connect(worker.continue_reply)
        worker.delta.connect(self._on_delta)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self._autosave = QTimer(self)
        self._autosave.setInterval(AUTOSAVE_MS)
        self._autosave.timeout.connect(self.save_partial)

    # ------------------------------------------------------------------ start
    def start(self, conv_id: int, config: GenerationConfig) -> None:
        """A reply to conversation ``conv_id`` as stored, in a new row: the next
        chat turn, or in completion mode the text's next part."""
        store, info = self.conversation.store, self.conversation.engine_info
        try:
            conversation, stored = store.get(conv_id), store.messages(conv_id)
            completion = conversation.completion
            history = prompt_messages(stored, self.conversation.fallback_prompt(conversation))
            msg_id = store.add_message(conv_id, "assistant", "", complete=False)
        except Exception as exc:
            self.conversation.report("The reply could not be started", exc)
            return
        self._reply = _Streaming(msg_id, info.tokenizer if info else "", completion=completion)
        self.chat.begin_reply(msg_id)
        self._go()
        if completion:
            self.request_complete.emit(completion_text(stored), config)
        else:
            self.request_generate.emit(history, config)

    def resume(self, stored: list[StoredMessage], config: GenerationConfig) -> None:
        """More of ``stored[-1]``, a reply that was cut (``can_continue``), in its row."""
        cut, info = stored[-1], self.conversation.engine_info
        shown = self.chat.resume_reply()
        if shown is None:
            return
        summary = self.conversation.store.get(cut.conversation_id)
        history = prompt_messages(stored, self.conversation.fallback_prompt(summary))
        tokenizer = info.tokenizer if info else ""
        self._reply = _Streaming(cut.id, tokenizer, shown.text, list(shown.drafted),
                                 ReplyRecord.of(cut.stats), saved_text=shown.text)  # fmt: skip
        self._go()
        self.request_continue.emit(history, config, kept_tokens(cut.stats))

    def _go(self) -> None:
        self.stats.start_reply(continued=self._reply is not None and self._reply.continued)
        self.conversation.streaming = True
        self.conversation.changed.emit()
        self._autosave.start()

    @Slot()
    def stop(self) -> None:
        if self._reply is not None:
            self.worker.cancel()
            self.save_partial()
            self.conversation.say("Stopping…", 2000)

    # ------------------------------------------------------------- streaming
    def _kept(self, reply: _Streaming, stop: str, tokens: list[int]) -> dict[str, Any]:
        """The tokens to keep with a reply that ended with ``stop``, as the
        record's field (none once it ended on its own: it is not continued)."""
        if stop not in CUT_STOPS or not tokens or not reply.tokenizer or reply.completion:
            return {}  # (a completion goes on from its text: Continue adds a part)
        return {"kept_tokens": kept_record(KeptTokens(reply.tokenizer, tuple(tokens)))}

    @Slot()
    def save_partial(self, stop: str = ReplyStop.INTERRUPTED) -> None:
        """Write the reply as far as it has streamed, if it grew since the last write."""
        reply = self._reply
        if reply is None or self.chat.streaming is None:
            return
        # (held back by even streaming too; a continued reply's start included)
        text, drafted = self.chat.streamed()
        if text == reply.saved_text and stop == ReplyStop.INTERRUPTED:
            return
        record = replace(
            reply.base or ReplyRecord(), stop=stop, drafted=tuple(run_lengths(drafted)),
            **self._kept(reply, stop, reply.tokens),
        )  # fmt: skip
        try:
            self.conversation.store.update_message(reply.msg_id, text, False, record.to_json())
        except Exception as exc:
            # Not again for this reply (a locked file would stall the window each
            # time); the write at the end tries once more and says if it fails.
            self._autosave.stop()
            log.warning("could not save the streaming reply: %s", exc)
            self.conversation.say(f"The reply is not being saved: {exc}", 10000)
            return
        reply.saved_text = text

    @Slot(object)
    def _on_delta(self, delta: ReplyDelta) -> None:
        if self._reply is not None:
            self._reply.tokens.extend(delta.tokens)
        self.chat.add_to_reply(delta.text, delta.drafted, delta.round_s)
        if delta.snapshot is not None:
            self.stats.set_snapshot(delta.snapshot)
            if self._reply is not None:
                self._reply.samples.append(sample_of(delta.snapshot))

    # ------------------------------------------------------------------- end
    @Slot(object)
    def _on_finished(self, result: ReplyResult) -> None:
        self.finish(result, error=None)

    @Slot(str, object)
    def _on_failed(self, message: str, partial: ReplyResult | None) -> None:
        self.finish(partial, error=message)
        if not self.conversation.closing:
            self.conversation.show_error("The reply could not be completed", message)

    def finish(self, result: ReplyResult | None, error: str | None) -> None:
        """The reply is over (``result``: what came of it, None when nothing
        did): write it, show its footer, and leave the window idle."""
        self._autosave.stop()
        reply = self._reply
        if reply is None:
            return
        failure: Exception | None = None
        record = self._final_record(reply, result, error)
        if record is not None:  # (a continuation without a result has none: see there)
            # (no result: what the view received, a new reply's only)
            text = self.chat.streamed()[0] if result is None else reply.base_text + result.text
            complete = result is not None and error is None and not result.stopped_early
            try:
                self.conversation.store.update_message(
                    reply.msg_id, text, complete, record.to_json()
                )
            except Exception as exc:
                failure = exc
        shown = record if record is not None else reply.base
        try:
            streaming = self.chat.streaming
            if streaming is not None:  # (selected again later, the panel shows these)
                streaming.record = shown
            self.chat.end_reply(reply_footer(shown))  # as it will read when reopened
            if result is not None and result.snapshot.n_tokens:
                self.stats.set_snapshot(result.snapshot)  # every figure from this reply
                self.stats.reply_id = reply.msg_id
            else:
                self.stats.clear()  # no reply (refused, stopped at once): no figure at all
        finally:  # whatever failed, the window is idle again
            self._reply = None
            self.conversation.streaming = False
            self.conversation.changed.emit()
            self.ended.emit()
        if failure is not None and not self.conversation.closing:
            self.conversation.report("The reply is shown but could not be saved", failure)

    def _final_record(
        self, reply: _Streaming, result: ReplyResult | None, error: str | None
    ) -> ReplyRecord | None:
        """The record to write with the reply's end; None for a continuation
        that added nothing (the reply stays as it was)."""
        record = record_of(result, error)
        series = series_of([*reply.samples, sample_of(result.snapshot)]) if result else ()
        new_drafted = result.drafted if result is not None else ()
        tokens = list(result.tokens) if result is not None and result.tokens else reply.tokens
        record = replace(
            record, series=series, drafted=tuple(run_lengths((*reply.base_drafted, *new_drafted))),
            **self._kept(reply, record.stop or "", tokens),
        )  # fmt: skip
        if reply.base is None:
            return record
        if result is None or not result.snapshot.n_tokens:
            return None
        return continued_record(reply.base, record)

    def save_on_close(self) -> None:
        """The window closes mid-reply: write what has streamed, before anything
        else can fail; then nothing writes (the history closes next)."""
        self._autosave.stop()
        if self._reply is not None:
            try:
                self.save_partial(ReplyStop.WINDOW_CLOSED)
            except Exception:  # closing must not fail: the last autosave is what remains
                log.exception("could not save the reply while closing")
