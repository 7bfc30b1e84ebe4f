"""The regime benchmark's figures (``gambit.bench.regimes``): what one
target × drafter × suite measured, and the comparisons drawn from it.

A cell holds every mode's totals and each prompt's rate per mode; its figures
are each mode's speedup over target-only, the best fixed policy in hindsight,
adaptive against it prompt by prompt, the cost-model bound and the rest of
the report's columns. Where a drafter combines a draft model with prompt
lookup, the cell also holds the same adaptive policy with the draft model
alone (``MODEL_ALONE``), run on the same engine and alternated with it
prompt by prompt, so what lookup adds is a ratio within one engine, not of
two engines' speedups over two target-only baselines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gambit.bench.costs import cost_bound, cost_summary
from gambit.bench.foresight import ReplyRuns, ceiling_of, foresight_times
from gambit.bench.paired import held_out_ratio, paired_ratio, prompt_regret
from gambit.bench.parts import PartTimes
from gambit.bench.runner import TARGET_ONLY, ModeTotals
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.gamma.policy import DEFAULT_GAMMA_MAX

GAMMA_MAX = DEFAULT_GAMMA_MAX  # the adaptive policy's ceiling, as in the app
# The adaptive policy of a drafter that combines a draft model with lookup,
# with lookup's copies withheld: the draft model alone, on the same engine.
MODEL_ALONE = "model alone"


def fixed_mode(gamma: int, side: int = 0) -> str:
    return f"fixed={gamma}" + (f"+{side}" if side else "")


def parse_fixed(mode: str) -> tuple[int, int]:
    """(γ, side nodes) of "fixed=N" or "fixed=N+W"."""
    gamma, _, side = mode.removeprefix("fixed=").partition("+")
    return int(gamma), int(side or 0)


@dataclass
class RoundTimes:
    """Fixed-γ chain rounds that drafted their full γ: count and total seconds."""

    n: int = 0
    seconds: float = 0.0

    @property
    def mean_s(self) -> float:
        return self.seconds / self.n if self.n else 0.0


@dataclass
class Cell:
    """One target × drafter × suite."""

    totals: dict[str, ModeTotals] = field(default_factory=lambda: defaultdict(ModeTotals))
    rounds: dict[int, RoundTimes] = field(default_factory=lambda: defaultdict(RoundTimes))
    parts: PartTimes = field(default_factory=PartTimes)  # timed alone at the replies' context
    # Gaps between tokens as the chat view shows them, pacing bursts, per mode.
    shown_gaps: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # Each prompt's decoding rate (tok/s) per mode, in the prompts' order: every
    # prompt runs every mode back to back, so modes compare prompt by prompt.
    prompt_rates: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # Each prompt's tokens after the first and the seconds they took, per mode
    # (``after_first_token``): where a policy may skip reading the prompt,
    # the rate that charges a draft model's reading to the mode that paid it.
    prompt_waits: dict[str, list[tuple[int, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    prompts: list[str] = field(default_factory=list)  # "suite #n", in the same order
    compared: int = 0
    diverged: int = 0
    # Where lookup joins a draft model: what each prompt's adaptive replies let
    # the draft model and the copies get right, in the prompts' order (the
    # ceiling; None: not measurable, a draft through text).
    foresight: list[tuple[ReplyRuns | None, ...]] = field(default_factory=list)

    def add_prompt(
        self,
        label: str,
        replies: dict[str, GenerationStats],
        foresight: tuple[ReplyRuns | None, ...] | None = None,
    ) -> None:
        """A prompt's figures per mode from its ``replies`` in that mode, merged
        (``GenerationStats.merge``; several where replies are sampled): their
        rate, and their tokens after the first with the seconds they took. A
        prompt's samples count by their tokens, as the suite's figures do.
        ``foresight``: its adaptive replies' (where lookup joins a draft model)."""
        self.prompts.append(label)
        for mode, stats in replies.items():
            self.prompt_rates[mode].append(stats.tokens_per_s)
            self.prompt_waits[mode].append(after_first_token(stats))
        if foresight is not None:
            self.foresight.append(foresight)


