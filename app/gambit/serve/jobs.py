"""Served replies on the engine's own thread: what a request asks, what comes back.

Every llama.cpp call happens on one thread (the engine's: the window's worker,
or ``ThreadHost``'s for ``gambit-cli serve``). A request becomes a ``Job``:
the conversation, its generation settings, a cancel event and two callbacks
that the engine thread calls (``on_text`` per round with new text, ``on_done``
once). The HTTP side never touches the engine; jobs run one at a time, in the
order they came, so tokens of two requests never interleave.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gambit.engine.gamma.metrics import MetricsTracker
from gambit.engine.machine.fim import fim_tokens
from gambit.engine.session import Engine
from gambit.engine.text.chat import Message
from gambit.engine.text.completion import completion_tokens
from gambit.engine.text.grammar import GrammarError
from gambit.engine.text.reply import GenerationConfig, StopReason
from gambit.engine.text.template_sandbox import RenderCancelledError
from gambit.errors import ContextOverflowError, GambitError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedFigures:
    """What a served reply measured: the window's figures (gambit.engine.gamma.metrics),
    sent with the response under "gambit" (OpenAI clients ignore extra fields)."""

    prompt_tokens: int
    completion_tokens: int
    drafted: int
    accepted: int
    acceptance_rate: float | None  # None: nothing drafted
    mean_gamma: float  # over the rounds that drafted
    tokens_per_pass: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float | None  # None: nothing drafted, no claim
    accepted_by_position: tuple[int, ...]
    drafted_by_position: tuple[int, ...]
    # Accepted tokens by what drafted them ("draft model", "prompt lookup",
    # "earlier chats"), for drafters with sources; {} otherwise.
    accepted_by_drafter: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The response's ``gambit`` field, under the names docs/server.md
        publishes (``acceptance``, ``accepted_by_source``: clients read them)."""
        return {
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "acceptance": self.acceptance_rate,
            "mean_gamma": self.mean_gamma,
            "tokens_per_pass": self.tokens_per_pass,
            "tokens_per_s": self.tokens_per_s,
            "baseline_tokens_per_s": self.baseline_tokens_per_s,
            "speedup": self.speedup,
            "accepted_by_source": self.accepted_by_drafter,
        }


@dataclass(frozen=True)
class Outcome:
    """How a job ended: its finish reason ("stop", "length", "cancelled") and
    figures, or an error that says what was wrong (``status``: the HTTP one)."""

    finish_reason: str = "stop"
    figures: ServedFigures | None = None
    error: str | None = None
    status: int = 200
    param: str | None = None  # the request's field an error is about


@dataclass(frozen=True)
class TextPrompt:
    """A completion's prompt (``/v1/completions``): text to continue as it is,
    or with ``suffix`` the middle between the two (fill-in-the-middle)."""

    text: str
    suffix: str | None = None


@dataclass
class Job:
    prompt: Sequence[Message] | TextPrompt  # a chat's messages, or a completion's text
    config: GenerationConfig
    on_text: Callable[[str], None]
    on_done: Callable[[Outcome], None]
    cancel: threading.Event = field(default_factory=threading.Event)
    # Called on the engine thread with the reply's final metrics snapshot
    # (the window's statistics panel shows served replies too).
    on_snapshot: Callable[[Any], None] | None = None


class EngineHost(Protocol):
    """Where jobs run: an engine on a thread of its own."""

    def model_id(self) -> str | None:
        """The loaded target's name, as /v1/models lists it (None: none loaded)."""
        ...

    def context_size(self) -> int:
        """The loaded target's context window, in tokens (0: none loaded)."""
        ...

    def fills_in_the_middle(self) -> bool:
        """Whether the loaded target declares fill-in-the-middle tokens."""
        ...

    def submit(self, job: Job) -> None:
        """Queue ``job``; its callbacks come from the engine thread."""
        ...


def model_name(target: str) -> str:
    """The name clients use for a target file: its name without .gguf."""
    return target[: -len(".gguf")] if target.lower().endswith(".gguf") else target


_FINISH = {
    StopReason.EOG: "stop",
    StopReason.STOP_STRING: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTEXT_FULL: "length",
    StopReason.CANCELLED: "cancelled",
}


