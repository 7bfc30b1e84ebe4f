"""A reply's figures kept with it and read back for the panel: the charts'
points thinned as stored, and a record that holds anything at all."""

from __future__ import annotations

from typing import Any

import pytest

from gambit.storage.reply_stats import ReplyRecord
from gambit.ui.stats.stats_charts import Sample
from gambit.ui.stats.stored_figures import SERIES_POINTS, series_of, stored_figures


def test_a_long_reply_keeps_its_charts_shape_in_a_few_points() -> None:
    samples = [Sample(i * 0.1, 50.0 + i % 7, 40.0, i % 5) for i in range(1, 501)]
    series = series_of(samples)
    assert len(series) == SERIES_POINTS
    assert series[0] == (0.1, 51.0, 40.0, 1) and series[-1][0] == 50.0  # first and last kept
    assert [p[0] for p in series] == sorted({p[0] for p in series})  # in time order


def test_samples_at_one_moment_keep_the_last_as_the_panel_does() -> None:
    samples = [Sample(0.5, 10.0, 9.0, 4), Sample(1.0, 20.0, 9.0, 4), Sample(1.0, 18.0, 30.0, 2)]
    assert series_of(samples) == ((0.5, 10.0, 9.0, 4), (1.0, 18.0, 30.0, 2))


def test_stored_figures_read_back_as_the_panel_showed_them() -> None:
    stats = {
        "tokens": 60, "tokens_per_s": 147.5, "baseline_tokens_per_s": 198.7, "speedup": 0.74,
        "drafted_tokens": 16, "accepted_tokens": 2, "acceptance_rate": 0.125, "ttft_ms": 79.1,
        "p50_ms": 5.8, "p99_ms": 23.4, "gamma": 4, "gamma_reason": "on: drafting γ=4",
        "acceptance_by_position": [0.67, 0.0], "accepted_by_drafter": {"lookup": 2},
        "series": [[0.1, 90.0, 100.0, 3], [0.45, 150.0, 198.7, 4]],
    }  # fmt: skip
    found = stored_figures(ReplyRecord.of(stats))
    assert found is not None
    snapshot, samples = found
    assert (snapshot.n_tokens, snapshot.tokens_per_s, snapshot.speedup) == (60, 147.5, 0.74)
    assert (snapshot.gamma, snapshot.p50_ms) == (4, 5.8)
    assert snapshot.acceptance_by_position == (0.67, 0.0)
    assert snapshot.accepted_by_drafter == (("lookup", 2),)
    assert samples == [Sample(0.1, 90.0, 100.0, 3), Sample(0.45, 150.0, 198.7, 4)]
    assert snapshot.elapsed_s == 0.45
    continued = stored_figures(
        ReplyRecord.of({**stats, "tokens": 120, "part_tokens": 60, "continued": 1})
    )
    assert continued is not None and continued[0].n_tokens == 60  # its figures: the last part's


@pytest.mark.parametrize(
    "stats",
    [
        None,
        {},
        {"stop": "error", "error": "the model crashed"},  # failed before its first token
        {"tokens": "many"},
        {"tokens": 0},
    ],
)
def test_a_reply_without_figures_shows_none(stats: dict[str, Any] | None) -> None:
    assert stored_figures(ReplyRecord.of(stats)) is None


def test_values_that_are_not_what_they_claim_show_as_missing() -> None:
    found = stored_figures(ReplyRecord.of({
        "tokens": 12, "tokens_per_s": "fast", "speedup": float("nan"), "gamma": -3,
        "acceptance_by_position": [0.5, 7], "series": [[0, 1, 2]], "p50_ms": True,
        "accepted_by_drafter": {"lookup": -1, "draft": 3}, "busy": 5, "threads": None,
    }))  # fmt: skip
    assert found is not None
    snapshot, samples = found
    assert samples == [] and snapshot.acceptance_by_position == ()
    assert (snapshot.tokens_per_s, snapshot.speedup, snapshot.gamma) == (0.0, None, 0)
    assert (snapshot.p50_ms, snapshot.busy, snapshot.threads) == (0.0, None, "")
    assert snapshot.accepted_by_drafter == (("draft", 3),)