def after_first_token(stats: GenerationStats) -> tuple[int, float]:
    """A reply's tokens after its first and the seconds they took: what a user
    waits once the reply has started. A draft model reads the prompt after the
    first token, so its reading counts here, where ``tokens_per_s`` leaves it
    out with all prompt processing; the target's own prefill, the same in
    every mode, is before the first token and left out of both. (The adaptive
    policy skips the reading where drafting would not repay it; a fixed γ
    always pays it, so judged by ``tokens_per_s`` alone, skipping it reads as
    a loss however much time it saved.)"""
    return max(0, stats.n_tokens - 1), max(0.0, stats.elapsed_s - stats.ttft_s)


def costs_at_context(cell: Cell, calibrated: CostModel) -> CostModel:
    """The costs the cell's rounds paid: its parts timed at the replies'
    context, or the calibration where none were timed. Either way with what
    only rounds measure, as ``calibrated`` carries it (``run_pair``): a
    round's catch-up, for the ceiling on what lookup adds."""
    timed = cell.parts.cost_model(GAMMA_MAX + 1)
    if timed is None:
        return calibrated
    timed.catch_up_ratio = calibrated.catch_up_ratio
    timed.draft_extra_ratio = calibrated.draft_extra_ratio
    return timed


def _longest_chain(modes: Sequence[str]) -> str | None:
    chains = [m for m in modes if m.startswith("fixed=") and parse_fixed(m)[1] == 0]
    return max(chains, key=lambda m: parse_fixed(m)[0], default=None)


def _judged_ratio(row: dict[str, Any]) -> float:
    return float(row["judged"][1])


def _foresight_times(cell: Cell, costs: CostModel) -> list[tuple[float, float] | None]:
    """Each prompt's ``foresight_times``, summed over its replies, where every
    one of them was measured."""
    prompts: list[tuple[float, float] | None] = []
    for replies in cell.foresight:
        times = [None if r is None else foresight_times(r, costs, GAMMA_MAX) for r in replies]
        measured = [t for t in times if t is not None]
        if not replies or len(measured) < len(times):
            prompts.append(None)
            continue
        prompts.append((sum(t[0] for t in measured), sum(t[1] for t in measured)))
    return prompts


def _suite_ceiling(replies: list[tuple[float, float] | None]) -> float | None:
    """The ceiling over the suite: its replies' summed least times, not a mean
    of their ratios; None where none was measured."""
    measured = [times for times in replies if times is not None]
    return ceiling_of(measured) if measured else None


def _per_prompt(
    cell: Cell, fixed: list[str], times: list[tuple[float, float] | None]
) -> list[dict[str, Any]]:
    """``prompt_regret`` of adaptive in ``cell`` against the fixed chains (adaptive
    drafts chains, as the app does with trees off), each row with its prompt's
    label (and, where lookup joins a draft model, what lookup added and its
    ceiling on that prompt's reply, from ``times``)."""
    chains = [m for m in fixed if parse_fixed(m)[1] == 0]
    rows = prompt_regret(cell.prompt_rates, "adaptive", chains, TARGET_ONLY)
    waits = {m: [n / s if s > 0 else 0.0 for n, s in w] for m, w in cell.prompt_waits.items()}
    after_first = {
        int(r["index"]): r for r in prompt_regret(waits, "adaptive", chains, TARGET_ONLY)
    }
    alone = cell.prompt_rates.get(MODEL_ALONE)
    for row in rows:
        i = int(row["index"])
        if i in after_first:
            row["after_first_token"] = after_first[i]
        row["prompt"] = cell.prompts[i] if i < len(cell.prompts) else f"#{i + 1}"
        if alone and alone[i] > 0:
            row["vs_model_alone"] = cell.prompt_rates["adaptive"][i] / alone[i]
        reply = times[i] if i < len(times) else None
        if reply is not None:
            row["lookup_ceiling"] = ceiling_of([reply])
    return rows


