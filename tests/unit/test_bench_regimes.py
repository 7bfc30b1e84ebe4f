"""The regime benchmark's arithmetic: bounds, regimes, prompt choice, tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gambit.bench import TARGET_ONLY
from gambit.bench_regimes import (
    Cell,
    cell_figures,
    cost_bound,
    fixed_mode,
    markdown_table,
    pick_prompts,
    regime_of,
)
from gambit.engine.estimates import CostModel
from gambit.engine.metrics import GenerationStats


def costs(slope: float, draft_ratio: float, t1: float = 0.010) -> CostModel:
    c = CostModel(9)
    for k in range(1, 10):
        c.set_target(k, t1 * (1 + slope * (k - 1)))
    c.draft_ratio = draft_ratio
    return c


def test_bound_is_the_best_fixed_gamma_of_the_cost_model() -> None:
    # Free verification and a free drafter: every accepted token is pure gain.
    assert cost_bound([1.0] * 8, costs(0.0, 0.0)) == pytest.approx(9.0)
    # γ = 1 with α = 0.5 on flat costs and a draft step of 0.5: 1.5 / 1.5 = 1.0;
    # longer drafts only add cost at α_i = 0 beyond the first.
    assert cost_bound([0.5] + [0.0] * 7, costs(0.0, 0.5)) == pytest.approx(1.0)
    # Batches that cost k tokens never pay: the bound is plain decoding.
    assert cost_bound([0.9] * 8, costs(1.0, 0.2)) == pytest.approx(1.0)


def test_regime_follows_the_measured_batch_cost() -> None:
    assert regime_of(costs(0.02, 0.3)) == "bandwidth-bound"
    assert regime_of(costs(0.3, 0.3)) == "compute-bound"


def test_pick_prompts_interleaves_suites(tmp_path: Path) -> None:
    lines = [{"prompt": f"{s}{i}", "suite": s} for s in ("a", "b") for i in range(3)]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    assert [p.prompt for p in pick_prompts(path, 2)] == ["a0", "b0", "a1", "b1"]
    assert len(pick_prompts(path, 0)) == 6


def _stats(tokens: int, seconds: float, outcomes: tuple[bool, ...] = ()) -> GenerationStats:
    s = GenerationStats(n_tokens=tokens, elapsed_s=seconds, n_rounds=tokens)
    s.tried_by_position = [1] * len(outcomes)
    s.accepted_by_position = [int(o) for o in outcomes]
    return s


def test_cell_figures_compare_adaptive_with_the_best_fixed_policy() -> None:
    cell = Cell()
    cell.totals[TARGET_ONLY].add(_stats(100, 1.0))
    cell.totals["adaptive"].add(_stats(100, 0.8))
    cell.totals[fixed_mode(2)].add(_stats(100, 0.9))
    cell.totals[fixed_mode(8)].add(_stats(100, 0.5, (True,) * 8))
    f = cell_figures(cell, costs(0.0, 0.0))
    assert f["best_fixed"] == "fixed=8"
    assert f["best_fixed_speedup"] == pytest.approx(2.0)
    assert f["adaptive_speedup"] == pytest.approx(1.25)
    assert f["adaptive_vs_best_fixed"] == pytest.approx(0.625)
    assert f["bound"] == pytest.approx(9.0)


def test_markdown_table_has_a_row_per_suite() -> None:
    cell = Cell()
    for mode in (TARGET_ONLY, "adaptive", fixed_mode(4)):
        cell.totals[mode].add(_stats(10, 1.0))
    c = costs(0.1, 0.3)
    report = {
        "pairs": [
            {
                "target": "F32",
                "drafter": "lookup",
                "regime": regime_of(c),
                "costs": {"t_ratio": {"5": 1.4}},
                "suites": {"ALL": cell_figures(cell, c), "chat": cell_figures(cell, c)},
            },
            {"target": "F16", "drafter": "layerskip", "skipped": "no draft"},
        ]
    }
    rows = markdown_table(report).splitlines()
    assert len(rows) == 2 + 2
    assert rows[2].startswith("| F32 (compute-bound, t5/t1 1.40) | lookup | ALL |")
