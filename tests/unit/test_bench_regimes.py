"""The regime benchmark's arithmetic: bounds, regimes, prompt choice, tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gambit.bench.costs import cost_bound, regime_of
from gambit.bench.foresight import (
    ReplyRuns,
    ceiling_of,
    foresight_seconds,
    foresight_times,
    lookup_ceiling,
    runs_of,
)
from gambit.bench.regimes import pair_modes, pick_prompts
from gambit.bench.regimes_figures import (
    MODEL_ALONE,
    Cell,
    after_first_token,
    cell_figures,
    costs_at_context,
    fixed_mode,
)
from gambit.bench.regimes_report import markdown_table, per_prompt_lines
from gambit.bench.runner import TARGET_ONLY
from gambit.bench.targets import TargetSpec, parse_targets
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.metrics import GenerationStats
from gambit.errors import GambitError


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
    assert f.best_fixed == "fixed=8"
    assert f.best_fixed_speedup == pytest.approx(2.0)
    assert f.adaptive_speedup == pytest.approx(1.25)
    assert f.adaptive_vs_best_fixed == pytest.approx(0.625)
    assert f.bound == pytest.approx(9.0)


def _report(drafter: str, c: CostModel, suites: dict[str, Any]) -> dict[str, Any]:
    """A regime report of one F32 pair (t5/t1 1.4) with these suites' figures."""
    pair = {
        "target": "F32",
        "drafter": drafter,
        "regime": regime_of(c),
        "costs": {"t_ratio": {"5": 1.4}},
        "suites": suites,
    }
    return {"pairs": [pair]}


def test_markdown_table_has_a_row_per_suite() -> None:
    cell = Cell()
    for mode in (TARGET_ONLY, "adaptive", fixed_mode(4)):
        cell.totals[mode].add(_stats(10, 1.0))
    c = costs(0.1, 0.3)
    report = _report(
        "lookup",
        c,
        {"ALL": cell_figures(cell, c).to_json(), "chat": cell_figures(cell, c).to_json()},
    )
    report["pairs"].append({"target": "F16", "drafter": "layerskip", "skipped": "no draft"})
    rows = markdown_table(report).splitlines()
    assert len(rows) == 2 + 2
    assert rows[2].startswith("| F32 (compute-bound, t5/t1 1.40) | lookup | ALL |")


def test_comparisons_not_run_are_shown_as_missing_not_as_zero() -> None:
    # `--fixed none`: target-only and adaptive only, so there is no best fixed
    # policy and no chain to bound; the row says "-" there, not 0.00x or 1.00x.
    cell = Cell()
    cell.totals[TARGET_ONLY].add(_stats(100, 1.0))
    cell.totals["adaptive"].add(_stats(100, 0.4))
    c = costs(0.1, 0.3)
    f = cell_figures(cell, c)
    assert f.best_fixed is None and f.best_fixed_speedup is None
    assert f.adaptive_vs_best_fixed is None and f.best_fixed_end_to_end is None
    assert f.bound is None and f.bound_gamma_max is None
    assert f.adaptive_vs_held_out_fixed is None and f.ttft_ratio is None
    assert f.adaptive_speedup == pytest.approx(2.5)
    table = markdown_table(_report("draft", c, {"ALL": f.to_json()})).splitlines()
    header, row = table[0].split(" | "), table[2].split(" | ")
    cells = dict(zip(header, row, strict=True))
    missing = ("best fixed", "adapt/best (95 %)", "adapt/held-out best", "bound", "adapt/bound")
    for column in (*missing, "best fixed e2e", "TTFT adapt/plain"):
        assert cells[column] == "-", column
    assert cells["adaptive"] == "2.50x" and "0.00" not in row


