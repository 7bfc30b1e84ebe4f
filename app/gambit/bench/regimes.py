"""``gambit-cli bench --regimes``: does the bet pay, and how far from what the hardware allows?

One run derives targets from one model (``gambit.bench.targets``; the model
itself, a Q4 file, is the draft), so that one machine shows the regimes users
meet:

- cost-scaled targets ("F32x4", "F16x4"): blocks appended whose outputs are
  zero, so the target reads the weights of a model several times larger and
  keeps the small model's logits; a draft step costs about a tenth of a
  target step, as with a 0.5B draft for a 7B target. The realistic rows;
- toy targets re-quantized from the draft's own network (F16, F32, Q8_0):
  a draft step costs 0.2-0.6 of a target step; compute-bound on a CPU (a
  batch of k tokens costs clearly more than one) or, for F32 on some CPUs,
  closer to bandwidth-bound.

For each target × drafter (draft model, prompt lookup, layer skip) × suite it
runs target-only, the adaptive controller (chains, as the app drafts by
default) and fixed γ ∈ {1, 2, 4, 8} — up to 16 on the scaled rows, and token
trees there for drafters that draft them, and for the draft model with
lookup the same adaptive policy with the draft model alone (lookup's copies
withheld) — on the same loaded models, rotating their order per prompt, and
reports per cell:

- tokens/s and speedup of each mode against target-only (decoding only, as
  llama.cpp reports it; a draft model's reading of the prompt counts as
  prompt processing), and end to end, prompt processing included;
- the best fixed policy in hindsight and adaptive ÷ best fixed, with its 95 %
  interval prompt by prompt, and adaptive ÷ the best fixed policy chosen on
  the other half of the prompts (the best of several noisy figures reads
  high: ``gambit.bench.paired``);
- the **cost-model bound**: the best speedup any fixed chain could reach given
  t_target(k), the draft step (timed alone at the replies' context:
  ``gambit.bench.parts``) and per-position acceptance from the longest fixed
  γ's runs, which try every position;
- time to first token and the p99 gap between tokens, target-only against
  adaptive, as they arrive and as the chat view shows them when it paces
  bursts (``gambit.engine.text.pacing``);
- round efficiency of fixed-γ rounds: (γ · draft step + t_verify(γ+1)) ÷ the
  measured round time;
- at temperature 0, how many replies differ from target-only;
- for the draft model with lookup: adaptive ÷ its draft model alone, with its
  95 % interval prompt by prompt (``gambit.bench.regimes_figures``).

Speedups are ratios within one run; run it more than once before trusting a
difference of a few per cent (the machine's speed drifts).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gambit.bench import playback
from gambit.bench.costs import CALIBRATION_CONTEXT, cost_summary, regime_of
from gambit.bench.foresight import ReplyRuns, reply_runs
from gambit.bench.parts import PartTimes, time_parts
from gambit.bench.regimes_figures import (
    GAMMA_MAX,
    MODEL_ALONE,
    Cell,
    cell_figures,
    costs_at_context,
    fixed_mode,
    parse_fixed,
)
from gambit.bench.regimes_report import markdown_table, save_chart, text_table
from gambit.bench.runner import TARGET_ONLY, BenchPrompt, load_prompts, run_once
from gambit.bench.targets import TargetSpec, derive_targets, parse_targets
from gambit.engine.drafters.base import ChoosingDrafter
from gambit.engine.drafters.registry import DRAFTING, TREE_DRAFTERS, DrafterKind, spec
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.machine.backend import detect_backend
from gambit.engine.machine.kernels import cpu_id
from gambit.engine.machine.runtime import RuntimeOptions
from gambit.engine.session import Engine, EngineConfig, GammaController
from gambit.engine.text.pacing import REPAINT_S, shown_times
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError
from gambit.formats.layerskip_file import write_layer_skip_model
from gambit.models.drafter_files import resolve_drafter_file
from gambit.storage.paths import cache_dir

FIXED_GAMMAS = (1, 2, 4, 8)
FIXED_GAMMAS_SCALED = (1, 2, 4, 8, 12, 16)
# Trees on the scaled rows: a chain of γ with w side nodes, verified together.
TREES_SCALED = ((6, 2), (12, 4))
TREE_NODES = 16
DEFAULT_TARGETS = "F32x4,F16x4,F16,F32,Q8_0"
# Every drafting kind of the registry, the draft model first (the classic pairing)
# and the rest in the registry's order: draft, lookup, layerskip.
DRAFTERS: tuple[DrafterKind, ...] = ("draft", *(k for k in DRAFTING if k != "draft"))

Log = Callable[[str], None]


def pair_modes(
    target: TargetSpec, drafter: DrafterKind, fixed: tuple[int, ...] | None = None
) -> list[str]:
    """What a target × drafter runs: target-only, adaptive, the fixed chains
    (``fixed``, default by the target's kind; () for none), and on the scaled
    rows trees where the drafter drafts them."""
    gammas = (FIXED_GAMMAS_SCALED if target.scaled else FIXED_GAMMAS) if fixed is None else fixed
    kind = spec(drafter)
    alone = [MODEL_ALONE] if kind.combines and kind.loads_model else []
    modes = [TARGET_ONLY, "adaptive", *alone, *(fixed_mode(g) for g in gammas)]
    if fixed == ():
        return modes  # (adaptive against target-only alone)
    if target.scaled and drafter in TREE_DRAFTERS:
        modes += [fixed_mode(g, w) for g, w in TREES_SCALED]
    return modes


@dataclass(frozen=True)
class RegimeArgs:
    source: Path
    prompts: list[BenchPrompt]
    targets: tuple[TargetSpec, ...]
    drafters: tuple[DrafterKind, ...]
    max_tokens: int
    sampling: SamplingParams
    options: RuntimeOptions
    work_dir: Path
    kernel_cache: Path | None
    # The draft model's file (kinds that load one); None: the source itself,
    # the target's own network. Another network's file makes pairs of two
    # networks (through text where the tokenizers differ).
    draft: Path | None = None
    # Blocks left out of the draft (a weaker draft of the same tokenizer,
    # written by the layer-skip writer into the work folder).
    draft_without: tuple[int, ...] = ()
    raw: bool = False  # plain completion (base models), not chat
    fixed: tuple[int, ...] | None = None  # fixed γs to compare (None: by the target's kind)
    fresh: bool = False  # each prompt's adaptive run anew, as a new process's first reply
    cold: bool = False  # adaptive from nothing learned of the pair (Engine.kept_learning)
    playback: bool = False  # the policies played on recorded replies (gambit.bench.playback)
    # Above temperature 0, replies sampled per prompt and mode (seeds seed..seed+n-1),
    # each prompt judged by them together.
    samples: int = 1
    batch_scale: float = 1.0  # in playback: a batch's cost beyond one token, times this


def draft_model_file(args: RegimeArgs, log: Log) -> Path:
    """The draft model the model-drafting kinds use: ``args.draft`` (or the
    source), without the blocks ``args.draft_without`` names."""
    draft = args.draft or args.source
    if not args.draft_without:
        return draft
    blocks = sorted(set(args.draft_without))
    stem = draft.stem
    path = args.work_dir / f"{stem}.without-{'-'.join(map(str, blocks))}.gguf"
    if not path.is_file():
        log(f"writing {path.name}: {draft.name} without blocks {blocks} (a weaker draft)…")
        write_layer_skip_model(draft, path, blocks)
    return path


def _draft_file(target: Path, drafter: DrafterKind, args: RegimeArgs, log: Log) -> Path | None:
    """The draft of ``drafter``: the draft model (``draft_model_file``), or one
    derived from ``target`` (kept in the work folder, so only the first run
    derives it)."""

    def announce(activity: str) -> None:
        log(f"{activity[:1].lower()}{activity[1:]} in {target.name} (cached after the first run)…")

    return resolve_drafter_file(
        drafter,
        target,
        chosen=draft_model_file(args, log) if spec(drafter).file == "chosen" else None,
        models_dir=args.work_dir,
        progress=announce,
        options=args.options,
    ).path


def _controllers(engine: Engine, modes: Sequence[str]) -> dict[str, GammaController | None]:
    controllers: dict[str, GammaController | None] = {}
    for mode in modes:
        if mode == TARGET_ONLY:
            controllers[mode] = None
        elif mode in ("adaptive", MODEL_ALONE):  # chains, as the app drafts with Tree drafts off
            controllers[mode] = engine.new_controller("adaptive", chain=True)
        else:
            gamma, side = parse_fixed(mode)
            controllers[mode] = engine.new_controller("fixed", gamma, side, chain=not side)
    return controllers


@dataclass(frozen=True)
class PairFacts:
    """What a pair ran on: the target's kernels, and the draft model's file and
    how it drafted (None where the drafter loads no model)."""

    kernels: str
    draft: str | None = None
    through_text: bool = False
    # Whether adaptive runs started from what earlier sessions learned of the pair.
    remembered: bool = False

    def as_dict(self) -> dict[str, Any]:
        how = None if self.draft is None else "through text" if self.through_text else "tokens"
        facts = {"kernels": self.kernels, "draft": self.draft, "draft_how": how}
        return {**facts, "remembered": self.remembered}


def run_pair(
    args: RegimeArgs, target_spec: TargetSpec, target: Path, drafter: DrafterKind, log: Log
) -> tuple[dict[str, Cell], CostModel, PairFacts]:
    """Every prompt under every mode for one target and drafter."""
    modes = pair_modes(target_spec, drafter, args.fixed)
    tree = any(parse_fixed(m)[1] for m in modes if m.startswith("fixed="))
    engine = _pair_engine(args, target, drafter, log, tree=tree)
    if not engine.tree:  # (a draft through text drafts chains only)
        modes = [m for m in modes if not m.startswith("fixed=") or parse_fixed(m)[1] == 0]
    cells: dict[str, Cell] = defaultdict(Cell)
    try:
        costs = engine.calibrate(engine.node_max + 1, context=CALIBRATION_CONTEXT)
        if spec(drafter).free:
            costs.t_draft = 0.0
        if args.cold:
            engine.kept_learning = None
        remembered = engine.kept_learning is not None
        controllers = _controllers(engine, modes)
        copies = isinstance(engine.drafter, ChoosingDrafter)  # (lookup joins a draft model)
        warm = GenerationConfig(max_tokens=8, sampling=args.sampling)
        run_once(engine, "Hello", warm, engine.new_controller("fixed"), raw=args.raw)
        run_once(engine, "Hello", warm, None, raw=args.raw)
        for i, bp in enumerate(args.prompts):
            order = modes[i % len(modes) :] + modes[: i % len(modes)]
            if args.fresh and "adaptive" in controllers:
                controllers.update(_controllers(engine, ["adaptive"]))
            outputs: dict[str, list[int]] = {}
            pooled: dict[str, GenerationStats] = defaultdict(GenerationStats)
            foresight: list[ReplyRuns | None] = []  # (adaptive's replies, where it copies)
            for config in _sample_configs(args):
                for mode in order:
                    stats, outputs[mode], runs = _run_mode(
                        engine, bp, config, mode, controllers[mode], cells, raw=args.raw
                    )
                    pooled[mode].merge(stats)
                    if copies and mode == "adaptive":
                        foresight.append(runs)
            label = f"{bp.suite} #{len(cells[bp.suite].prompts) + 1}"
            for cell in (cells[bp.suite], cells["ALL"]):
                cell.add_prompt(label, pooled, tuple(foresight) if copies else None)
            if args.sampling.greedy:
                for cell in (cells[bp.suite], cells["ALL"]):
                    cell.compared += len(modes) - 1
                    cell.diverged += sum(outputs[m] != outputs[TARGET_ONLY] for m in modes[1:])
            log(
                f"  {target.stem} {drafter:<9} [{i + 1}/{len(args.prompts)}] {bp.suite:<8} "
                + " ".join(f"{m} {cells['ALL'].totals[m].stats.tokens_per_s:5.1f}" for m in modes)
            )
        draft = engine.config.draft if spec(drafter).loads_model else None
        facts = PairFacts(
            engine.target_kernels.describe(),
            draft.name if draft is not None else None,
            engine.drafts_through_text,
            remembered,
        )
        if adaptive := controllers.get("adaptive"):  # (kept at close, as the app's policy is)
            engine.use_controller(adaptive)
            # The calibration times draft steps and target batches; what a
            # round's catch-up costs only rounds measure (for the ceiling on
            # what lookup adds: a copy's price is the draft model's reading).
            costs.catch_up_ratio = adaptive.costs.catch_up_ratio
            costs.draft_extra_ratio = adaptive.costs.draft_extra_ratio
    finally:
        engine.close()
    return cells, costs, facts


def _sample_configs(args: RegimeArgs) -> list[GenerationConfig]:
    """Each prompt's runs: one, or above temperature 0 ``args.samples``, each
    from its own seed. Each mode samples its own reply, so one sample per
    prompt compares different texts (and lengths); the same seeds in every
    mode, pooled, compare the prompt's replies in the mean."""
    seed = args.sampling.seed or 0
    n = 1 if args.sampling.greedy else args.samples
    return [
        GenerationConfig(max_tokens=args.max_tokens, sampling=replace(args.sampling, seed=seed + j))
        for j in range(n)
    ]


def _pair_engine(
    args: RegimeArgs, target: Path, drafter: DrafterKind, log: Log, *, tree: bool
) -> Engine:
    return Engine(
        EngineConfig(
            target=target,
            drafter=drafter,
            draft=_draft_file(target, drafter, args, log),
            target_options=args.options,
            gamma=4,
            gamma_max=GAMMA_MAX,
            tree=tree,
            tree_nodes=TREE_NODES,
            kernel_cache=args.kernel_cache,
        )
    )


def play_pair(
    args: RegimeArgs, target_spec: TargetSpec, target: Path, drafter: DrafterKind, log: Log
) -> dict[str, Any]:
    """The prompts' greedy replies recorded once, and every policy played on
    them at the pair's measured costs (``gambit.bench.playback``)."""
    engine = _pair_engine(args, target, drafter, log, tree=False)
    try:
        # (its costs: what the pair's rounds measured before where kept, else
        # the load's calibration, as the app's controllers start from)
        warm = GenerationConfig(max_tokens=8, sampling=SamplingParams(temperature=0.0))
        run_once(engine, "Hello", warm, None, raw=args.raw)
        draft = engine.config.draft
        title = f"{target_spec.label()} + {drafter}" + (f" {draft.name}" if draft else "")
        recording = playback.record(engine, args.prompts, args.max_tokens, title, raw=args.raw)
    finally:
        engine.close()
    return {
        "target": target_spec.name,
        "drafter": drafter,
        **playback.play_report(recording, args.batch_scale),
    }


def _run_mode(
    engine: Engine,
    bp: BenchPrompt,
    config: GenerationConfig,
    mode: str,
    controller: GammaController | None,
    cells: dict[str, Cell],
    *,
    raw: bool,
) -> tuple[GenerationStats, list[int], ReplyRuns | None]:
    """One reply to a prompt under one mode, folded into its suite's cell and
    ALL (its per-prompt figures: ``Cell.add_prompt``); returns its stats, its
    tokens and, for adaptive where lookup joins a draft model, what the draft
    model and the copies get right along it (None: not measurable)."""
    rounds: list[Round] = []
    combined = engine.drafter if isinstance(engine.drafter, ChoosingDrafter) else None
    if combined is not None:
        combined.copying = mode != MODEL_ALONE
    try:
        stats, tokens = run_once(engine, bp.prompt, config, controller, rounds, raw=raw)
    finally:
        if combined is not None:
            combined.copying = True
    copied = combined is not None and mode == "adaptive"
    runs = _foresight_runs(engine, tokens) if copied else None
    gamma, side = parse_fixed(mode) if mode.startswith("fixed=") else (0, 0)
    chain = gamma > 0 and side == 0
    parts = _time_parts_mid_reply(engine, tokens, gamma) if chain else None
    arrivals = [
        (r.elapsed_s, len(r.tokens), r.t_draft_s + r.t_verify_s) for r in rounds if r.tokens
    ]
    shown = shown_times(arrivals, REPAINT_S)
    for cell in (cells[bp.suite], cells["ALL"]):
        cell.totals[mode].add(stats, rounds)
        cell.shown_gaps[mode].extend(np.diff(shown).tolist())
        if parts is not None:
            _add_round_times(cell, rounds, gamma)
            cell.parts.add(parts)
    return stats, tokens, runs


def _foresight_runs(engine: Engine, reply: list[int]) -> ReplyRuns | None:
    """What the draft model and lookup's copies get right along the reply just
    made (``gambit.bench.foresight``), for the ceiling on what lookup adds;
    None where the draft model drafts through text (its tokens are not the
    reply's) or no prompt came before the reply (nothing to predict it from)."""
    context = engine.context
    draft = engine.draft_runtime
    if draft is None or engine.drafts_through_text or context[len(context) - len(reply) :] != reply:
        return None
    prompt = context[: len(context) - len(reply)]
    return reply_runs(draft, prompt, reply, GAMMA_MAX) if prompt else None


def _add_round_times(cell: Cell, rounds: Sequence[Round], gamma: int) -> None:
    # The first rounds of a reply decode plainly and then read the prompt: not steady.
    for rnd in rounds[1:]:
        if rnd.n_drafted == gamma and rnd.n_side == 0 and rnd.n_catch_up == 0:
            times = cell.rounds[gamma]
            times.n += 1
            times.seconds += rnd.t_draft_s + rnd.t_verify_s


def _time_parts_mid_reply(engine: Engine, reply: list[int], gamma: int) -> PartTimes:
    """The parts of a γ round, timed alone half-way through the reply just made."""
    context = engine.context
    middle = context[: len(context) - len(reply) // 2]
    draft = engine.draft_runtime
    own = None
    if draft is not None and engine.drafts_through_text:
        # (the draft reads the same text in its own tokens; its begin-of-text too)
        own = draft.tokenize(engine.target.detokenize(middle), parse_special=False)
    return time_parts(engine.target, draft, middle, (1, gamma + 1), draft_context=own)


def run_regimes(args: RegimeArgs, log: Log) -> dict[str, Any]:
    args.work_dir.mkdir(parents=True, exist_ok=True)
    targets = derive_targets(args.source, args.targets, args.work_dir, log)
    backend = detect_backend()
    report: dict[str, Any] = {
        "machine": {
            "cpu": cpu_id(),
            "cpu_model": cpu_id().rsplit(" ", 1)[0],  # without the flags digest
            "cpu_features": list(backend.cpu_features),
            "gpu_offload": backend.gpu_offload,
            "devices": list(backend.devices),
            "threads": args.options.n_threads or backend.threads,
            "gpu_layers": args.options.n_gpu_layers,
        },
        "source": args.source.name,
        "raw": args.raw,
        "fresh": args.fresh,
        "cold": args.cold,
        "max_tokens": args.max_tokens,
        "temperature": args.sampling.temperature,
        "samples": len(_sample_configs(args)),
        "prompts": len(args.prompts),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pairs": [],
    }
    for target_spec, target in targets.items():
        for drafter in args.drafters:
            name = target_spec.name
            if args.playback:
                try:
                    report["pairs"].append(play_pair(args, target_spec, target, drafter, log))
                except (GambitError, ValueError, OSError) as exc:
                    log(f"{name} + {drafter}: not played ({exc})")
                continue
            try:
                cells, costs, facts = run_pair(args, target_spec, target, drafter, log)
            except (GambitError, ValueError, OSError) as exc:
                # One pair that cannot run (no layer-skip draft worth it, a
                # full disk) must not cost the rest of a half-hour run.
                log(f"{name} + {drafter}: skipped ({exc})")
                report["pairs"].append({"target": name, "drafter": drafter, "skipped": str(exc)})
                continue
            at_context = costs_at_context(cells["ALL"], costs)
            report["pairs"].append(
                {
                    "target": name,
                    "label": target_spec.label(),
                    "scaled": target_spec.scaled,
                    "drafter": drafter,
                    "regime": regime_of(at_context),
                    "costs": cost_summary(at_context),
                    "calibration": cost_summary(costs),
                    **facts.as_dict(),
                    "source": args.source.name,
                    "suites": {
                        s: cell_figures(c, costs).to_json() for s, c in sorted(cells.items())
                    },
                }
            )
    return report


def playback_text(report: dict[str, Any]) -> str:
    """The played pairs' lines (``bench --regimes --playback``)."""
    lines = [line for pair in report["pairs"] for line in pair["lines"]]
    return "\n".join(lines) or "nothing played: playback needs a draft model"


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
    if sampling.seed is None:
        sampling = SamplingParams(**{**sampling.__dict__, "seed": 1234})

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.samples > 1 and sampling.greedy:
        raise GambitError(
            "--samples needs a temperature above 0: at temperature 0 every reply is the same"
        )
    drafters = tuple(d.strip() for d in args.drafters.split(",") if d.strip())
    for d in drafters:
        if d not in DRAFTERS:
            raise GambitError(f"unknown drafter {d!r}: use {', '.join(DRAFTERS)}")
    regime_args = RegimeArgs(
        source=source,
        prompts=pick_prompts(args.prompts, args.per_suite),
        targets=parse_targets(args.targets),
        drafters=drafters,
        max_tokens=args.max_tokens,
        sampling=sampling,
        options=options,
        work_dir=cache_dir() / "regimes",
        kernel_cache=cache_dir(),
        draft=args.draft,
        draft_without=args.draft_without,
        raw=args.raw,
        fixed=args.fixed,
        fresh=args.fresh,
        cold=args.cold,
        playback=args.playback,
        batch_scale=args.batch_scale,
        samples=args.samples,
    )
    report = run_regimes(regime_args, log)
    if args.playback:
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "playback.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(json.dumps(report, indent=1) if args.json else playback_text(report))
        return 0
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
