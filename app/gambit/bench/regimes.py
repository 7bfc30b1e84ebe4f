"""``gambit-cli bench --regimes``: does the bet pay, and how far from what the hardware allows?

One run derives targets of different weight types from one model (F16, F32,
Q8_0; the model itself, a Q4 file, is the draft), so that the same machine
shows both regimes users meet:

- compute-bound: verifying a batch of k tokens costs clearly more than one
  token (small models on a CPU: F16, Q8_0);
- bandwidth-bound: a batch costs about as much as one token, because reading
  the weights dominates (a laptop's 4-8 GB model, any GPU; here the F32 target,
  540 MB read per token).

For each target × drafter (draft model, prompt lookup, layer skip) × suite it
runs target-only, the adaptive controller and fixed γ ∈ {1, 2, 4, 8} on the
same loaded models, rotating their order per prompt, and reports per cell:

- tokens/s and speedup of each mode against target-only (decoding only, as
  llama.cpp reports it), and the adaptive policy's end-to-end speedup, prompt
  processing included (a draft model reads the prompt too);
- the best fixed policy in hindsight and adaptive ÷ best fixed;
- the **cost-model bound**: the best speedup any fixed γ could reach given the
  measured t_target(k), draft step and per-position acceptance (from the
  γ = 8 runs, which try every position), so each number says how far it is
  from what this hardware allows;
- round efficiency of fixed-γ rounds: (γ · draft step + t_verify(γ+1),
  measured alone at the same context: ``gambit.bench_parts``) ÷ the measured
  round time;
- at temperature 0, how many replies differ from target-only.

Speedups are ratios within one run; run it more than once before trusting a
difference of a few per cent (the machine's speed drifts).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gambit.bench import TARGET_ONLY, BenchPrompt, ModeTotals, load_prompts, run_once
from gambit.bench_parts import PartTimes, time_parts
from gambit.engine.calibration import calibrate
from gambit.engine.controller import GammaController
from gambit.engine.decoder import GenerationConfig, Round
from gambit.engine.drafters.registry import DRAFTING, DrafterKind, spec
from gambit.engine.estimates import CostModel
from gambit.engine.runtime import RuntimeOptions
from gambit.engine.sampling import SamplingParams
from gambit.engine.session import Engine, EngineConfig
from gambit.errors import GambitError

FIXED_GAMMAS = (1, 2, 4, 8)
GAMMA_MAX = 8
TARGET_TYPES = ("F16", "F32", "Q8_0")
# Every drafting kind of the registry, the draft model first (the classic pairing)
# and the rest in the registry's order: draft, lookup, layerskip.
DRAFTERS: tuple[DrafterKind, ...] = ("draft", *(k for k in DRAFTING if k != "draft"))
# t(5)/t(1) below this: a batch of five costs little more than one token.
BANDWIDTH_BOUND_BELOW = 1.3
# The calibration context: about where the bench's replies are decoded.
CALIBRATION_CONTEXT = 192

Log = Callable[[str], None]


def fixed_mode(gamma: int) -> str:
    return f"fixed={gamma}"


MODES = (TARGET_ONLY, "adaptive", *(fixed_mode(g) for g in FIXED_GAMMAS))


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
    compared: int = 0
    diverged: int = 0


def cost_bound(alpha: Sequence[float], costs: CostModel, gamma_max: int = GAMMA_MAX) -> float:
    """The best expected speedup of a fixed γ ≤ ``gamma_max`` over plain decoding,
    given per-position acceptance ``alpha`` and the measured costs."""
    t1 = costs.verify_cost(1)
    a = np.zeros(gamma_max)
    a[: min(len(alpha), gamma_max)] = alpha[:gamma_max]
    tokens = 1.0 + np.cumsum(np.cumprod(a))
    best = 1.0
    for g in range(1, gamma_max + 1):
        cost = g * costs.t_draft + costs.verify_cost(g + 1)
        best = max(best, float(tokens[g - 1]) / cost * t1)
    return best


def costs_at_context(cell: Cell, calibrated: CostModel) -> CostModel:
    """The costs the cell's rounds paid: its parts timed at the replies'
    context, or the calibration where none were timed."""
    return cell.parts.cost_model(GAMMA_MAX + 1) or calibrated


def cell_figures(cell: Cell, calibrated: CostModel) -> dict[str, Any]:
    """The per-cell report: every mode's figures plus the comparisons."""
    costs = costs_at_context(cell, calibrated)
    base = cell.totals[TARGET_ONLY].figures()
    modes: dict[str, Any] = {}
    for mode in MODES:
        if mode not in cell.totals:
            continue
        fig = cell.totals[mode].figures()
        for rate, speedup in (
            ("tokens_per_s", "speedup"),
            ("end_to_end_tokens_per_s", "speedup_end_to_end"),  # prompt processing included
        ):
            fig[speedup] = fig[rate] / base[rate] if base[rate] else 0.0
        modes[mode] = fig
    fixed = {m: f for m, f in modes.items() if m.startswith("fixed=")}
    best_fixed = max(fixed, key=lambda m: fixed[m]["speedup"]) if fixed else None
    adaptive = modes.get("adaptive", {}).get("speedup", 0.0)
    best = fixed[best_fixed]["speedup"] if best_fixed else 0.0
    # End to end, a draft model's prompt reading counts: the adaptive policy
    # may skip it (and drafting) where it would not pay, a fixed one never does.
    best_e2e = max((f["speedup_end_to_end"] for f in fixed.values()), default=0.0)
    adaptive_e2e = modes.get("adaptive", {}).get("speedup_end_to_end", 0.0)
    probe = cell.totals.get(fixed_mode(GAMMA_MAX))
    alpha = probe.stats.acceptance_by_position if probe else ()
    efficiency, round_ms = {}, {}
    for gamma, times in sorted(cell.rounds.items()):
        parts = gamma * costs.t_draft + costs.verify_cost(gamma + 1)
        if times.n:
            efficiency[str(gamma)] = parts / times.mean_s
            round_ms[str(gamma)] = {"round": times.mean_s * 1000, "parts": parts * 1000}
    return {
        "modes": modes,
        "adaptive_end_to_end": adaptive_e2e,
        "best_fixed": best_fixed,
        "best_fixed_speedup": best,
        "best_fixed_end_to_end": best_e2e,
        "adaptive_speedup": adaptive,
        "adaptive_vs_best_fixed": adaptive / best if best else 0.0,
        "adaptive_vs_best_fixed_end_to_end": adaptive_e2e / best_e2e if best_e2e else 0.0,
        "bound": cost_bound(alpha, costs) if alpha else 1.0,
        "alpha": list(alpha),
        "round_efficiency": efficiency,
        "round_ms": round_ms,
        "costs_at_context": cost_summary(costs),
        "divergence": f"{cell.diverged}/{cell.compared}" if cell.compared else None,
    }


