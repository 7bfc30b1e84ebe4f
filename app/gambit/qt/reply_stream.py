"""A reply as the window receives it from the engine's thread.

``ReplyStream`` turns the engine's rounds into ``ReplyDelta`` events (new
text, its drafted flags, the tokens behind it, a snapshot of the figures now
and then) and, at the end, one ``ReplyResult``. The tokens travel with the
text so that the window can keep a reply's tokens with it, for Continue
(``gambit.storage.prompts.continuing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gambit.engine.gamma.metrics import MetricsSnapshot, MetricsTracker
from gambit.engine.session import Engine
from gambit.engine.text.reply import Round, StopReason
from gambit.storage.reply_stats import ReplyStop

# The stats panel repaints every 100 ms; half that keeps it current.
SNAPSHOT_INTERVAL_S = 0.05


@dataclass(frozen=True)
class ReplyDelta:
    """New text of the streaming reply since the last delta, with per-character
    flags: True where the character came from an accepted draft token."""

    text: str
    drafted: tuple[bool, ...]
    snapshot: MetricsSnapshot | None  # None between SNAPSHOT_INTERVAL_S ticks
    round_s: float = 0.0  # the round's own duration (drafting and verifying), for pacing
    # The reply's tokens since the last delta: the text's, and those of a
    # character not whole yet. The first delta of a continued reply brings
    # the tokens it continued from as well.
    tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReplyResult:
    text: str  # (of a continued reply: the text it added)
    drafted: tuple[bool, ...]
    stop: str
    snapshot: MetricsSnapshot
    speculation: bool
    tokens: tuple[int, ...] = ()  # all of the reply's (a continued one's start included)

    @property
    def stopped_early(self) -> bool:
        return self.stop == StopReason.CANCELLED.value


def snapshot(
    engine: Engine,
    tracker: MetricsTracker,
    busy: str | None = None,
    baseline: float | None = None,
) -> MetricsSnapshot:
    """The reply's figures now; ``baseline``: the one its end measured
    (while it streams, the engine's, which holds still until it ends)."""
    decision = engine.decision
    gamma = decision.gamma if engine.speculating else 0
    if engine.drafter is None:
        reason = "off: no drafter chosen (Settings → Models → Drafter)"
    elif not engine.speculating:
        reason = "off: speculation is switched off (the Speculation button)"
    else:
        reason = decision.reason
    side = decision.side if gamma else 0
    return engine.snapshot(
        tracker, baseline, busy=busy, gamma=gamma, reason=reason, side_nodes=side
    )


class ReplyStream:
    """One reply's rounds, gathered."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.speculated = engine.speculating  # (as the reply starts)
        self.tracker = MetricsTracker()
        self.parts: list[str] = []
        self.drafted: list[bool] = []
        self.tokens: list[int] = []
        self.stop: str = ReplyStop.ERROR  # (until a round says why it ended)
        self._sent = 0  # tokens already in a delta
        self._next_snapshot = 0.0

    def continues_from(self, start: Sequence[int]) -> None:
        """The reply continues a cut one, whose tokens are ``start`` (before any round)."""
        self.tokens[:0] = start

    def add(self, rnd: Round) -> ReplyDelta | None:
        """Take a round; the delta to send, if it made text visible."""
        self.tracker.add(rnd)
        self.tokens.extend(rnd.tokens)
        if rnd.stop is not None:
            self.stop = rnd.stop.value
        if not rnd.text:
            return None
        self.parts.append(rnd.text)
        flags = char_flags(self.engine, rnd.tokens, rnd.n_accepted, rnd.text)
        self.drafted.extend(flags)
        # A snapshot (percentiles over every gap so far) only as often as the
        # panel can show it, not once per round.
        shot = None
        if rnd.elapsed_s >= self._next_snapshot:
            shot = snapshot(self.engine, self.tracker)
            self._next_snapshot = rnd.elapsed_s + SNAPSHOT_INTERVAL_S
        tokens = tuple(self.tokens[self._sent :])
        self._sent = len(self.tokens)
        return ReplyDelta(rnd.text, flags, shot, rnd.t_draft_s + rnd.t_verify_s, tokens)

    def result(self, busy: str | None, baseline: float) -> ReplyResult:
        figures = snapshot(self.engine, self.tracker, busy, baseline)
        return ReplyResult("".join(self.parts), tuple(self.drafted), self.stop, figures,
                           self.speculated, tuple(self.tokens))  # fmt: skip

    def partial(self) -> ReplyResult | None:
        """What streamed before a failure; None when nothing did (a refused
        message has no reply, so no figures)."""
        if not self.tracker.stats.n_tokens and not self.parts:
            return None
        return ReplyResult("".join(self.parts), tuple(self.drafted), "error",
                           snapshot(self.engine, self.tracker), False,
                           tuple(self.tokens))  # fmt: skip


def char_flags(
    engine: Engine, tokens: tuple[int, ...], n_accepted: int, text: str
) -> tuple[bool, ...]:
    """Per-character drafted flags for a round's visible text.

    The round's text is the UTF-8 decoding of its tokens (minus held-back or
    stop-string parts), so the drafted prefix's share of bytes maps to a
    character count.
    """
    if n_accepted == 0 or not text:
        return (False,) * len(text)
    drafted_text = b"".join(engine.target.token_piece(t) for t in tokens[:n_accepted]).decode(
        "utf-8", "replace"
    )
    k = min(len(drafted_text), len(text))
    return (True,) * k + (False,) * (len(text) - k)
