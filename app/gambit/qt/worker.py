"""The only bridge between the window and the engine.

``EngineWorker`` lives on one long-lived ``QThread`` and owns every llama.cpp
object; all llama calls happen there (llama.cpp releases the GIL inside its
native calls, so the window stays live). Requests arrive as queued signals;
results leave as frozen dataclasses. ``cancel``, ``close`` and
``set_speculation`` are called directly from the UI thread: they only set a
``threading.Event`` or a bool that the round loop (or a draft's derivation)
reads between steps.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from gambit.engine.drafters.registry import DRAFTERS, DrafterKind
from gambit.engine.machine.backend import BackendInfo, detect_backend
from gambit.engine.machine.busy import LoadMeter
from gambit.engine.machine.fim import fim_tokens
from gambit.engine.machine.placement import TargetPlacement, describe_costs
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.machine.target_host import WorkerLostError
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.chat import Message
from gambit.engine.text.continuation import KeptTokens
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.errors import GambitError, OperationCancelledError
from gambit.fsutil import Progress
from gambit.models.default_model import default_model_path, describe_progress
from gambit.models.drafter_files import DERIVATIONS, resolve_drafter_file
from gambit.qt.reply_stream import ReplyStream
from gambit.serve.jobs import Job, Outcome, run_job
from gambit.storage.history_memory import HistoryMemory, Tokenizer
from gambit.storage.history_memory import forget as forget_lookup_memory

if TYPE_CHECKING:
    from gambit.bench import MeasureRequest  # (imported when a measurement starts)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineInfo:
    target_name: str
    draft_name: str | None
    drafter: str  # a kind of gambit.engine.drafters.registry
    drafter_label: str | None  # "draft model", "prompt lookup"
    n_ctx: int
    backend: BackendInfo
    load_seconds: float
    # The drafter's shape in one line: "tree, up to 8 nodes", "skips blocks 12, 15 of 30"
    drafter_detail: str | None = None
    # The target's kernels and why (gambit.engine.machine.kernels.KernelChoice.describe)
    kernels: str | None = None
    # Why the drafter chosen in the settings is not used, in plain words (layer
    # skipping would not pay, or its search was cancelled); None when it is.
    drafter_refused: str | None = None
    # Where the target's layers live when workers hold some (None: all here),
    # and what one target pass costs ("Target pass: t(1) 12.3 ms · t(5)/t(1) 1.4").
    placement: TargetPlacement | None = None
    target_costs: str = ""
    # Equal for targets that spell text with the same tokens: the tokens kept
    # with a cut reply are this tokenizer's (Engine.tokenizer_fingerprint).
    tokenizer: str = ""
    # Whether the target has a chat template (else it completes text only: a
    # base model, whose conversations open in completion mode).
    chat_template: bool = True
    fills_in_the_middle: bool = False  # it declares FIM tokens (the server's suffix)


@dataclass(frozen=True)
class EngineRequest:
    """An engine to load once the worker has done the slow parts, off the UI thread:
    fetching the embedded default model (``target`` None) and, for a ``drafter``
    whose file is derived from the target (``derives``), finding or deriving that
    file (cached; a minute or more the first time). ``make_config(target,
    derived_draft)`` then builds the config (``Settings.engine_config``)."""

    target: Path | None
    make_config: Callable[[Path, Path | None], EngineConfig]
    drafter: DrafterKind = "none"
    options: RuntimeOptions | None = None  # how a derivation runs the target

    @property
    def derives(self) -> bool:
        """Whether the drafter's file is derived before the load (the user may cancel it)."""
        return DRAFTERS[self.drafter].file == "derived"


# Reading a long history into the lookup memory (~1 MB of text a second):
# at most this long before a reply, then in slices between requests.
RECALL_BUDGET_S = 0.2
IDLE_SLICE_S = 0.1