@dataclass(frozen=True)
class SuiteFigures:
    """One suite's figures in a row of the regimes report: every mode's, and
    the comparisons. None wherever nothing was run to compare with
    (``--fixed none``; no fixed chain for the bound; no first token timed):
    the report shows "-", never a 0.00x or 1.00x. ``to_json`` is the report's
    form (the tables and charts read it from a saved report too)."""

    modes: dict[str, dict[str, Any]]  # each mode's figures (ModeTotals.figures + speedups)
    # prompt by prompt: adaptive ÷ the best fixed γ for that prompt (and the
    # worst of them: what a user who tuned γ per prompt would have beaten it by)
    per_prompt: list[dict[str, Any]]
    worst_prompt: dict[str, Any] | None
    best_fixed: str | None
    best_fixed_speedup: float | None
    best_fixed_end_to_end: float | None
    adaptive_speedup: float
    adaptive_end_to_end: float
    # its 95 % interval, prompt by prompt (where nothing pays: is a loss noise?)
    adaptive_speedup_interval: list[float] | None
    adaptive_vs_best_fixed: float | None
    adaptive_vs_best_fixed_end_to_end: float | None
    # prompt by prompt: the geometric mean and its 95 % interval (gambit.bench.paired)
    adaptive_vs_best_fixed_interval: list[float] | None
    # against the best fixed policy chosen on the other half of the prompts
    adaptive_vs_held_out_fixed: float | None
    bound: float | None  # what the costs allow the longest fixed chain's acceptance
    bound_gamma_max: int | None
    alpha: list[float]
    ttft_ratio: float | None
    round_efficiency: dict[str, float]  # by γ: the parts' times ÷ a round's
    round_ms: dict[str, dict[str, float]]
    costs_at_context: dict[str, Any]
    divergence: str | None  # "diverged/compared" greedy replies, where compared
    # Where the drafter combines a draft model with lookup: adaptive ÷ the same
    # policy with the draft model alone (MODEL_ALONE), and its 95 % interval
    # prompt by prompt: what lookup adds, on one engine.
    adaptive_vs_model_alone: float | None = None
    adaptive_vs_model_alone_interval: list[float] | None = None
    # The most lookup could add on these replies, with perfect foresight, at
    # the costs measured (gambit.bench.foresight): the draft model alone's
    # least time ÷ that with copies, over the suite.
    lookup_ceiling: float | None = None
    # After the first token, a draft model's reading of the prompt counted
    # (``after_first_token``), over the suite: adaptive ÷ target-only, and ÷
    # the best fixed γ by that rate (and which γ that was).
    adaptive_after_first_token: float | None = None
    after_first_token_best_fixed: str | None = None
    adaptive_vs_best_fixed_after_first_token: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cell_figures(cell: Cell, calibrated: CostModel) -> SuiteFigures:
    """The per-cell report: every mode's figures plus the comparisons."""
    costs = costs_at_context(cell, calibrated)
    base = cell.totals[TARGET_ONLY].figures()
    modes: dict[str, Any] = {}
    for mode, totals in cell.totals.items():
        fig = totals.figures()
        for rate, speedup in (
            ("tokens_per_s", "speedup"),
            ("end_to_end_tokens_per_s", "speedup_end_to_end"),  # prompt processing included
        ):
            fig[speedup] = fig[rate] / base[rate] if base[rate] else 0.0
        gaps = cell.shown_gaps.get(mode)
        if gaps:
            fig["p99_shown_ms"] = float(np.percentile(gaps, 99) * 1000)
        modes[mode] = fig
    fixed = {m: f for m, f in modes.items() if m.startswith("fixed=")}
    best_fixed = max(fixed, key=lambda m: fixed[m]["speedup"]) if fixed else None
    adaptive = modes.get("adaptive", {})
    best = fixed[best_fixed]["speedup"] if best_fixed else None
    # End to end, a draft model's prompt reading counts: the adaptive policy
    # may skip it (and drafting) where it would not pay, a fixed one never does.
    best_e2e = max((f["speedup_end_to_end"] for f in fixed.values()), default=None)
    adaptive_e2e = adaptive.get("speedup_end_to_end", 0.0)
    longest = _longest_chain(list(cell.totals))
    probe = cell.totals.get(longest) if longest else None
    alpha = probe.stats.acceptance_by_position if probe else ()
    efficiency, round_ms = _round_efficiency(cell, costs)
    gamma_bound = parse_fixed(longest)[0] if longest else 1
    base_ttft = base.get("ttft_ms", 0.0)
    rates = cell.prompt_rates
    paired = (
        paired_ratio(list(zip(rates[best_fixed], rates["adaptive"], strict=True)))
        if best_fixed and "adaptive" in rates
        else None
    )
    over_plain = (
        paired_ratio(list(zip(rates[TARGET_ONLY], rates["adaptive"], strict=True)))
        if "adaptive" in rates
        else None
    )
    replies = _foresight_times(cell, costs)
    after_speedup, after_best, after_ratio = _after_first_token_regret(cell, list(fixed))
    per_prompt = _per_prompt(cell, list(fixed), replies)
    adaptive_speedup = adaptive.get("speedup", 0.0)
    vs_alone, vs_alone_interval = _vs_model_alone(cell, modes)
    return SuiteFigures(
        modes=modes,
        per_prompt=per_prompt,
        worst_prompt=min(per_prompt, key=_judged_ratio, default=None),
        best_fixed=best_fixed,
        best_fixed_speedup=best,
        best_fixed_end_to_end=best_e2e,
        adaptive_speedup=adaptive_speedup,
        adaptive_end_to_end=adaptive_e2e,
        adaptive_speedup_interval=list(over_plain[1:]) if over_plain else None,
        adaptive_vs_best_fixed=adaptive_speedup / best if best else None,
        adaptive_vs_best_fixed_end_to_end=adaptive_e2e / best_e2e if best_e2e else None,
        adaptive_vs_best_fixed_interval=list(paired[1:]) if paired else None,
        # (0.0 from held_out_ratio: too few prompts or no fixed policy)
        adaptive_vs_held_out_fixed=held_out_ratio(rates, "adaptive", list(fixed)) or None,
        # a fixed chain that never drafted: nothing to gain, plain decoding
        bound=(cost_bound(alpha, costs, gamma_bound) if alpha else 1.0) if probe else None,
        bound_gamma_max=gamma_bound if probe else None,
        alpha=list(alpha),
        ttft_ratio=adaptive.get("ttft_ms", 0.0) / base_ttft if base_ttft else None,
        round_efficiency=efficiency,
        round_ms=round_ms,
        costs_at_context=cost_summary(costs),
        divergence=f"{cell.diverged}/{cell.compared}" if cell.compared else None,
        adaptive_vs_model_alone=vs_alone,
        adaptive_vs_model_alone_interval=vs_alone_interval,
        lookup_ceiling=_suite_ceiling(replies),
        adaptive_after_first_token=after_speedup,
        after_first_token_best_fixed=after_best,
        adaptive_vs_best_fixed_after_first_token=after_ratio,
    )