def cost_summary(costs: CostModel) -> dict[str, Any]:
    t1 = costs.verify_cost(1)
    return {
        "t1_ms": t1 * 1000,
        "t_ratio": {str(k): costs.verify_cost(k) / t1 for k in (2, 3, 5, 9)},
        "draft_ratio": costs.draft_ratio,
    }


def regime_of(costs: CostModel) -> str:
    t5 = costs.verify_cost(5) / costs.verify_cost(1)
    return "bandwidth-bound" if t5 < BANDWIDTH_BOUND_BELOW else "compute-bound"


@dataclass(frozen=True)
class RegimeArgs:
    source: Path
    prompts: list[BenchPrompt]
    targets: tuple[str, ...]
    drafters: tuple[DrafterKind, ...]
    max_tokens: int
    sampling: SamplingParams
    options: RuntimeOptions
    work_dir: Path
    kernel_cache: Path | None


def derive_targets(args: RegimeArgs, log: Log) -> dict[str, Path]:
    from gambit.models.derive import requantize

    paths = {}
    for ftype in args.targets:
        dst = args.work_dir / f"{args.source.stem.rsplit('.', 1)[0]}.{ftype}.gguf"
        if not dst.is_file():
            log(f"deriving the {ftype} target from {args.source.name}…")
            requantize(args.source, dst, ftype)
        paths[ftype] = dst
    return paths