def test_parts_timed_at_context_replace_the_calibration() -> None:
    cell = Cell()
    cell.totals[TARGET_ONLY].add(_stats(100, 1.0))
    cell.totals[fixed_mode(4)].add(_stats(100, 0.8))
    cell.rounds[4].n, cell.rounds[4].seconds = 10, 10 * 0.060
    # Calibrated: 10 ms per token, a draft step of 3 ms, t(5) = 14 ms → parts 26 ms.
    calibrated = costs(0.1, 0.3)
    assert cell_figures(cell, calibrated).round_efficiency["4"] == pytest.approx(0.026 / 0.060)
    # Timed mid-reply (medians per reply, median over replies): t1 20 ms,
    # t(5) 36 ms, a draft step of 6 ms → parts 60 ms, as the rounds took.
    cell.parts.target[1] += [0.019, 0.020, 0.030]
    cell.parts.target[5] += [0.036, 0.035, 0.037]
    cell.parts.draft += [0.006, 0.005, 0.007]
    f = cell_figures(cell, calibrated)
    assert f.round_efficiency["4"] == pytest.approx(1.0)
    assert f.round_ms["4"] == {"round": pytest.approx(60.0), "parts": pytest.approx(60.0)}
    assert f.costs_at_context["t1_ms"] == pytest.approx(20.0)
    assert f.costs_at_context["t_ratio"]["5"] == pytest.approx(1.8)
    assert f.costs_at_context["draft_ratio"] == pytest.approx(0.3)


def test_a_drafter_without_a_model_costs_nothing_per_step() -> None:
    cell = Cell()
    cell.parts.target[1].append(0.010)
    cell.parts.target[9].append(0.020)
    costs_at = cell.parts.cost_model(9)
    assert costs_at is not None and costs_at.t_draft == 0.0
    assert Cell().parts.cost_model(9) is None  # nothing timed: the calibration stands


def test_end_to_end_counts_the_prompt_reading_fixed_policies_always_pay() -> None:
    cell = Cell()

    def run(seconds: float, prefill: float) -> GenerationStats:
        s = _stats(100, seconds + prefill)
        s.prefill_s = prefill
        return s

    cell.totals[TARGET_ONLY].add(run(1.0, 0.5))
    # The fixed policy decodes 25 % faster but its draft reads the prompt (0.5 s more);
    # the adaptive one skipped both.
    cell.totals[fixed_mode(4)].add(run(0.8, 1.0))
    cell.totals["adaptive"].add(run(1.0, 0.5))
    f = cell_figures(cell, costs(0.1, 0.3))
    assert f.best_fixed_speedup == pytest.approx(1.25)
    assert f.adaptive_vs_best_fixed == pytest.approx(0.8)
    assert f.best_fixed_end_to_end == pytest.approx(1.5 / 1.8)
    assert f.adaptive_end_to_end == pytest.approx(1.0)
    assert f.adaptive_vs_best_fixed_end_to_end == pytest.approx(1.8 / 1.5)


def test_targets_name_their_type_and_how_many_times_their_blocks() -> None:
    assert parse_targets("F32x4, f16x3,Q8_0") == (
        TargetSpec("F32", 4), TargetSpec("F16", 3), TargetSpec("Q8_0"),
    )  # fmt: skip
    assert TargetSpec("F32", 4).name == "F32x4" and TargetSpec("F32", 4).scaled
    assert TargetSpec("F32", 4).label() == "F32 ×4 (cost-scaled)"
    assert TargetSpec("Q8_0").name == "Q8_0" and not TargetSpec("Q8_0").scaled
    for bad in ("Q4_K", "F32x1", "F32x99", "F32x", ","):
        with pytest.raises(GambitError):
            parse_targets(bad)


def test_scaled_rows_offer_long_chains_and_trees() -> None:
    toy = pair_modes(TargetSpec("F16"), "draft")
    assert toy == [TARGET_ONLY, "adaptive", "fixed=1", "fixed=2", "fixed=4", "fixed=8"]
    scaled = pair_modes(TargetSpec("F32", 4), "draft")
    assert scaled[:2] == [TARGET_ONLY, "adaptive"]
    assert {"fixed=12", "fixed=16", "fixed=6+2", "fixed=12+4"} <= set(scaled)


