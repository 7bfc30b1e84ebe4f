"""A reply's figures as stored with it, and back as the panel shows them.

The panel follows the reply you look at: the one streaming, else the one
selected (or the last of the conversation opened). A stored reply's figures
are its ``ReplyRecord`` (written by ``gambit.ui.window.reply_record``); its
charts are kept as at most ``SERIES_POINTS`` points of the samples the panel
drew while it streamed. The record reads a value only where it holds what
its readers assume: an old record, or one edited by hand, shows a dash where
a figure is missing, never another reply's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gambit.engine.gamma.metrics import MetricsSnapshot
from gambit.storage.reply_stats import ReplyRecord
from gambit.ui.stats.stats_charts import Sample

SERIES_POINTS: Final = 64  # a chart's points kept with a reply


def series_of(samples: Sequence[Sample]) -> tuple[tuple[float, float, float, int], ...]:
    """At most ``SERIES_POINTS`` of ``samples``, evenly spread, the last kept,
    as the reply's record holds them; of samples at one moment, the last (as
    the panel keeps them)."""
    kept: list[Sample] = []
    for sample in samples:
        while kept and kept[-1].t >= sample.t:
            kept.pop()
        kept.append(sample)
    samples = kept
    if len(samples) > SERIES_POINTS:
        step = (len(samples) - 1) / (SERIES_POINTS - 1)
        samples = [samples[round(i * step)] for i in range(SERIES_POINTS)]
    return tuple(
        (round(s.t, 4), round(s.tokens_per_s, 3), round(s.baseline, 3), s.gamma) for s in samples
    )


def stored_figures(record: ReplyRecord | None) -> tuple[MetricsSnapshot, list[Sample]] | None:
    """The snapshot and chart samples of a stored reply; None where it has no
    figures (a question, a reply that failed before its first token)."""
    if record is None or not record.tokens:
        return None
    samples = [Sample(t, rate, base, g) for t, rate, base, g in record.series]
    rate = record.tokens_per_s or 0.0
    snapshot = MetricsSnapshot(
        # (a continued reply's figures are its last part's)
        n_tokens=record.part_tokens or record.tokens,
        n_drafted=record.drafted_tokens,
        n_accepted=record.accepted_tokens,
        n_rounds=0,
        acceptance_rate=record.acceptance_rate or 0.0,
        acceptance_rate_rolling=None,
        mean_accepted=0.0,
        acceptance_by_position=record.acceptance_by_position,
        gamma=record.gamma or 0,
        gamma_reason=record.gamma_reason or "",
        tokens_per_s=rate,
        tokens_per_s_rolling=rate,
        baseline_tokens_per_s=record.baseline_tokens_per_s or 0.0,
        speedup=record.speedup,
        ttft_ms=record.ttft_ms or 0.0,
        p50_ms=record.p50_ms or 0.0,
        p95_ms=0.0,
        p99_ms=record.p99_ms or 0.0,
        draft_time_share=0.0,
        elapsed_s=samples[-1].t if samples else 0.0,
        busy=record.busy,
        accepted_by_drafter=tuple(record.accepted_by_drafter.items()),
        speedup_withheld=record.speedup_withheld,
        threads=record.threads or "",
    )
    return snapshot, samples