def _draft_file(target: Path, drafter: DrafterKind, args: RegimeArgs, log: Log) -> Path | None:
    """The draft of ``drafter``: the source model, or one derived from ``target``
    (kept in the work folder, so only the first run derives it)."""
    from gambit.models.drafter_files import resolve_drafter_file

    def announce(activity: str) -> None:
        log(f"{activity[:1].lower()}{activity[1:]} in {target.name} (cached after the first run)…")

    return resolve_drafter_file(
        drafter,
        target,
        chosen=args.source,
        models_dir=args.work_dir,
        progress=announce,
        options=args.options,
    ).path


def run_pair(
    args: RegimeArgs, target: Path, drafter: DrafterKind, log: Log
) -> tuple[dict[str, Cell], CostModel, str]:
    """Every prompt under every mode for one target and drafter."""
    draft = _draft_file(target, drafter, args, log)
    engine = Engine(
        EngineConfig(
            target=target,
            drafter=drafter,
            draft=draft,
            target_options=args.options,
            gamma=4,
            gamma_max=GAMMA_MAX,
            kernel_cache=args.kernel_cache,
        )
    )
    cells: dict[str, Cell] = defaultdict(Cell)
    try:
        costs = calibrate(
            engine.target, engine.draft_runtime, GAMMA_MAX + 1, context=CALIBRATION_CONTEXT
        )
        if spec(drafter).free:
            costs.t_draft = 0.0
        controllers: dict[str, GammaController | None] = {TARGET_ONLY: None}
        controllers["adaptive"] = engine.new_controller("adaptive")
        for g in FIXED_GAMMAS:
            controllers[fixed_mode(g)] = engine.new_controller("fixed", g)
        config = GenerationConfig(max_tokens=args.max_tokens, sampling=args.sampling)
        warm = GenerationConfig(max_tokens=8, sampling=args.sampling)
        run_once(engine, "Hello", warm, engine.new_controller("fixed"))
        run_once(engine, "Hello", warm, None)
        modes = list(controllers)
        for i, bp in enumerate(args.prompts):
            order = modes[i % len(modes) :] + modes[: i % len(modes)]
            outputs: dict[str, list[int]] = {}
            for mode in order:
                rounds: list[Round] = []
                stats, tokens = run_once(engine, bp.prompt, config, controllers[mode], rounds)
                outputs[mode] = tokens
                gamma = int(mode.removeprefix("fixed=")) if mode.startswith("fixed=") else 0
                parts = _time_parts_mid_reply(engine, tokens, gamma) if gamma else None
                for cell in (cells[bp.suite], cells["ALL"]):
                    cell.totals[mode].add(stats)
                    if parts is not None:
                        _add_round_times(cell, rounds, gamma)
                        cell.parts.add(parts)
            if args.sampling.greedy:
                for cell in (cells[bp.suite], cells["ALL"]):
                    cell.compared += len(modes) - 1
                    cell.diverged += sum(outputs[m] != outputs[TARGET_ONLY] for m in modes[1:])
            log(
                f"  {target.stem} {drafter:<9} [{i + 1}/{len(args.prompts)}] {bp.suite:<8} "
                + " ".join(f"{m} {cells['ALL'].totals[m].stats.tokens_per_s:5.1f}" for m in modes)
            )
        detail = engine.target_kernels.describe()
    finally:
        engine.close()
    return cells, costs, detail


def _add_round_times(cell: Cell, rounds: Sequence[Round], gamma: int) -> None:
    # The first round of a reply also prefills the draft: not a steady round.
    for rnd in rounds[1:]:
        if rnd.n_drafted == gamma and rnd.n_side == 0 and rnd.n_catch_up == 0:
            times = cell.rounds[gamma]
            times.n += 1
            times.seconds += rnd.t_draft_s + rnd.t_verify_s


