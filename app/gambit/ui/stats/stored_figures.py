"""A reply's figures as stored with it, and back as the panel shows them.

The panel follows the reply you look at: the one streaming, else the one
selected (or the last of the conversation opened). A stored reply's figures
are the dict the window writes with it (``gambit.ui.window.reply_record``);
its charts are kept as at most ``SERIES_POINTS`` points of the samples the
panel drew while it streamed. Each value is read only where it holds what
its readers assume (``stored_value``): an old record, or one edited by hand,
shows a dash where a figure is missing, never another reply's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gambit.engine.gamma.metrics import MetricsSnapshot
from gambit.storage.reply_stats import accepted_by_drafter, stored_value
from gambit.ui.stats.stats_charts import Sample

SERIES_POINTS: Final = 64  # a chart's points kept with a reply


def series_of(samples: Sequence[Sample]) -> list[list[float | int]]:
    """At most ``SERIES_POINTS`` of ``samples``, evenly spread, the last kept,
    as the JSON the reply's record holds; of samples at one moment, the last
    (as the panel keeps them)."""
    kept: list[Sample] = []
    for sample in samples:
        while kept and kept[-1].t >= sample.t:
            kept.pop()
        kept.append(sample)
    samples = kept
    if len(samples) > SERIES_POINTS:
        step = (len(samples) - 1) / (SERIES_POINTS - 1)
        samples = [samples[round(i * step)] for i in range(SERIES_POINTS)]
    return [
        [round(s.t, 4), round(s.tokens_per_s, 3), round(s.baseline, 3), s.gamma] for s in samples
    ]


def _figure(stats: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = stored_value(stats, key)
    return float(value) if value is not None else default


def stored_figures(stats: Mapping[str, Any] | None) -> tuple[MetricsSnapshot, list[Sample]] | None:
    """The snapshot and chart samples of a stored reply; None where it has no
    figures (a question, a reply that failed before its first token)."""
    tokens = stored_value(stats, "tokens") if stats else None
    if stats is None or not tokens:
        return None
    part = stored_value(stats, "part_tokens")  # (a continued reply's figures are its last part's)
    series = stored_value(stats, "series") or []
    samples = [Sample(float(t), float(rate), float(base), int(g)) for t, rate, base, g in series]
    rate = _figure(stats, "tokens_per_s")
    snapshot = MetricsSnapshot(
        n_tokens=part if part else tokens,
        n_drafted=stored_value(stats, "drafted_tokens") or 0,
        n_accepted=stored_value(stats, "accepted_tokens") or 0,
        n_rounds=0,
        acceptance_rate=_figure(stats, "acceptance_rate"),
        acceptance_rate_rolling=None,
        mean_accepted=0.0,
        acceptance_by_position=tuple(stored_value(stats, "acceptance_by_position") or ()),
        gamma=stored_value(stats, "gamma") or 0,
        gamma_reason=stored_value(stats, "gamma_reason") or "",
        tokens_per_s=rate,
        tokens_per_s_rolling=rate,
        baseline_tokens_per_s=_figure(stats, "baseline_tokens_per_s"),
        speedup=stored_value(stats, "speedup"),
        ttft_ms=_figure(stats, "ttft_ms"),
        p50_ms=_figure(stats, "p50_ms"),
        p95_ms=0.0,
        p99_ms=_figure(stats, "p99_ms"),
        draft_time_share=0.0,
        elapsed_s=samples[-1].t if samples else 0.0,
        busy=stored_value(stats, "busy"),
        accepted_by_drafter=tuple(accepted_by_drafter(stats).items()),
        speedup_withheld=stored_value(stats, "speedup_withheld"),
        threads=stored_value(stats, "threads") or "",
    )
    return snapshot, samples
