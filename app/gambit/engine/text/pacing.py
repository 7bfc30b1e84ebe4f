"""Even streaming: each round's text revealed over the time the next round takes.

With speculation, tokens arrive in bursts: a round whose γ drafts all land
brings γ + 1 tokens at once, then nothing while the next round runs (on a
cost-scaled realistic pair: a p99 gap between tokens 3x target-only's, and a
p50 of 0). Shown as they arrive, the text jumps. The pacer reveals a round's
text evenly over the expected duration of a round (a running mean of the
rounds' own durations, as the engine timed them), so it flows like plain
decoding, only faster. It is never more than one round behind: when a round
arrives, whatever is still hidden of the one before is shown at once, and
the end of a reply shows the rest.

Arrival stays what the statistics measure (their p99 gap is the engine's
truth); this changes only what the eye sees. No Qt here: the chat view
drives it from its repaint timer, and tests drive it with a clock of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The chat view's repaint period: paced text appears at these ticks.
REPAINT_S = 0.05
# Weight of the newest round in the running mean of round durations.
ROUND_WEIGHT = 0.3
# The longest a round's text is spread over: a stall (a long prompt read by
# the drafter) must not slow the text that follows.
SPAN_MAX_S = 1.0


class StreamPacer:
    """Holds back the text of the latest round and releases it evenly."""

    _round_s: float | None  # running mean of round durations
    _text: str  # the latest round's text, revealed from its start
    _drafted: list[bool]
    _shown: int  # characters of it revealed
    _start: float  # when it arrived
    _span: float  # the seconds it is revealed over

    def __init__(self) -> None:
        self.reset()

    @property
    def pending(self) -> bool:
        """Whether text is held back."""
        return self._shown < len(self._text)

    def held(self) -> tuple[str, list[bool]]:
        """The text held back and its flags (left held)."""
        return self._text[self._shown :], self._drafted[self._shown :]

    def push(
        self, text: str, drafted: tuple[bool, ...] | list[bool], round_s: float, now: float
    ) -> tuple[str, list[bool]]:
        """A round's ``text`` (with a drafted flag per character) arrived at
        ``now``; the round took ``round_s`` seconds. Returns what to show at
        once: the rest of the round before, and all of this one if it is the
        reply's first (the first token is never held back)."""
        shown = self.flush()
        first = self._round_s is None  # the first token is never held back
        if round_s > 0:
            mean = self._round_s
            self._round_s = round_s if mean is None else mean + ROUND_WEIGHT * (round_s - mean)
        if first or self._round_s is None or not text:
            return shown[0] + text, shown[1] + list(drafted)
        self._text, self._drafted, self._shown = text, list(drafted), 0
        self._start, self._span = now, min(self._round_s, SPAN_MAX_S)
        return shown[0], shown[1]

    def take(self, now: float) -> tuple[str, list[bool]]:
        """What is due by ``now``: the share of the round's text that the time
        since it arrived covers of its span."""
        if not self.pending:
            return "", []
        share = (now - self._start) / self._span if self._span > 0 else 1.0
        due = min(len(self._text), math.ceil(len(self._text) * max(0.0, share)))
        return self._reveal(due)

    def flush(self) -> tuple[str, list[bool]]:
        """Everything held back."""
        return self._reveal(len(self._text))

    def reset(self) -> None:
        """A new reply: nothing held, the round duration learned anew."""
        self._round_s = None
        self._text, self._drafted, self._shown = "", [], 0
        self._start = self._span = 0.0

    def _reveal(self, upto: int) -> tuple[str, list[bool]]:
        start, self._shown = self._shown, max(self._shown, upto)
        return self._text[start : self._shown], self._drafted[start : self._shown]


Arrival = tuple[float, int, float]  # (arrival time, tokens, the round's own duration)


def shown_times(arrivals: Sequence[Arrival], tick_s: float) -> list[float]:
    """When each token appears in a paced view: ``arrivals`` are (arrival
    time, tokens, the round's own duration) per round of one reply, and the
    view shows what is due at every tick of its repaint timer (``tick_s``),
    all of it once the reply has ended (after its last round)."""
    pacer = StreamPacer()
    times: list[float] = []
    i, tick = 0, 0.0
    while i < len(arrivals) or pacer.pending:
        tick += tick_s
        shown = 0
        while i < len(arrivals) and arrivals[i][0] <= tick:
            at, n_tokens, round_s = arrivals[i]
            shown += len(pacer.push("x" * n_tokens, [False] * n_tokens, round_s, at)[0])
            i += 1
        shown += len(pacer.flush()[0] if i == len(arrivals) else pacer.take(tick)[0])
        times += [tick] * shown
    return times