def _time_parts_mid_reply(engine: Engine, reply: list[int], gamma: int) -> PartTimes:
    """The parts of a γ round, timed alone half-way through the reply just made."""
    context = engine.decoder.context
    middle = context[: len(context) - len(reply) // 2]
    return time_parts(engine.target, engine.draft_runtime, middle, (1, gamma + 1))


def run_regimes(args: RegimeArgs, log: Log) -> dict[str, Any]:
    from gambit.engine.backend import detect_backend
    from gambit.engine.kernels import cpu_id

    args.work_dir.mkdir(parents=True, exist_ok=True)
    targets = derive_targets(args, log)
    backend = detect_backend()
    report: dict[str, Any] = {
        "machine": {
            "cpu": cpu_id(),
            "cpu_model": cpu_id().rsplit(" ", 1)[0],  # without the flags digest
            "cpu_features": list(backend.cpu_features),
            "gpu_offload": backend.gpu_offload,
            "threads": args.options.n_threads or backend.threads,
            "gpu_layers": args.options.n_gpu_layers,
        },
        "source": args.source.name,
        "max_tokens": args.max_tokens,
        "temperature": args.sampling.temperature,
        "prompts": len(args.prompts),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pairs": [],
    }
    for ftype, target in targets.items():
        for drafter in args.drafters:
            try:
                cells, costs, kernels = run_pair(args, target, drafter, log)
            except (GambitError, ValueError, OSError) as exc:
                # One pair that cannot run (no layer-skip draft worth it, a
                # full disk) must not cost the rest of a half-hour run.
                log(f"{ftype} + {drafter}: skipped ({exc})")
                report["pairs"].append({"target": ftype, "drafter": drafter, "skipped": str(exc)})
                continue
            report["pairs"].append(
                {
                    "target": ftype,
                    "drafter": drafter,
                    "regime": regime_of(costs_at_context(cells["ALL"], costs)),
                    "costs": cost_summary(costs_at_context(cells["ALL"], costs)),
                    "calibration": cost_summary(costs),
                    "kernels": kernels,
                    "suites": {s: cell_figures(c, costs) for s, c in sorted(cells.items())},
                }
            )
    return report


# ------------------------------------------------------------------ rendering
def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per target × drafter × suite."""
    rows = []
    for pair in report["pairs"]:
        if "skipped" in pair:
            continue
        for suite, f in pair["suites"].items():
            modes = f["modes"]
            eff = f["round_efficiency"].get("4")
            t5 = pair["costs"]["t_ratio"]["5"]
            rows.append(
                [
                    f"{pair['target']} ({pair['regime']}, t5/t1 {t5:.2f})",
                    pair["drafter"],
                    suite,
                    f"{modes[TARGET_ONLY]['tokens_per_s']:.1f}",
                    f"{modes['adaptive']['speedup']:.2f}x",
                    f"{f['best_fixed'] or '-'} {f['best_fixed_speedup']:.2f}x",
                    f"{f['adaptive_vs_best_fixed']:.2f}",
                    f"{f['adaptive_end_to_end']:.2f}x",
                    f"{f.get('best_fixed_end_to_end', 0.0):.2f}x",
                    f"{f.get('adaptive_vs_best_fixed_end_to_end', 0.0):.2f}",
                    f"{f['bound']:.2f}x",
                    f"{modes['adaptive']['acceptance_rate']:.0%}",
                    f"{eff:.2f}" if eff else "-",
                    f["divergence"] or "-",
                ]
            )
    return rows


HEADER = [
    "target (regime)", "drafter", "suite", "plain tok/s", "adaptive", "best fixed", "adapt/best",
    "adaptive e2e", "best fixed e2e", "adapt/best e2e", "bound", "accept", "round eff γ4",
    "diverged",
]  # fmt: skip


def markdown_table(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    return "\n".join(lines)


def text_table(report: dict[str, Any]) -> str:
    rows = [HEADER, *table_rows(report)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)


def save_chart(report: dict[str, Any], path: Path) -> None:
    """A bar chart (adaptive, best fixed, bound) per target × drafter, rendered offscreen."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCharts import (
        QBarCategoryAxis,
        QBarSeries,
        QBarSet,
        QChart,
        QChartView,
        QValueAxis,
    )
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QPainter
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    pairs = [p for p in report["pairs"] if "skipped" not in p]
    series = QBarSeries()
    names = ("adaptive", "best fixed", "cost-model bound")
    sets = {n: QBarSet(n) for n in names}
    categories = []
    top = 1.0
    for p in pairs:
        f = p["suites"]["ALL"]
        categories.append(f"{p['target']} + {p['drafter']}")
        values = (f["adaptive_speedup"], f["best_fixed_speedup"], f["bound"])
        for n, v in zip(names, values, strict=True):
            sets[n].append(v)
        top = max(top, *values)
    for s in sets.values():
        series.append(s)
    chart = QChart()
    chart.addSeries(series)
    machine = report["machine"]
    chart.setTitle(
        f"Speedup over target-only, all suites — {machine.get('cpu_model', machine['cpu'])}, "
        f"{machine['threads']} threads"
    )
    x = QBarCategoryAxis()
    x.append(categories)
    y = QValueAxis()
    y_max = math.ceil(top * 4) / 4
    y.setRange(0.0, y_max)
    y.setTickCount(int(y_max * 4) + 1)  # a line every 0.25x
    y.setLabelFormat("%.2f")
    y.setTitleText("speedup (×)")
    chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
    chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
    series.attachAxis(x)
    series.attachAxis(y)
    view = QChartView(chart)
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
    view.resize(max(900, 150 * len(categories)), 520)
    path.parent.mkdir(parents=True, exist_ok=True)
    view.grab().save(str(path))
    del app


