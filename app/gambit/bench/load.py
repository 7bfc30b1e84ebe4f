"""``gambit-cli bench --load``: every prompt under a reproducible background
load, with the thread count automatic and at each fixed count, target-only
and speculative, side by side in one run.

A load is a child process that keeps one core busy for a share of every
10 ms (``busy``: all of it; ``duty=50``: half); ``none`` runs nothing. Within
a load, each prompt runs under every thread setting and mode in turn (the
order rotating per prompt), so drift hits all alike. The report gives, per
load and mode, each setting's rate over the suite, automatic over the best
fixed count (over the suite, and on the prompt where it did worst), and, for
replies that drafted, the speedup the app would show over the one measured
here (the same prompt target-only at the same setting and load).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gambit.bench.runner import TARGET_ONLY, load_prompts, run_once
from gambit.engine.gamma.metrics import GenerationStats, withheld_because
from gambit.engine.machine.threads import default_threads, load_sampler
from gambit.engine.session import Engine, EngineConfig, GammaController
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError, OperationCancelledError

PERIOD_S = 0.01  # a duty-cycled load spins this share of every period
SETTLE_S = 1.5  # after a load starts or ends: the automatic count has followed it by then
AUTO = "auto"
_SPIN = (
    "import sys, time\n"
    "duty, period = float(sys.argv[1]), float(sys.argv[2])\n"
    "while True:\n"
    "    t = time.perf_counter()\n"
    "    while time.perf_counter() - t < duty * period:\n"
    "        pass\n"
    "    if duty < 1:\n"
    "        time.sleep(period * (1 - duty))\n"
)


@dataclass(frozen=True)
class Load:
    """A background load: one core busy ``duty`` of the time (0: none)."""

    name: str
    duty: float

    def start(self) -> subprocess.Popen[bytes] | None:
        if self.duty <= 0:
            return None
        command = [sys.executable, "-c", _SPIN, str(self.duty), str(PERIOD_S)]
        return subprocess.Popen(command, stdin=subprocess.DEVNULL)


def parse_loads(text: str) -> list[Load]:
    """ "none,busy,duty=25" -> the loads, in order."""
    loads = []
    for name in (part.strip() for part in text.split(",")):
        if name == "none":
            loads.append(Load(name, 0.0))
        elif name == "busy":
            loads.append(Load(name, 1.0))
        elif name.startswith("duty="):
            try:
                share = int(name.removeprefix("duty="))
            except ValueError:
                share = -1
            if not 1 <= share <= 99:
                raise GambitError(f"--load {name}: the duty is a whole per cent, 1 to 99")
            loads.append(Load(name, share / 100))
        else:
            raise GambitError(f"unknown load {name!r}: use none, busy or duty=N (per cent)")
    return loads


@dataclass
class Cell:
    """One setting and mode under one load, over the prompts."""

    stats: GenerationStats
    per_prompt: dict[int, float]  # prompt index -> tokens/s
    shown_over_measured: list[float]  # speedups the app would show / measured here
    withheld: int = 0  # replies that drafted whose speedup would not be shown
    threads: set[int] = field(default_factory=set)  # the counts its rounds ran on

    @property
    def rate(self) -> float:
        return self.stats.tokens_per_s


def run_load_bench(
    engine: Engine,
    prompts: list[str],
    loads: list[Load],
    config: GenerationConfig,
    *,
    raw: bool = False,
    repeat: int = 1,
    cancel: threading.Event | None = None,
) -> dict[str, dict[tuple[str, str], Cell]]:
    """Every prompt under every load, thread setting and mode: the cells by
    load name, then (setting, mode)."""
    settings = [AUTO, *map(str, range(1, default_threads() + 1))]
    modes = [TARGET_ONLY] + (["adaptive"] if engine.drafter is not None else [])
    load_sampler().start()  # (the automatic count reads from now on)
    results: dict[str, dict[tuple[str, str], Cell]] = {}
    for load in loads:
        controllers: dict[str, GammaController] = {
            s: engine.new_controller("adaptive") for s in settings
        }
        cells = {
            (s, m): Cell(GenerationStats(), defaultdict(float), []) for s in settings for m in modes
        }
        process = load.start()
        try:
            # (quiet too: the automatic count follows this load, not the one before,
            # a phase's or another program's that just ended)
            time.sleep(SETTLE_S)
            for i, prompt in enumerate(prompts * repeat):
                turns = [(s, m) for s in settings for m in modes]
                k = i % len(turns)
                replies: dict[tuple[str, str], GenerationStats] = {}
                shown: dict[tuple[str, str], float] = {}  # the baseline the app would show
                for setting, mode in turns[k:] + turns[:k]:
                    if cancel is not None and cancel.is_set():
                        raise OperationCancelledError("the benchmark was stopped")
                    engine.threads.pin(0 if setting == AUTO else int(setting))
                    controller = controllers[setting] if mode != TARGET_ONLY else None
                    stats, _ = run_once(engine, prompt, config, controller, raw=raw)
                    replies[(setting, mode)] = stats
                    cell = cells[(setting, mode)]
                    cell.stats.merge(stats)
                    cell.threads.update(stats.thread_counts)
                    cell.per_prompt[i % len(prompts)] += stats.tokens_per_s / repeat
                    baseline = engine.baseline_tokens_per_s
                    if stats.n_drafted and withheld_because(
                        stats, engine.threads.current, baseline
                    ):
                        cell.withheld += 1
                    elif stats.n_drafted:
                        shown[(setting, mode)] = baseline
                for (setting, mode), baseline in shown.items():
                    # the app's speedup / this reply's rate over target-only's here
                    plain = replies[(setting, TARGET_ONLY)].tokens_per_s
                    cells[(setting, mode)].shown_over_measured.append(plain / baseline)
        finally:
            if process is not None:
                process.kill()
                process.wait()
            engine.threads.pin(0)
        results[load.name] = cells
    return results


def report(results: dict[str, dict[tuple[str, str], Cell]]) -> dict[str, Any]:
    """Per load and mode: each setting's rate, auto over the best fixed count
    (suite and worst prompt), and the shown speedup over the measured one."""
    out: dict[str, Any] = {}
    for load, cells in results.items():
        modes = sorted({m for _, m in cells}, key=lambda m: m != TARGET_ONLY)
        fixed = sorted({s for s, _ in cells if s != AUTO}, key=int)
        rows = {}
        for mode in modes:
            rates = {s: cells[(s, mode)].rate for s in [AUTO, *fixed]}
            best = max(fixed, key=lambda s: rates[s])
            auto = cells[(AUTO, mode)]
            per_prompt = [
                auto.per_prompt[i] / max(cells[(s, mode)].per_prompt[i] for s in fixed)
                for i in auto.per_prompt
                if max(cells[(s, mode)].per_prompt[i] for s in fixed) > 0
            ]
            shown = auto.shown_over_measured
            rows[mode] = {
                "tokens_per_s": rates,
                "auto_threads": sorted(auto.threads),
                "best_fixed": best,
                "auto_over_best": rates[AUTO] / rates[best] if rates[best] > 0 else None,
                "auto_over_best_worst_prompt": min(per_prompt) if per_prompt else None,
                "shown_over_measured": (
                    [min(shown), max(shown)] if shown and mode != TARGET_ONLY else None
                ),
                "speedup_withheld": auto.withheld if mode != TARGET_ONLY else None,
            }
        out[load] = rows
    return out


def format_report(summary: dict[str, Any]) -> str:
    lines = []
    for load, rows in summary.items():
        lines.append(f"load: {load}")
        for mode, row in rows.items():
            rates = "  ".join(
                f"{s}{'' if s == AUTO else ' thr'} {r:6.1f}" for s, r in row["tokens_per_s"].items()
            )
            ratio = row["auto_over_best"]
            worst = row["auto_over_best_worst_prompt"]
            used = "/".join(map(str, row["auto_threads"]))
            text = f"  {mode:<12} {rates} tok/s (auto on {used}) | "
            text += f"auto/best fixed ({row['best_fixed']} thr) "
            text += f"{ratio:.2f}" if ratio is not None else "-"
            text += f", worst prompt {worst:.2f}" if worst is not None else ""
            shown = row["shown_over_measured"]
            if shown is not None:
                text += f" | shown/measured speedup {shown[0]:.2f}-{shown[1]:.2f}"
            if row["speedup_withheld"]:
                text += f", {row['speedup_withheld']} withheld"
            lines.append(text)
    return "\n".join(lines)


def run_load_cli(
    args: argparse.Namespace,
    config: EngineConfig,
    sampling: SamplingParams,
    cancel: threading.Event,
) -> int:
    loads = parse_loads(args.load)
    prompts = [p.prompt for p in load_prompts(args.prompts)]
    if args.limit:
        prompts = prompts[: args.limit]
    gen = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling)
    engine = Engine(config)
    try:
        results = run_load_bench(
            engine, prompts, loads, gen, raw=args.raw, repeat=max(1, args.repeat), cancel=cancel
        )
    finally:
        engine.close()
    summary = report(results)
    print(json.dumps(summary, indent=1) if args.json else format_report(summary))
    return 0