def test_the_bound_covers_the_longest_chain_and_ttft_is_compared() -> None:
    cell = Cell()
    plain = _stats(100, 1.0)
    plain.ttft_s = 0.5
    cell.totals[TARGET_ONLY].add(plain)
    adaptive = _stats(100, 0.5)
    adaptive.ttft_s = 0.55
    cell.totals["adaptive"].add(adaptive)
    cell.totals[fixed_mode(16)].add(_stats(100, 0.4, (True,) * 16))
    cell.totals[fixed_mode(12, 4)].add(_stats(100, 0.45))
    c = CostModel(17)
    for k in range(1, 18):
        c.set_target(k, 0.010)  # free batches, a free drafter: every position pays
    f = cell_figures(cell, c)
    assert f.bound_gamma_max == 16 and f.bound == pytest.approx(17.0)
    assert f.ttft_ratio == pytest.approx(1.1)
    assert f.best_fixed == "fixed=16"


def test_prompts_are_also_judged_after_the_first_token_where_reading_counts() -> None:
    # Two prompts of 101 tokens: on the first a draft model reads a long
    # prompt (0.6 s after the first token) that fixed γ = 8 pays and adaptive
    # skips; on the second both draft and read alike.
    cell = Cell()
    cell.prompts = ["grounded #1", "chat #1"]
    replies = {
        TARGET_ONLY: ((1.0, 0.0), (1.0, 0.0)),
        "adaptive": ((1.0, 0.0), (0.5, 0.1)),
        fixed_mode(8): ((0.7, 0.6), (0.5, 0.1)),
    }
    for mode, prompts in replies.items():
        for decoding, reading in prompts:
            s = _stats(101, 0.2 + reading + decoding)
            s.ttft_s, s.prefill_s = 0.2, 0.2 + reading
            cell.totals[mode].add(s)
            cell.prompt_rates[mode].append(s.tokens_per_s)
            cell.prompt_waits[mode].append(after_first_token(s))
    assert cell.prompt_waits["adaptive"][1] == (100, pytest.approx(0.6))
    f = cell_figures(cell, costs(0.1, 0.3))
    first, second = f.per_prompt
    # By decoding rate the skipped reading reads as a loss to fixed γ = 8 ...
    assert first["judged"][1] == pytest.approx(0.7)
    # ... after the first token, 1.0 s of adaptive's against 1.3 s of fixed γ's,
    # which no longer pays 1.2x: adaptive is judged against plain decoding.
    assert first["after_first_token"]["vs_best_fixed"] == pytest.approx(1.3)
    assert first["after_first_token"]["judged"] == ("target-only", pytest.approx(1.0))
    assert second["after_first_token"]["judged"] == ("best fixed", pytest.approx(1.0))
    assert f.after_first_token_best_fixed == fixed_mode(8)
    assert f.adaptive_vs_best_fixed_after_first_token == pytest.approx(1.9 / 1.6)
    assert f.adaptive_after_first_token == pytest.approx(2.0 / 1.6)
    lines = per_prompt_lines(_report("draft", costs(0.1, 0.3), {"ALL": f.to_json()}))
    assert lines[0].endswith("over the suite: adaptive 1.25x target-only, 1.19 of fixed=8")
    assert lines[2].split()[-3:] == ["(1.00", "÷", "plain)"]
    assert lines[3].split()[-3:] == ["(1.00", "÷", "fixed=8)"]


def test_a_prompt_sampled_several_times_is_judged_by_its_replies_together() -> None:
    # Above temperature 0 each mode samples replies of its own (bench --samples):
    # a prompt's samples count by their tokens, as a suite's do, so a short
    # reply weighs little, and not as the mean of their rates.
    replies = {
        TARGET_ONLY: [(100, 10.0), (20, 2.0)],
        "adaptive": [(100, 4.0), (20, 4.0)],  # 25 and 5 tok/s: 15 tok/s together
        fixed_mode(16): [(100, 5.0), (20, 1.0)],  # 20 tok/s together
    }
    cell = Cell()
    pooled = {mode: GenerationStats() for mode in replies}
    for mode, samples in replies.items():
        for tokens, seconds in samples:
            cell.totals[mode].add(_stats(tokens, seconds))
            pooled[mode].merge(_stats(tokens, seconds))
    cell.add_prompt("grounded #2", pooled)
    assert cell.prompts == ["grounded #2"]
    assert cell.prompt_rates["adaptive"] == [pytest.approx(120 / 8.0)]  # not (25 + 5) / 2
    assert cell.prompt_waits["adaptive"] == [(119, pytest.approx(8.0))]
    (row,) = cell_figures(cell, costs(0.1, 0.1)).per_prompt
    assert row["speedup"] == pytest.approx(1.5) and row["best_fixed"] == fixed_mode(16)
    assert row["vs_best_fixed"] == pytest.approx(15 / 20)
    report = _report(
        "draft", costs(0.1, 0.1), {"ALL": cell_figures(cell, costs(0.1, 0.1)).to_json()}
    )
    assert "each prompt over its 2 sampled replies" not in "\n".join(per_prompt_lines(report))
    lines = per_prompt_lines({**report, "samples": 2})
    assert lines[1].endswith("(each prompt over its 2 sampled replies per mode)")