def pick_prompts(path: Path, per_suite: int) -> list[BenchPrompt]:
    """The first ``per_suite`` prompts of each suite, interleaved across suites."""
    by_suite: dict[str, list[BenchPrompt]] = defaultdict(list)
    for bp in load_prompts(path):
        if per_suite <= 0 or len(by_suite[bp.suite]) < per_suite:
            by_suite[bp.suite].append(bp)
    rounds = max(len(v) for v in by_suite.values())
    return [v[i] for i in range(rounds) for v in by_suite.values() if i < len(v)]


def run_regimes_cli(
    args: argparse.Namespace, source: Path, options: RuntimeOptions, sampling: SamplingParams
) -> int:
    from gambit.storage.paths import cache_dir

    if sampling.seed is None:
        sampling = SamplingParams(**{**sampling.__dict__, "seed": 1234})

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    targets = tuple(t.strip().upper() for t in args.targets.split(",") if t.strip())
    drafters = tuple(d.strip() for d in args.drafters.split(",") if d.strip())
    for t in targets:
        if t not in ("F16", "F32", "Q8_0"):
            raise GambitError(f"unknown target type {t!r}: use F16, F32 or Q8_0")
    for d in drafters:
        if d not in DRAFTERS:
            raise GambitError(f"unknown drafter {d!r}: use {', '.join(DRAFTERS)}")
    regime_args = RegimeArgs(
        source=source,
        prompts=pick_prompts(args.prompts, args.per_suite),
        targets=targets,
        drafters=drafters,
        max_tokens=args.max_tokens,
        sampling=sampling,
        options=options,
        work_dir=cache_dir() / "regimes",
        kernel_cache=cache_dir(),
    )
    report = run_regimes(regime_args, log)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "regimes.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        (args.out / "regimes.md").write_text(markdown_table(report) + "\n", encoding="utf-8")
        save_chart(report, args.out / "regimes.png")
        log(f"wrote {args.out / 'regimes.json'}, regimes.md and regimes.png")
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(text_table(report))
    return 0
