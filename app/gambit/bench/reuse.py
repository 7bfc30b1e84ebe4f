"""``gambit-cli bench --reuse``: what prompt lookup's memory of earlier chats is worth.

The suite (``resources/prompts/reuse.jsonl``) is a user's history in order:
each line holds requests made in earlier chats (``earlier``) and a new one
(``prompt``) that reuses their material: the same request again, a sibling
of it (a CSV reader that now skips empty rows), the same format for another
subject. The replay fills the memory as the window does, with what the
chats stored: the earlier requests and the replies the target gave them,
then, after each new request is measured, that request and its reply too.
The reply being measured is never in the memory while it is generated.

Each new request runs target-only, with lookup on the current conversation
alone, and with lookup and the memory, in a rotating order; greedy replies
are compared token for token (lossless), and the memory's gain is the
per-prompt ratio of the two lookup rates with its 95 % interval.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gambit.bench.paired import paired_ratio
from gambit.bench.runner import json_lines, run_once
from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.drafters.registry import COPYING_DRAFTERS
from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.session import Engine, EngineConfig
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError, OperationCancelledError
from gambit.words import counted

TARGET_ONLY, LOOKUP, MEMORY = "target only", "lookup", "lookup + memory"
MODES = (TARGET_ONLY, LOOKUP, MEMORY)
HISTORY_SOURCE = "earlier chats"  # (PromptLookupDrafter.HISTORY_SOURCE: Round.drafted_by)


@dataclass(frozen=True)
class ReuseScenario:
    earlier: tuple[str, ...]  # requests of earlier chats, in order
    prompt: str  # the new request


def load_scenarios(path: Path) -> list[ReuseScenario]:
    """The suite's lines, ``{"earlier": [...], "prompt": ...}``; a GambitError
    naming the line for anything else."""
    return json_lines(
        path,
        lambda obj: ReuseScenario(
            tuple(str(text) for text in obj.get("earlier", ())), str(obj["prompt"])
        ),
        '{"earlier": [...], "prompt": ...}',
        "scenarios",
    )


@dataclass
class ModeRecord:
    stats: GenerationStats = field(default_factory=GenerationStats)
    rates: list[float] = field(default_factory=list)  # per new request, tokens/s


@dataclass
class _Memory:
    """The memory as the window would hold it: every stored message a document."""

    engine: Engine
    index: HistoryIndex = field(default_factory=HistoryIndex)
    next_id: int = 0

    def store(self, text: str) -> None:
        self.index.add(self.next_id, self.engine.tokenize_text(text), len(text))
        self.next_id += 1


def run_reuse(
    engine: Engine,
    scenarios: Sequence[ReuseScenario],
    config: GenerationConfig,
    say: Callable[[str], None],
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Replay ``scenarios`` on ``engine`` (a drafter that copies text); the report."""
    if engine.config.drafter not in COPYING_DRAFTERS:
        raise GambitError("--reuse needs prompt lookup: --lookup, or --draft FILE --lookup")
    memory = _Memory(engine)
    controllers = {mode: engine.new_controller("adaptive") for mode in (LOOKUP, MEMORY)}
    records = {mode: ModeRecord() for mode in MODES}
    diverged: list[int] = []
    for i, scenario in enumerate(scenarios):
        for text in scenario.earlier:  # (their replies: the target's own, greedy)
            _check(cancel)
            _, tokens = run_once(engine, text, config, None)
            memory.store(text)
            memory.store(_text(engine, tokens))
        replies: dict[str, list[int]] = {}
        order = MODES[i % 3 :] + MODES[: i % 3]  # rotated: no mode always runs first
        for mode in order:
            _check(cancel)
            engine.set_history(memory.index if mode == MEMORY else None)
            controller = controllers.get(mode)
            stats, replies[mode] = run_once(engine, scenario.prompt, config, controller)
            records[mode].stats.merge(stats)
            records[mode].rates.append(stats.tokens_per_s)
        engine.set_history(None)
        if len({tuple(tokens) for tokens in replies.values()}) > 1:
            diverged.append(i)
        memory.store(scenario.prompt)
        memory.store(_text(engine, replies[TARGET_ONLY]))
        rates = "  ".join(f"{m} {records[m].rates[-1]:5.1f}" for m in MODES)
        from_memory = records[MEMORY].stats.accepted_by_drafter.get(HISTORY_SOURCE, 0)
        say(f"[{i + 1}/{len(scenarios)}] tok/s: {rates}  (accepted from memory: {from_memory})")
    return _report(engine, records, diverged, len(scenarios), memory.index)