def run_job(engine: Engine, job: Job) -> None:
    """Run ``job`` on ``engine`` (on the engine's thread); ``job.on_done`` is
    always called once, whatever happens."""
    try:
        outcome = _generate(engine, job)
    except ContextOverflowError as exc:
        outcome = Outcome(error=str(exc), status=400)
    except GrammarError as exc:  # (found by the model's own tokens, before decoding)
        outcome = Outcome(error=f"response_format cannot be followed: {exc}", status=400,
                          param="response_format")  # fmt: skip
    except GambitError as exc:
        outcome = Outcome(error=str(exc), status=500)
    except Exception as exc:  # the server stays up; the request says what failed
        log.exception("a served reply crashed")
        outcome = Outcome(error=f"the generation failed: {exc!r}", status=500)
    job.on_done(outcome)


def _generate(engine: Engine, job: Job) -> Outcome:
    if job.cancel.is_set():
        return Outcome(finish_reason="cancelled")
    if isinstance(job.prompt, TextPrompt):
        asked = job.prompt
        tokens = completion_tokens(engine.target, asked.text, asked.suffix, job.config.max_tokens)
        rounds = engine.complete(tokens, job.config, job.cancel)
    else:
        try:
            prompt = engine.chat_builder.build(
                job.prompt, reserve=job.config.max_tokens, cancel=job.cancel
            )
        except RenderCancelledError:  # the client went away while the chat template rendered
            return Outcome(finish_reason="cancelled")
        if prompt.n_dropped:
            # The window leaves the oldest turns out; a client asked for all of it.
            raise ContextOverflowError(
                f"the conversation needs more than the {engine.target.n_ctx:,} tokens of "
                f"the context window with {job.config.max_tokens:,} kept for the reply: "
                "shorten it or lower max_tokens"
            )
        tokens, rounds = prompt.tokens, engine.reply_to(prompt, job.config, job.cancel)
    tracker = MetricsTracker()
    finish = "stop"
    gammas: list[int] = []
    for rnd in rounds:
        tracker.add(rnd)
        if rnd.n_drafted:
            gammas.append(rnd.n_drafted - rnd.n_side)
        if rnd.text:
            job.on_text(rnd.text)
        if rnd.stop is not None:
            finish = _FINISH.get(rnd.stop, "stop")
    stats = tracker.stats
    # The reply compared with plain decoding on its context (not re-timed for
    # a client that went away).
    baseline = engine.finish_reply(stats, remeasure=not job.cancel.is_set())
    snapshot = engine.snapshot(tracker, baseline)
    if job.on_snapshot is not None:
        job.on_snapshot(snapshot)
    figures = ServedFigures(
        prompt_tokens=len(tokens),
        completion_tokens=stats.n_tokens,
        drafted=stats.n_drafted,
        accepted=stats.n_accepted,
        acceptance_rate=stats.acceptance_rate if stats.n_drafted else None,
        mean_gamma=sum(gammas) / len(gammas) if gammas else 0.0,
        tokens_per_pass=stats.tokens_per_round,
        tokens_per_s=snapshot.tokens_per_s,
        baseline_tokens_per_s=snapshot.baseline_tokens_per_s,
        speedup=snapshot.speedup,
        accepted_by_position=tuple(stats.accepted_by_position),
        drafted_by_position=tuple(stats.tried_by_position),
        accepted_by_drafter=dict(stats.accepted_by_drafter) if stats.n_drafted else {},
    )
    return Outcome(finish_reason=finish, figures=figures)


class ThreadHost:
    """An engine owned by a thread of its own, running jobs in order
    (``gambit-cli serve``)."""

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self._name = name
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._current: Job | None = None
        self._thread = threading.Thread(target=self._run, name="gambit-engine", daemon=True)
        self._thread.start()

    def model_id(self) -> str | None:
        return self._name

    def context_size(self) -> int:
        return int(self.engine.target.n_ctx)

    def fills_in_the_middle(self) -> bool:
        return fim_tokens(self.engine.target) is not None

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def close(self, timeout: float = 30.0) -> None:
        """Stop the running job within a round, drop the queued ones, end the thread."""
        while True:
            try:
                waiting = self._jobs.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                waiting.on_done(Outcome(finish_reason="cancelled"))
        current = self._current
        if current is not None:
            current.cancel.set()
        self._jobs.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._current = job
            run_job(self.engine, job)
            self._current = None
