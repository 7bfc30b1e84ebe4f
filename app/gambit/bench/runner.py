"""``gambit-cli bench``: every prompt target-only and under each speculation
policy, side by side, in one run.

All modes use the same loaded models (target-only switches speculation off on
the same engine), the same seed and a cold KV cache, and rotate their order
per prompt, so that drift in the machine's speed hits all alike. Each policy
keeps its own controller across the prompts (it learns acceptance as it would
in the app). Speedups are ratios measured within the run; absolute rates vary
between runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gambit.engine.gamma.metrics import NO_FIGURE, GenerationStats, format_sources, speedup
from gambit.engine.gamma.policy import PolicyMode
from gambit.engine.machine.placement import TargetPlacement, WorkerShare, cost_curve
from gambit.engine.session import Engine, EngineConfig, GammaController
from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig, Round
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError, OperationCancelledError

TARGET_ONLY = "target-only"
T = TypeVar("T")


@dataclass(frozen=True)
class BenchPrompt:
    prompt: str
    suite: str


def json_lines(
    path: Path, read: Callable[[Any], T], expected: str, what: str = "prompts"
) -> list[T]:
    """A JSON Lines suite, each line that is not blank ``read`` into an item;
    a GambitError naming the file, and the line with what it should be
    (``expected``), for anything else."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise GambitError(f"cannot read {path}: {exc}") from exc
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(read(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # (JSON's errors too)
            raise GambitError(f"{path}:{n}: expected {expected} ({exc})") from exc
    if not items:
        raise GambitError(f"no {what} in {path}")
    return items


def load_prompts(path: Path) -> list[BenchPrompt]:
    return json_lines(
        path,
        lambda obj: BenchPrompt(str(obj["prompt"]), str(obj.get("suite", "default"))),
        'a JSON object with a "prompt" key',
    )


def parse_policy(
    spec: str, default_gamma: int, gamma_max: int, side_max: int = 0
) -> tuple[PolicyMode, int, int]:
    """ "adaptive", "off", "fixed" (γ = --gamma), "fixed=N" or, for trees,
    "fixed=N+W" (a chain of N and W side nodes). Returns (mode, γ, side nodes)."""
    if spec in ("adaptive", "off"):
        return spec, default_gamma, 0  # type: ignore[return-value]
    if spec == "fixed":
        return "fixed", default_gamma, 0
    if spec.startswith("fixed="):
        gamma_s, _, side_s = spec.removeprefix("fixed=").partition("+")
        try:
            gamma, side = int(gamma_s), int(side_s or 0)
        except ValueError:
            gamma = side = -1
        if 1 <= gamma <= gamma_max and 0 <= side <= side_max:
            return "fixed", gamma, side
    trees = f", or fixed=N+W with W <= {side_max} side nodes" if side_max else ""
    raise GambitError(
        f"unknown policy {spec!r}: use adaptive, off, fixed or fixed=N "
        f"with 1 <= N <= {gamma_max}{trees} (side nodes need --tree)"
    )


def run_once(
    engine: Engine,
    prompt: str,
    config: GenerationConfig,
    controller: GammaController | None,
    rounds: list[Round] | None = None,
    *,
    raw: bool = False,
) -> tuple[GenerationStats, list[int]]:
    """One cold-cache chat generation (``controller`` None: target only), or
    with ``raw`` a plain completion of ``prompt`` (base models); returns its
    stats and reply tokens (and its rounds, into ``rounds``)."""
    engine.target.clear()
    if engine.draft_runtime is not None:
        engine.draft_runtime.clear()
    if not raw:
        engine.chat_builder.forget()
    engine.set_speculation(controller is not None)
    if controller is not None:
        engine.use_controller(controller)
    d0 = engine.decode_seconds
    stats = GenerationStats()
    tokens: list[int] = []
    replies = (
        engine.complete(prompt, config) if raw else engine.chat([Message("user", prompt)], config)
    )
    for rnd in replies:
        stats.add(rnd)
        tokens.extend(rnd.tokens)
        if rounds is not None:
            rounds.append(rnd)
    stats.decode_s = engine.decode_seconds - d0
    # As the window and gambit-cli generate do after a reply: after one that
    # drafted, plain decoding re-timed on its context keeps the costs' t1 current.
    engine.finish_reply(stats)
    return stats, tokens


@dataclass
class ModeTotals:
    """One mode's figures over many prompts."""

    runs: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)
    gamma_sum: int = 0  # the γ each round asked for, summed over the rounds that wrote tokens
    gamma_rounds: int = 0

    def add(self, s: GenerationStats, rounds: list[Round] | None = None) -> None:
        self.runs += 1
        self.stats.merge(s)
        for rnd in rounds or ():
            if rnd.tokens:
                self.gamma_sum += rnd.gamma
                self.gamma_rounds += 1

    def figures(self) -> dict[str, Any]:
        s = self.stats
        figures: dict[str, Any] = {
            "replies": self.runs,
            "tokens": s.n_tokens,
            "tokens_per_s": s.tokens_per_s,
            # prompt processing (the drafter's too) included: what a reply takes
            "end_to_end_tokens_per_s": s.n_tokens / s.elapsed_s if s.elapsed_s else 0.0,
            "drafted_tokens": s.n_drafted,
            "accepted_tokens": s.n_accepted,
            "acceptance_rate": s.acceptance_rate,
            "mean_accepted": s.mean_accepted,
            "tokens_per_round": s.tokens_per_round,
            "side_nodes": s.n_side,
            "side_gain": s.side_gain,
            "p50_ms": s.latency_ms(50),
            "p99_ms": s.latency_ms(99),
            "ttft_ms": s.ttft_s / self.runs * 1000 if self.runs else 0.0,
            "overhead_share": s.overhead_share,
        }
        if len(s.accepted_by_drafter) > 1:  # a drafter with sources: what each supplied
            figures["accepted_by_drafter"] = dict(s.accepted_by_drafter)
        if self.gamma_rounds:  # (only where the rounds were handed in)
            figures["mean_gamma"] = self.gamma_sum / self.gamma_rounds
        return figures


def run_bench(
    args: argparse.Namespace,
    engine_config: EngineConfig,
    sampling: SamplingParams,
    cancel: threading.Event | None = None,
) -> int:
    """Run the prompts under every mode; ``cancel`` (Ctrl-C, SIGTERM) stops it
    between runs with OperationCancelledError."""
    prompts = load_prompts(args.prompts)
    if args.limit:
        prompts = prompts[: args.limit]
    if sampling.seed is None:
        sampling = SamplingParams(**{**sampling.__dict__, "seed": 1234})
    config = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling)
    engine = Engine(engine_config)
    if not engine.drafter:
        print(
            "bench: no drafter chosen (--draft, --lookup or --layer-skip), so this measures "
            "plain decoding (target only) and no speculation",
            file=sys.stderr,
        )
    policies = (args.policy or ["adaptive", "fixed", "off"]) if engine.drafter else []
    controllers: dict[str, GammaController | None] = {TARGET_ONLY: None}
    side_max = engine.config.tree_nodes - 1 if engine.tree else 0
    for spec in dict.fromkeys(policies):
        policy_mode, gamma, side = parse_policy(
            spec, engine_config.gamma, engine_config.gamma_max, side_max
        )
        if gamma + side > engine.node_max:
            raise GambitError(f"{spec}: more than {engine.node_max} draft tokens per round")
        controllers[spec] = engine.new_controller(policy_mode, gamma, side)
    modes = list(controllers)
    totals: dict[str, dict[str, ModeTotals]] = defaultdict(lambda: defaultdict(ModeTotals))
    identical = 0
    compared = 0
    runs = prompts * max(1, args.repeat)
    several_suites = len({bp.suite for bp in prompts}) > 1  # else ALL would repeat the one
    try:
        _warm_up(engine, controllers, sampling, raw=args.raw)
        for i, bp in enumerate(runs):
            outputs: dict[str, list[int]] = {}
            # rotate the order so a slow spell of the machine hits every mode
            order = modes[i % len(modes) :] + modes[: i % len(modes)]
            for mode in order:
                if cancel is not None and cancel.is_set():
                    raise OperationCancelledError("interrupted")
                rounds: list[Round] = []
                stats, tokens = run_once(
                    engine, bp.prompt, config, controllers[mode], rounds, raw=args.raw
                )
                outputs[mode] = tokens
                totals[bp.suite][mode].add(stats, rounds)
                if several_suites:
                    totals["ALL"][mode].add(stats, rounds)
                print(  # on stderr, with --json too: stdout holds only the report
                    f"  [{i + 1}/{len(runs)}] {bp.suite:<10} {mode:<12} "
                    f"{stats.n_tokens:4d} tok {stats.tokens_per_s:7.1f} tok/s "
                    f"acc {stats.acceptance_rate:5.0%}",
                    file=sys.stderr,
                )
            if len(modes) > 1 and sampling.greedy:
                compared += len(modes) - 1
                identical += sum(outputs[TARGET_ONLY] == outputs[m] for m in modes[1:])
    finally:
        engine.close()

    report = _report(totals, modes, engine_config, sampling, args)
    report.update(_engine_facts(engine))
    if compared:
        report["identical_outputs"] = f"{identical}/{compared}"
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report, modes)
    return 0


