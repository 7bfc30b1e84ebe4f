"""The figures' definitions (gambit.engine.gamma.metrics), from hand-built Round events."""

from __future__ import annotations

import dataclasses

import pytest

from gambit.engine.gamma.metrics import (
    NO_FIGURE,
    GenerationStats,
    MetricsTracker,
    format_accepted,
    format_rate,
    format_speedup,
    plain_tokens_per_s,
    speedup,
)
from gambit.engine.text.reply import Round


def rnd(
    index: int, elapsed_s: float, n_tokens: int = 1, n_drafted: int = 0, n_accepted: int = 0
) -> Round:
    outcomes = (True,) * n_accepted + ((False,) if n_accepted < n_drafted else ())
    return Round(
        index=index, tokens=tuple(range(n_tokens)), text="x" * n_tokens, gamma=n_drafted,
        n_drafted=n_drafted, n_accepted=n_accepted, outcomes=outcomes,
        t_draft_s=0.0, t_verify_s=0.01, elapsed_s=elapsed_s,
    )  # fmt: skip


def test_tokens_per_s_leaves_prompt_processing_out() -> None:
    tracker = MetricsTracker()
    # One second of the target's prompt processing before the first round, then
    # 10 tokens in one second, with a draft model's reading of the prompt
    # (0.5 s) before the second round: prompt processing too, wherever it falls.
    for i in range(10):
        prompt = {0: 1.0, 1: 0.5}.get(i, 0.0)
        at = 1.0 + 0.1 * (i + 1) + (0.5 if i else 0.0)
        tracker.add(dataclasses.replace(rnd(i, at), t_prompt_s=prompt))
    snap = tracker.snapshot(baseline_tokens_per_s=8.0)
    assert snap.tokens_per_s == pytest.approx(10.0)
    assert snap.ttft_ms == pytest.approx(1100.0)  # the first token waits for the target's prompt


def test_a_reply_without_drafting_claims_no_speedup() -> None:
    tracker = MetricsTracker()
    for i in range(20):
        tracker.add(rnd(i, 0.01 * (i + 1)))
    snap = tracker.snapshot(baseline_tokens_per_s=50.0)  # twice as fast as "plain"
    assert snap.tokens_per_s == pytest.approx(100.0)
    assert snap.speedup is None  # no bet placed: no claim, however the rates compare
    assert snap.acceptance_rate_rolling is None
    assert format_speedup(snap.speedup) == NO_FIGURE
    # It was plain decoding: its baseline is its own rate, whatever was measured before.
    assert snap.baseline_tokens_per_s == snap.tokens_per_s


def test_a_message_without_a_reply_has_no_baseline() -> None:
    snap = MetricsTracker().snapshot(baseline_tokens_per_s=50.0)
    assert snap.baseline_tokens_per_s == 0.0
    assert format_rate(snap.baseline_tokens_per_s) == NO_FIGURE


def test_plain_decoding_pays_the_reply_s_cost_outside_the_model_per_token() -> None:
    tracker = MetricsTracker()
    for i in range(10):  # rounds of 12.5 ms, of which 10 ms verifying: 2.5 ms outside
        tracker.add(rnd(i, 0.0125 * (i + 1), n_tokens=3, n_drafted=3, n_accepted=2))
    assert tracker.stats.round_overhead_s == pytest.approx(0.0025)
    # A plain step of 8 ms and the same 2.5 ms per token outside it.
    assert plain_tokens_per_s(0.008, tracker.stats) == pytest.approx(1 / 0.0105)
    assert plain_tokens_per_s(0.0, tracker.stats) == 0.0  # nothing re-timed
    snap = tracker.snapshot(baseline_tokens_per_s=1 / 0.0105)
    assert snap.baseline_tokens_per_s == pytest.approx(1 / 0.0105)  # it drafted: as measured


def test_speedup_is_the_reply_rate_over_the_baseline() -> None:
    tracker = MetricsTracker()
    tracker.add(rnd(0, 0.1, n_tokens=3, n_drafted=4, n_accepted=2))
    tracker.add(rnd(1, 0.2, n_tokens=1))
    snap = tracker.snapshot(baseline_tokens_per_s=16.0)
    assert snap.tokens_per_s == pytest.approx(20.0)
    assert snap.speedup == pytest.approx(20.0 / 16.0)
    assert speedup(20.0, 16.0, n_drafted=4) == snap.speedup
    assert speedup(20.0, 0.0, n_drafted=4) is None  # no baseline measured yet
    assert speedup(20.0, 16.0, n_drafted=0) is None


def test_recent_acceptance_counts_the_last_rounds_that_drafted() -> None:
    tracker = MetricsTracker()
    t = 0.0
    for i in range(40):  # drafting rounds first: 3 of 4 accepted ...
        t += 0.01
        tracker.add(rnd(i, t, n_tokens=4, n_drafted=4, n_accepted=3))
    for i in range(40, 100):  # ... then a long stretch of plain rounds
        t += 0.01
        tracker.add(rnd(i, t))
    snap = tracker.snapshot(baseline_tokens_per_s=50.0)
    # The last 16 rounds drafted nothing: the rolling figure still speaks for
    # the last 16 that did, instead of showing nothing.
    assert snap.acceptance_rate_rolling == pytest.approx(0.75)
    assert snap.acceptance_rate == pytest.approx(0.75)
    assert snap.tokens_per_s_rolling == pytest.approx(100.0)  # the last 16 rounds: plain


def test_formats_are_shared() -> None:
    assert format_rate(112.34) == "112.3 tok/s"
    assert format_rate(0.0) == NO_FIGURE
    assert format_speedup(1.074) == "1.07×"
    assert format_accepted(13, 17) == "accepted 13/17 (76%)"
    assert format_accepted(0, 0) == "accepted 0/0"


def test_a_round_that_chained_a_draft_after_forced_tokens_credits_each() -> None:
    stats = GenerationStats()
    # 3 forced keys, then the draft model's 4, of which 2 landed; then the
    # grammar alone (2 forced); then a draft of 3 missed at once.
    stats.add(dataclasses.replace(rnd(0, 0.1, 6, 7, 5), n_forced=3, drafted_by="draft model"))
    stats.add(dataclasses.replace(rnd(1, 0.2, 3, 2, 2), n_forced=2, drafted_by="grammar"))
    stats.add(dataclasses.replace(rnd(2, 0.3, 1, 3, 0), drafted_by="draft model"))
    assert stats.accepted_by_drafter == {"grammar": 5, "draft model": 2}