def test_cell_figures_name_the_worst_prompt() -> None:
    cell = Cell()
    cell.prompts = ["code #1", "prose #1"]
    cell.prompt_rates.update(
        {TARGET_ONLY: [10.0, 10.0], "adaptive": [20.0, 11.0], "fixed=8": [21.0, 24.0]}
    )
    for mode in cell.prompt_rates:
        cell.totals[mode].add(_stats(10, 1.0))
    figures = cell_figures(cell, costs(0.1, 0.3))
    assert figures.worst_prompt["prompt"] == "prose #1"
    assert figures.worst_prompt["judged"][1] == pytest.approx(11 / 24)
    report = {
        "pairs": [{"target": "F32x4", "drafter": "draft", "suites": {"ALL": figures.to_json()}}]
    }
    lines = per_prompt_lines(report)
    assert lines[2].split() == ["prose", "#1", "1.10x", "fixed=8", "2.40x", "0.46"]


def test_a_drafter_with_a_model_and_lookup_also_runs_its_model_alone() -> None:
    # What lookup adds is measured on the same engine, alternated prompt by
    # prompt, not as the ratio of two engines' speedups over two baselines.
    combined = pair_modes(TargetSpec("F32", 4), "draft+lookup", ())
    assert combined == [TARGET_ONLY, "adaptive", MODEL_ALONE]
    assert MODEL_ALONE not in pair_modes(TargetSpec("F32", 4), "draft", ())
    assert MODEL_ALONE not in pair_modes(TargetSpec("F32", 4), "lookup", ())


def test_adaptive_is_compared_with_its_model_alone_prompt_by_prompt() -> None:
    cell = Cell()
    # Two prompts: lookup doubles the first's rate and leaves the second's.
    for plain_s, both_s, alone_s in ((1.0, 0.25, 0.5), (1.0, 0.5, 0.5)):
        cell.totals[TARGET_ONLY].add(_stats(100, plain_s))
        cell.prompt_rates[TARGET_ONLY].append(100 / plain_s)
        cell.totals["adaptive"].add(_stats(100, both_s))
        cell.prompt_rates["adaptive"].append(100 / both_s)
        cell.totals[MODEL_ALONE].add(_stats(100, alone_s))
        cell.prompt_rates[MODEL_ALONE].append(100 / alone_s)
        cell.prompts.append(f"document #{len(cell.prompts) + 1}")
    c = costs(0.1, 0.3)
    f = cell_figures(cell, c)
    assert f.adaptive_vs_model_alone == pytest.approx((200 / 0.75) / (200 / 1.0))
    assert [row["vs_model_alone"] for row in f.per_prompt] == pytest.approx([2.0, 1.0])
    lines = per_prompt_lines(_report("draft+lookup", c, {"ALL": f.to_json()}))
    assert "draft model alone, alternated on this engine: 1.33" in lines[0]
    assert lines[2].split()[-1] == "2.00" and lines[3].split()[-1] == "1.00"
    # A drafter without both: no such comparison, and the lines say nothing of it.
    plain = Cell()
    plain.totals[TARGET_ONLY].add(_stats(100, 1.0))
    plain.totals["adaptive"].add(_stats(100, 0.5))
    assert cell_figures(plain, c).adaptive_vs_model_alone is None