def _warm_up(
    engine: Engine,
    controllers: dict[str, GammaController | None],
    sampling: SamplingParams,
    *,
    raw: bool,
) -> None:
    """A short reply per mode: first decodes pay for graph set-up and page faults."""
    warm_up = GenerationConfig(max_tokens=8, sampling=sampling)
    for controller in controllers.values():
        fresh = engine.new_controller("fixed") if controller else None
        run_once(engine, "Hello", warm_up, fresh, raw=raw)


def _report(
    totals: dict[str, dict[str, ModeTotals]],
    modes: list[str],
    cfg: EngineConfig,
    sampling: SamplingParams,
    args: argparse.Namespace,
) -> dict[str, Any]:
    suites: dict[str, Any] = {}
    for suite, by_mode in totals.items():
        base = by_mode[TARGET_ONLY].figures()["tokens_per_s"]
        suites[suite] = {}
        for mode in modes:
            fig = by_mode[mode].figures()
            fig["speedup"] = _speedup(mode, by_mode[mode].stats, base)
            suites[suite][mode] = fig
    return {
        "target": str(cfg.target),
        "draft": str(cfg.draft) if cfg.draft else None,
        "drafter": cfg.drafter,
        "gamma": cfg.gamma,
        "tree_nodes": cfg.tree_nodes if cfg.tree else None,
        "temperature": sampling.temperature,
        "seed": sampling.seed,
        "max_tokens": args.max_tokens,
        "threads": cfg.target_options.n_threads or None,
        "suites": suites,
    }


