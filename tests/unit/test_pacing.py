"""Even streaming (gambit.engine.text.pacing): bursts revealed over a round's time,
never more than one round behind, driven by a clock of the test's own."""

from __future__ import annotations

import numpy as np
import pytest

from gambit.engine.text.pacing import SPAN_MAX_S, StreamPacer, shown_times


def test_a_round_is_revealed_evenly_over_the_expected_round_time() -> None:
    pacer = StreamPacer()
    # The first round shows at once: no round duration is known yet.
    assert pacer.push("ab", [False, False], 0.1, now=0.0) == ("ab", [False, False])
    # The next round (8 characters, the round took 0.1 s) is held back ...
    assert pacer.push("12345678", [True] * 8, 0.1, now=0.1) == ("", [])
    assert pacer.pending
    # ... and revealed in step with the time since it arrived.
    assert pacer.take(0.125) == ("12", [True, True])
    assert pacer.take(0.15) == ("34", [True, True])
    assert pacer.take(0.2) == ("5678", [True] * 4)
    assert not pacer.pending
    assert pacer.take(0.3) == ("", [])


def test_never_more_than_one_round_behind() -> None:
    pacer = StreamPacer()
    pacer.push("a", [False], 0.2, now=0.0)
    pacer.push("bcde", [False] * 4, 0.2, now=0.2)
    assert pacer.take(0.25) == ("b", [False])
    # The next round comes early: what is left of the one before shows at once.
    assert pacer.push("fg", [True, True], 0.2, now=0.3) == ("cde", [False] * 3)
    assert pacer.held() == ("fg", [True, True])
    assert pacer.flush() == ("fg", [True, True])  # the reply ended


def test_a_stall_does_not_slow_the_text_after_it() -> None:
    pacer = StreamPacer()
    pacer.push("a", [False], 30.0, now=0.0)  # e.g. a long prompt read between rounds
    pacer.push("bc", [False] * 2, 30.0, now=30.0)
    assert pacer.take(30.0 + SPAN_MAX_S) == ("bc", [False] * 2)


def test_reset_starts_a_reply_afresh() -> None:
    pacer = StreamPacer()
    pacer.push("a", [False], 0.1, now=0.0)
    pacer.push("bcd", [False] * 3, 0.1, now=0.1)
    pacer.reset()
    assert not pacer.pending
    assert pacer.push("x", [True], 0.1, now=5.0) == ("x", [True])


def _p99(times: list[float]) -> float:
    return float(np.percentile(np.diff(times), 99))


def test_bursts_are_shown_with_gaps_like_plain_decoding() -> None:
    # Rounds of 8 tokens every 0.3 s, as a cost-scaled pair delivers them.
    arrivals = [(0.5 + 0.3 * i, 8, 0.3) for i in range(20)]
    arrived = [at for at, n, _ in arrivals for _ in range(n)]
    shown = shown_times(arrivals, tick_s=0.05)
    assert len(shown) == len(arrived)
    assert all(s >= a for s, a in zip(shown, arrived, strict=True))  # never before arrival
    assert all(s - a <= 0.3 + 0.05 + 1e-9 for s, a in zip(shown, arrived, strict=True))
    assert _p99(arrived) == pytest.approx(0.3)
    assert _p99(shown) <= 0.1  # a token or two every tick: no 0.3 s silences


def test_plain_decoding_is_shown_as_it_arrives() -> None:
    arrivals = [(0.2 + 0.1 * i, 1, 0.1) for i in range(30)]
    shown = shown_times(arrivals, tick_s=0.05)
    arrived = [at for at, _, _ in arrivals]
    assert all(0 <= s - a <= 0.1 + 1e-9 for s, a in zip(shown, arrived, strict=True))