class EngineWorker(QObject):
    load_progress = Signal(str)
    loaded = Signal(object)  # EngineInfo
    load_failed = Signal(str)
    load_cancelled = Signal()  # Cancel stopped a load at its next step: no model loaded
    delta = Signal(object)  # ReplyDelta
    finished = Signal(object)  # ReplyResult
    failed = Signal(str, object)  # message, partial ReplyResult (None: nothing streamed)
    # A worker holding the target's layers is gone, and the engine with it:
    # message (naming the worker), partial ReplyResult
    engine_lost = Signal(str, object)
    measure_progress = Signal(object)  # gambit.measure.MeasureProgress
    measure_finished = Signal(object)  # gambit.measure_history.MeasureOutcome
    served = Signal(object)  # MetricsSnapshot of a reply the local server asked for

    def __init__(self) -> None:
        super().__init__()
        self._engine: Engine | None = None
        self._cancel = threading.Event()
        self._closing = threading.Event()  # set once by WorkerThread.stop: give up any load
        self._speculation = True
        # The memory of stored conversations prompt lookup copies from (None: off)
        self._memory: HistoryMemory | None = None

    # ---- called from the UI thread (thread-safe by construction)
    def cancel(self) -> None:
        """Stop the reply at the next round, or a load (a layer-skip search
        included) at its next step."""
        self._cancel.set()

    def close(self) -> None:
        """The window is closing: whatever runs now stops as soon as it can."""
        self._closing.set()
        self._cancel.set()

    def set_speculation(self, enabled: bool) -> None:
        """Takes effect at the next round, mid-reply included."""
        self._speculation = enabled
        engine = self._engine
        if engine is not None:
            engine.set_speculation(enabled)

    def set_lookup_memory(self, memory: HistoryMemory | None) -> None:
        """The memory prompt lookup copies from, from the next reply (None:
        the current conversation only, and nothing else of the history is read)."""
        self._memory = memory

    # ---- slots, run on the worker thread
    @Slot(object)
    def forget_lookup_memory(self, folder: Path) -> None:
        """Delete the memory saved in ``folder``, and drop it from memory if it
        is the one in use (here, so that no reply is saving it meanwhile)."""
        try:
            if self._memory is not None and self._memory.folder == folder:
                if self._engine is not None:
                    self._engine.set_history(None)
                self._memory.forget()  # (rebuilt before the next reply while the setting is on)
            else:
                forget_lookup_memory(folder)
        except OSError as exc:
            log.warning("could not delete the lookup memory: %s", exc)

    @Slot(object, object)
    def load(self, config: EngineConfig | EngineRequest | None, make_config: object) -> None:
        """Load ``config``: an ``EngineConfig`` as it is, an ``EngineRequest`` once its
        target and derived draft are found; with None, provision the default
        model and call ``make_config(path)`` to build the config around it."""
        t0 = time.perf_counter()
        self._close_engine()
        if not self._closing.is_set():
            self._cancel.clear()  # a Stop meant for an earlier reply must not cancel this
        refused: str | None = None
        try:
            if isinstance(config, EngineRequest):
                config, refused = self._resolve(config)
            elif config is None:
                assert callable(make_config)
                config = make_config(self._default_model())
            assert isinstance(config, EngineConfig)
            engine = Engine(config, self._say_loading)  # (it says what it does)
            engine.set_speculation(self._speculation)
            self._engine = engine
            # A layer-skip draft is the target itself; drafter_detail describes it.
            draft = config.draft if DRAFTERS[config.drafter].file == "chosen" else None
            info = EngineInfo(
                target_name=config.target.name,
                draft_name=draft.name if draft else None,
                drafter=config.drafter,
                drafter_label=engine.drafter.name if engine.drafter else None,
                n_ctx=engine.target.n_ctx,
                backend=detect_backend(),
                load_seconds=time.perf_counter() - t0,
                drafter_detail=engine.drafter_detail,
                kernels=engine.target_kernels.describe(),
                drafter_refused=refused,
                placement=engine.placement,
                target_costs=describe_costs(engine.costs),  # (as measured at this load)
                tokenizer=engine.tokenizer_fingerprint,
                chat_template=bool(engine.target.chat_template()),
                fills_in_the_middle=fim_tokens(engine.target) is not None,
            )
            self.loaded.emit(info)
            self._recall(engine)  # (a long history is read while the user types)
            self._keep_reading_later()
        except OperationCancelledError:
            if self._closing.is_set():
                log.info("the window closed during a load: the load stopped")
            else:
                self._cancel.clear()  # (it was meant for this load only)
                self.load_cancelled.emit()
        except GambitError as exc:
            self.load_failed.emit(str(exc))
        except Exception as exc:
            log.exception("loading failed")
            self.load_failed.emit(f"Unexpected error while loading: {exc!r}")

    def _resolve(self, request: EngineRequest) -> tuple[EngineConfig, str | None]:
        """The config, and why the chosen drafter is not in it (or None)."""
        target = request.target if request.target is not None else self._default_model()
        if not request.derives:
            return request.make_config(target, None), None
        draft, refused = self._derived_draft(request.drafter, target, request.options)
        config = request.make_config(target, draft)
        if refused is not None:  # the model runs without a drafter
            config = replace(config, drafter="none", draft=None, tree=False)
        return config, refused

    def _say_loading(self, text: str) -> None:
        """Say what the load does now; a Cancel stops the load here, at its next
        step (the engine closes what it opened; a download stops its pip)."""
        if self._cancel.is_set():
            raise OperationCancelledError("Loading was cancelled.")
        self.load_progress.emit(text)

    def _default_model(self) -> Path:
        def progress(stage: str, done: int, total: int) -> None:
            self._say_loading(
                f"Preparing the default model: {describe_progress(stage, done, total)}"
            )

        return default_model_path(progress=progress)

    def _derived_draft(
        self, drafter: DrafterKind, target: Path, options: RuntimeOptions | None
    ) -> tuple[Path | None, str | None]:
        """``drafter``'s file derived from ``target``: from the cache, or derived
        now (a minute or more, the first time); or None and why, when drafting
        with it would not pay or ``cancel`` stopped the derivation. Closing the
        window stops it too, and the load fails (``OperationCancelledError``)."""

        def progress_of(activity: str) -> Progress:
            self.load_progress.emit(f"{activity} in {target.name}…")

            def progress(stage: str, done: int, total: int) -> None:
                pct = int(100 * done / total) if total else 100
                self.load_progress.emit(f"{activity}: {stage} — {pct}%")

            return progress

        try:
            found = resolve_drafter_file(
                drafter, target, progress=progress_of, cancel=self._cancel, options=options
            )
        except OperationCancelledError:
            if self._closing.is_set():
                raise
            self._cancel.clear()  # meant for the derivation, not for the load that follows
            return None, DERIVATIONS[drafter].cancelled
        return (None, found.refusal) if found.refusal is not None else (found.path, None)

    @Slot(object, object)
    def generate(self, messages: list[Message], config: GenerationConfig) -> None:
        engine = self._engine_for_reply()
        if engine is not None:
            self._stream(ReplyStream(engine), engine.chat(messages, config, self._cancel))

    @Slot(str, object)
    def complete(self, text: str, config: GenerationConfig) -> None:
        """More of ``text``, continued in place (a conversation in completion mode)."""
        engine = self._engine_for_reply()
        if engine is not None:
            self._stream(ReplyStream(engine), engine.complete(text, config, self._cancel))

    @Slot(object, object, object)
    def continue_reply(
        self, messages: list[Message], config: GenerationConfig, kept: KeptTokens | None
    ) -> None:
        """More of ``messages[-1]``, a reply that was cut, from the tokens it
        ended with (``kept`` where they spell its text: ``Engine.resume_tokens``)."""
        engine = self._engine_for_reply()
        if engine is None:
            return
        if not messages or messages[-1].role != "assistant":
            self.failed.emit("There is no reply to continue.", None)
            return
        *asked, cut = messages
        reply = ReplyStream(engine)

        def rounds() -> Iterator[Round]:  # (run by _stream: its failures are a reply's)
            start = engine.resume_tokens(cut.content, kept)
            reply.continues_from(start)
            yield from engine.chat(asked, config, self._cancel, reply=start)

        self._stream(reply, rounds())

    def _engine_for_reply(self) -> Engine | None:
        """The engine, ready for a reply (a Stop meant for an earlier one cleared),
        or None and the window told."""
        if self._engine is None:
            self.failed.emit("No model is loaded.", None)
            return None
        if not self._closing.is_set():
            self._cancel.clear()
        return self._engine

    def _stream(self, reply: ReplyStream, rounds: Iterator[Round]) -> None:
        """Stream ``rounds`` to the window: deltas, then ``finished`` or ``failed``."""
        engine = reply.engine
        self._recall(engine)
        load = LoadMeter()  # were other programs busy while the reply was timed?
        try:
            for rnd in rounds:
                delta = reply.add(rnd)
                if delta is not None:
                    self.delta.emit(delta)
            reading = load.read()
            # A reply that drafted is compared with plain decoding on its own
            # context (not re-timed while the window closes: nobody would read it).
            stats = reply.tracker.stats
            baseline = engine.finish_reply(stats, remeasure=not self._closing.is_set())
            self.finished.emit(reply.result(reading.describe() if reading.busy else None, baseline))
        except WorkerLostError as exc:
            self._close_engine()  # its target cannot decode again; a load starts afresh
            self.engine_lost.emit(str(exc), reply.partial())
        except GambitError as exc:
            self.failed.emit(str(exc), reply.partial())
        except Exception as exc:
            log.error("generation crashed:\n%s", traceback.format_exc())
            self.failed.emit(f"The generation crashed: {exc!r}", reply.partial())
        finally:
            self._save_memory()

    @Slot(object)
    def serve(self, job: Job) -> None:
        """A request of the local server (``gambit.serve``), in turn with the
        window's own replies on this thread; its figures go to the panel too."""
        if self._closing.is_set():
            job.on_done(Outcome(finish_reason="cancelled"))
            return
        if self._engine is None:
            job.on_done(Outcome(error="No model is loaded.", status=503))
            return
        job.on_snapshot = self.served.emit
        self._recall(self._engine)
        try:
            run_job(self._engine, job)
        finally:
            self._save_memory()

    @Slot(object)
    def measure(self, request: MeasureRequest) -> None:
        """Replay the user's stored turns on the loaded models (``gambit.bench``):
        progress after every replay, then one ``measure_finished``. ``cancel``
        stops it within a round; the engine is left as a fresh load leaves it."""
        # Imported here: the measuring code adds ~0.2 s to the window's start.
        from gambit.bench import MeasurementCancelledError, MeasureOutcome, measure_history

        engine = self._engine
        if engine is None:
            self.measure_finished.emit(MeasureOutcome(error="No model is loaded: load one first."))
            return
        if not self._closing.is_set():
            self._cancel.clear()
        try:
            report, path = measure_history(
                engine, request, self._cancel, self.measure_progress.emit
            )
            self.measure_finished.emit(MeasureOutcome(report, path))
        except MeasurementCancelledError as exc:
            self.measure_finished.emit(MeasureOutcome(error=str(exc), cancelled=True))
        except WorkerLostError as exc:
            # As for a lost reply: the target cannot decode again, so the engine
            # goes and the window offers to load it here; nothing was saved.
            message = _measurement_lost(exc, engine)
            self._close_engine()
            # The window hears of the loss first: when the dialog shows the
            # outcome, the window no longer shows the model as loaded (queued
            # signals arrive in the order they were sent; the other way round
            # a check between the two saw the dialog done and the model there).
            self.engine_lost.emit(message, None)
            self.measure_finished.emit(MeasureOutcome(error=message, worker_lost=True))
        except GambitError as exc:
            self.measure_finished.emit(MeasureOutcome(error=str(exc)))
        except Exception as exc:
            log.error("measurement crashed:\n%s", traceback.format_exc())
            self.measure_finished.emit(
                MeasureOutcome(error=f"The measurement failed unexpectedly: {exc!r}")
            )

    @Slot()
    def shutdown(self) -> None:
        self._close_engine()

    # ---- helpers
    def _recall(self, engine: Engine) -> None:
        """Bring the lookup memory in step with the stored conversations and
        hand it to the engine (only when the setting is on and the drafter
        copies text; a failure costs the memory, never the reply)."""
        memory = self._memory
        if memory is None or not engine.copies_text:
            engine.set_history(None)
            return
        try:
            engine.set_history(memory.index(_tokenizer(engine), RECALL_BUDGET_S))
        except Exception:
            log.exception("the lookup memory could not be used")
            engine.set_history(None)

    def _save_memory(self) -> None:
        """Save what the memory learned before the reply (after it: its first
        token never waits for the write), and go on reading what remains."""
        if self._memory is not None:
            try:
                self._memory.flush()
            except Exception:
                log.exception("the lookup memory could not be saved")
        self._keep_reading_later()

    def _keep_reading_later(self) -> None:
        memory = self._memory
        if memory is not None and memory.pending and not self._closing.is_set():
            # (queued behind any request already waiting: it runs first)
            QTimer.singleShot(0, self, self._keep_reading)

    def _keep_reading(self) -> None:
        """A slice of reading a long history into the memory, between requests."""
        memory, engine = self._memory, self._engine
        if memory is None or engine is None or not engine.copies_text:
            return
        try:
            memory.index(_tokenizer(engine), IDLE_SLICE_S)
            if not memory.pending:
                memory.flush()
        except Exception:
            log.exception("the lookup memory could not be read")
            return
        self._keep_reading_later()

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def _tokenizer(engine: Engine) -> Tokenizer:
    return Tokenizer(engine.tokenizer_fingerprint, engine.target.n_vocab, engine.tokenize_text)


def _measurement_lost(exc: WorkerLostError, engine: Engine) -> str:
    """The lost worker's message for a measurement (the engine's own speaks of
    a reply, and a measurement has none to keep)."""
    options = getattr(engine.target, "options", None)
    names = getattr(exc, "endpoints", ()) or getattr(options, "rpc_workers", ())
    who = f"The worker {', '.join(names)}" if names else "A worker"
    return (
        f"The measurement stopped: {who} holding the target's layers was lost. Nothing "
        "was saved and your conversations were not changed. Continue on this machine "
        "from the main window, or start the worker again and reload from Settings → Workers."
    )


class WorkerThread:
    """Owns the QThread and the worker; stop -> quit -> wait on shutdown."""

    def __init__(self) -> None:
        self.thread = QThread()
        self.thread.setObjectName("engineThread")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop(self, timeout_ms: int = 10_000) -> bool:
        self.worker.close()
        # shutdown runs on the worker thread after the current generation returns
        from PySide6.QtCore import QMetaObject, Qt

        QMetaObject.invokeMethod(self.worker, "shutdown", Qt.ConnectionType.QueuedConnection)
        self.thread.quit()
        return bool(self.thread.wait(timeout_ms))