def _engine_facts(engine: Engine) -> dict[str, Any]:
    """The drafter's name; where the target ran (with --rpc) and what a pass of
    k tokens cost there: the calibration's t(1) and t(k)/t(1), the figures
    speculation's bet rests on (a link makes t(1) long and the ratio small)."""
    curve = cost_curve(engine.costs)
    return {
        "drafter_name": engine.drafter.name if engine.drafter else None,
        "placement": engine.placement.as_dict() if engine.placement else None,
        "cost_curve": (
            {"t1_ms": engine.costs.t1 * 1e3, "ratio": {str(k): r for k, r in curve.items()}}
            if curve
            else None
        ),
    }


def _speedup(mode: str, stats: GenerationStats, base: float) -> float:
    """A mode's speedup as ``gambit.engine.gamma.metrics`` defines it, against the
    target-only runs of the same prompts: 1.0 for target-only itself and for a
    mode that drafted nothing (it did the target-only work), else measured."""
    if mode == TARGET_ONLY or not stats.n_drafted:
        return 1.0
    return speedup(stats.tokens_per_s, base, stats.n_drafted) or 0.0


def _placement_line(placement: dict[str, Any]) -> str:
    """The report's placement as ``TargetPlacement.describe`` says it."""
    workers = tuple(
        WorkerShare(w["endpoint"], w["layers"], w["free_bytes"], w["rtt_ms"] / 1e3)
        for w in placement["workers"]
    )
    return TargetPlacement(placement["local_layers"], workers).describe()


def _side(f: dict[str, float]) -> str:
    """Draft tokens won by side nodes / side nodes sent ("-" for chains)."""
    return f"{int(f['side_gain'])}/{int(f['side_nodes'])}" if f["side_nodes"] else "-"


def _times(speedup: float | None) -> str:
    """A speedup in the table's column, "—" where there is no claim to make."""
    return f"{speedup:6.2f}x" if speedup is not None else f"{NO_FIGURE:>7}"


def print_table(report: dict[str, Any], modes: list[str]) -> None:
    print(
        "tok/rnd: reply tokens per target pass; side+: draft tokens accepted thanks to "
        "tree side nodes / side nodes verified"
    )
    print(
        f"target {report['target']}  drafter {report['drafter']}"
        + (f" ({report['draft']})" if report["draft"] else "")
        + f"  gamma {report['gamma']}  temp {report['temperature']}  seed {report['seed']}"
    )
    if report.get("placement"):
        print(_placement_line(report["placement"]))
    if report.get("cost_curve"):
        curve = report["cost_curve"]
        ratios = "  ".join(f"t({k})/t(1) {r:.2f}" for k, r in curve["ratio"].items() if k != "1")
        print(f"target pass: t(1) {curve['t1_ms']:.1f} ms  {ratios}".rstrip())
    w = max(14, *(len(m) for m in modes))  # history modes: "tree lookup adaptive"
    header = (
        f"{'suite':<10} {'mode':<{w}} {'tok/s':>7} {'speedup':>7} {'accept':>7} "
        f"{'acc/rnd':>7} {'tok/rnd':>7} {'p50 ms':>7} {'p99 ms':>7} {'ttft ms':>7} "
        f"{'py ovh':>6} {'side+':>6}"
    )
    print(header)
    print("-" * len(header))
    suites = sorted(k for k in report["suites"] if k != "ALL")
    suites += ["ALL"] if "ALL" in report["suites"] else []
    for suite in suites:
        for mode in modes:
            f = report["suites"][suite][mode]
            print(
                f"{suite:<10} {mode:<{w}} {f['tokens_per_s']:7.1f} {_times(f['speedup'])} "
                f"{f['acceptance_rate']:7.1%} {f['mean_accepted']:7.2f} "
                f"{f['tokens_per_round']:7.2f} {f['p50_ms']:7.1f} {f['p99_ms']:7.1f} "
                f"{f['ttft_ms']:7.0f} {f['overhead_share']:6.1%} "
                f"{_side(f):>6}"
            )
    for suite in suites:
        for mode in modes:
            f = report["suites"][suite][mode]
            if f.get("accepted_by_drafter"):
                print(f"{suite:<10} {mode:<{w}} accepted{format_sources(f['accepted_by_drafter'])}")
    if "identical_outputs" in report:
        print(
            f"greedy outputs identical with and without speculation: {report['identical_outputs']}"
        )