def _text(engine: Engine, tokens: list[int]) -> str:
    """A reply as the window stores it: its text (end-of-generation tokens left out)."""
    return engine.target.detokenize([t for t in tokens if not engine.target.is_eog(t)])


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise OperationCancelledError("the reuse bench was stopped")


def _report(
    engine: Engine,
    records: dict[str, ModeRecord],
    diverged: list[int],
    n: int,
    index: HistoryIndex,
) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for mode, record in records.items():
        s = record.stats
        modes[mode] = {
            "tokens": s.n_tokens,
            "tokens_per_s_geomean": _geomean(record.rates),
            "acceptance_rate": s.acceptance_rate,
            "accepted": s.n_accepted,
            "accepted_by_drafter": dict(s.accepted_by_drafter),
        }
    base = records[TARGET_ONLY].rates

    def ratio(mode: str, over: Sequence[float]) -> tuple[float, float, float] | None:
        return paired_ratio(list(zip(over, records[mode].rates, strict=True)))

    return {
        "target": engine.config.target.name,
        "drafter": engine.config.drafter,
        "scenarios": n,
        "diverged": diverged,  # new requests whose greedy replies differed between modes
        # (they may only where the target's kernels are not batch-invariant)
        "kernels": engine.target_kernels.describe(),
        "memory_tokens": len(index),
        "memory_bytes": index.nbytes,
        "modes": modes,
        "lookup_speedup": ratio(LOOKUP, base),
        "memory_speedup": ratio(MEMORY, base),
        "memory_over_lookup": ratio(MEMORY, records[LOOKUP].rates),
    }


def _geomean(values: Sequence[float]) -> float:
    usable = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, usable)) / len(usable)) if usable else 0.0


def format_report(report: dict[str, Any]) -> str:
    def interval(r: tuple[float, float, float] | None) -> str:
        return "—" if r is None else f"{r[0]:.2f}x ({r[1]:.2f}-{r[2]:.2f})"

    lines = [
        f"{report['target']} · {report['drafter']} · {counted(report['scenarios'], 'new request')}"
        f" · memory {report['memory_tokens']} tokens, {report['memory_bytes'] / 2**20:.1f} MB",
        f"{'mode':<16} {'tok/s':>7} {'accepted':>9} {'acceptance':>10}  by source",
    ]
    for mode, f in report["modes"].items():
        sources = ", ".join(f"{n} {name}" for name, n in sorted(f["accepted_by_drafter"].items()))
        lines.append(
            f"{mode:<16} {f['tokens_per_s_geomean']:7.1f} {f['accepted']:9d}"
            f" {f['acceptance_rate']:10.0%}  {sources}"
        )
    lines.append(f"lookup vs target only:          {interval(report['lookup_speedup'])}")
    lines.append(f"lookup + memory vs target only: {interval(report['memory_speedup'])}")
    lines.append(f"memory's gain over lookup:      {interval(report['memory_over_lookup'])}")
    diverged = report["diverged"]
    lines.append(
        "greedy replies identical in every mode"
        if not diverged
        else f"greedy replies differed on {len(diverged)} of {report['scenarios']} requests"
        f" ({', '.join(str(i + 1) for i in diverged)}); target kernels: {report['kernels']}"
    )
    return "\n".join(lines)


def run_reuse_cli(
    args: argparse.Namespace,
    config: EngineConfig,
    sampling: SamplingParams,
    suite: Path,
    cancel: threading.Event,
) -> int:
    """``gambit-cli bench --reuse``: load, replay ``suite``, print the table (or
    JSON); ``cancel`` stops it between replies."""
    scenarios = load_scenarios(suite)
    if args.limit > 0:
        scenarios = scenarios[: args.limit]
    if config.drafter not in COPYING_DRAFTERS:
        raise GambitError("--reuse needs prompt lookup: --lookup, or --draft FILE --lookup")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    engine = Engine(config, say)
    try:
        reply = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling)
        report = run_reuse(engine, scenarios, reply, say, cancel)
    finally:
        engine.close()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