def _round_efficiency(
    cell: Cell, costs: CostModel
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """By γ: the parts' times (γ draft steps and a verification, timed alone)
    ÷ a full fixed-γ round's, and both in ms."""
    efficiency, round_ms = {}, {}
    for gamma, times in sorted(cell.rounds.items()):
        parts = gamma * costs.t_draft + costs.verify_cost(gamma + 1)
        if times.n:
            efficiency[str(gamma)] = parts / times.mean_s
            round_ms[str(gamma)] = {"round": times.mean_s * 1000, "parts": parts * 1000}
    return efficiency, round_ms


def _after_first_token_regret(
    cell: Cell, fixed: list[str]
) -> tuple[float | None, str | None, float | None]:
    """Over the suite, by the rate after the first token (``after_first_token``,
    summed over the prompts): adaptive ÷ target-only, the best fixed γ, and
    adaptive ÷ it; None for each not measured."""
    rates = {}
    for mode, waits in cell.prompt_waits.items():
        seconds = sum(s for _, s in waits)
        rates[mode] = sum(n for n, _ in waits) / seconds if seconds > 0 else 0.0
    adaptive, plain = rates.get("adaptive", 0.0), rates.get(TARGET_ONLY, 0.0)
    if adaptive <= 0:
        return None, None, None
    speedup = adaptive / plain if plain > 0 else None
    measured = [m for m in fixed if rates.get(m, 0.0) > 0]
    if not measured:
        return speedup, None, None
    best = max(measured, key=rates.__getitem__)
    return speedup, best, adaptive / rates[best]


def _vs_model_alone(cell: Cell, modes: dict[str, Any]) -> tuple[float | None, list[float] | None]:
    """Adaptive ÷ the same policy with the draft model alone (MODEL_ALONE), and
    its 95 % interval prompt by prompt; None where that mode did not run."""
    alone = modes.get(MODEL_ALONE, {}).get("speedup")
    adaptive = modes.get("adaptive", {}).get("speedup")
    if not alone or adaptive is None:
        return None, None
    rates = cell.prompt_rates
    paired = paired_ratio(list(zip(rates[MODEL_ALONE], rates["adaptive"], strict=True)))
    return adaptive / alone, list(paired[1:]) if paired else None