def _lookup_pair() -> tuple[CostModel, ReplyRuns, ReplyRuns]:
    """Costs of batches up to 17, and two replies of 17 tokens the draft model
    gets right in full: one a copy lands in full too, one no copy helps."""
    c = CostModel(17)
    for k in range(1, 18):
        c.set_target(k, 0.010 * (1 + 0.1 * (k - 1)))
    c.draft_ratio, c.catch_up_ratio = 0.12, 0.05
    copied = ReplyRuns(model=runs_of([True] * 17), copy=tuple(min(16, 17 - i) for i in range(17)))
    new_text = ReplyRuns(model=runs_of([True] * 17), copy=(0,) * 17)
    return c, copied, new_text


def test_what_lookup_added_is_read_against_the_ceiling_its_replies_allowed() -> None:
    cell = Cell()
    # Two replies of 17 tokens: the first a copy lands in full, the second
    # none does (its ceiling is 1.0); a draft through text measures none.
    c, copied, new_text = _lookup_pair()
    for runs, both_s in ((copied, 0.25), (new_text, 0.5), (None, 0.5)):
        for mode, seconds in ((TARGET_ONLY, 1.0), ("adaptive", both_s), (MODEL_ALONE, 0.5)):
            cell.totals[mode].add(_stats(100, seconds))
            cell.prompt_rates[mode].append(100 / seconds)
        cell.prompts.append(f"document #{len(cell.prompts) + 1}")
        cell.foresight.append((runs,))
    f = cell_figures(cell, c)
    one = lookup_ceiling(copied, c, 16)
    assert one > 1.0 and lookup_ceiling(new_text, c, 16) == 1.0
    assert "lookup_ceiling" not in f.per_prompt[2]
    # Over the suite: the summed least times, not a mean of the ratios.
    alone = 2 * foresight_seconds(copied, c, 16, copies=False)
    assert f.lookup_ceiling == pytest.approx(alone / (alone / 2 / one + alone / 2))
    lines = per_prompt_lines(_report("draft+lookup", c, {"ALL": f.to_json()}))
    ratio = f.adaptive_vs_model_alone
    assert f"{ratio / f.lookup_ceiling:.2f} of the ceiling of {f.lookup_ceiling:.2f}x" in lines[0]
    assert lines[2].split()[-3:] == [f"({2.0 / one:.2f}", "of", f"{one:.2f})"]
    assert lines[3].split()[-3:] == ["(1.00", "of", "1.00)"]


def test_a_prompts_sampled_replies_share_one_lookup_ceiling() -> None:
    # bench --samples: a prompt's adaptive replies (one a copy lands in full,
    # one no copy helps) make one row, its ceiling their summed least times;
    # a prompt with a reply not measured (through text) has none.
    c, copied, new_text = _lookup_pair()
    cell = Cell()
    for label, foresight in (("document #1", (copied, new_text)), ("document #2", (copied, None))):
        replies = {mode: _stats(200, 1.0) for mode in (TARGET_ONLY, "adaptive", MODEL_ALONE)}
        for mode, stats in replies.items():
            cell.totals[mode].add(stats)
        cell.add_prompt(label, replies, foresight)
    first, second = cell_figures(cell, c).per_prompt
    both = [foresight_times(r, c, 16) for r in (copied, new_text)]
    assert first["lookup_ceiling"] == pytest.approx(ceiling_of(both))
    assert 1.0 < first["lookup_ceiling"] < lookup_ceiling(copied, c, 16)
    assert "lookup_ceiling" not in second


def test_costs_timed_at_the_replies_context_keep_what_only_rounds_measure() -> None:
    # Parts time a draft step and target batches alone; a round's catch-up
    # (the price of a copy for the lookup ceiling) comes from the rounds.
    calibrated = costs(0.1, 0.3)
    calibrated.catch_up_ratio, calibrated.draft_extra_ratio = 0.05, 0.2
    cell = Cell()
    assert costs_at_context(cell, calibrated) is calibrated
    cell.parts.target[1].append(0.020)
    cell.parts.target[17].append(0.060)
    cell.parts.draft.append(0.004)
    timed = costs_at_context(cell, calibrated)
    assert timed.verify_cost(1) == pytest.approx(0.020)
    assert timed.catch_up_cost(1) == pytest.approx(0.05 * 0.020)
    assert timed.draft_extra_ratio == 0.2
