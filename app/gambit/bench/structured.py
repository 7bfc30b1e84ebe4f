"""``gambit-cli bench --structured``: replies constrained to a JSON schema
(extraction, a tool call, a list), target-only and with every way of drafting
them, side by side in one run.

Rows, per prompt, in an order that rotates from prompt to prompt so that
drift hits all alike:

- ``free``: target-only, unconstrained (what the grammar's mask costs is
  ``constrained`` ÷ this, per token);
- ``constrained``: target-only with the schema's grammar, every token a
  target pass: the baseline the others are measured against;
- ``grammar``: the tokens the grammar forces drafted free (a second engine
  with no drafter, as a user without one has);
- ``<drafter> alone``: the loaded drafter (adaptive), the grammar masking but
  not drafting;
- ``grammar + <drafter>``: both, the drafter going on where a forced stretch
  ends, in the same round.

Each drafting row keeps its own adaptive controller across the prompts, as
the app does. Every constrained reply must parse as JSON (the grammar keeps
it to the schema); one that does not is reported, and a reply cut at
``--max-tokens`` is counted apart, as cut.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gambit.bench.runner import json_lines, run_once
from gambit.engine.gamma.metrics import GenerationStats
from gambit.engine.session import Engine, EngineConfig, GammaController
from gambit.engine.text.grammar import json_schema_grammar
from gambit.engine.text.reply import GRAMMAR_SOURCE, GenerationConfig, Round, StopReason
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import OperationCancelledError

FREE, CONSTRAINED, GRAMMAR = "free", "constrained", "grammar"


@dataclass(frozen=True)
class ShapedPrompt:
    """A prompt and the JSON schema its reply must follow."""

    prompt: str
    suite: str
    schema: dict[str, Any]
    grammar: str


def load_shaped_prompts(path: Path) -> list[ShapedPrompt]:
    """JSON Lines of ``{"prompt", "suite", "schema"}``; a schema the grammar
    library refuses is named by its line."""
    return json_lines(path, _shaped, 'a JSON object with "prompt" and a usable "schema"')


def _shaped(obj: dict[str, Any]) -> ShapedPrompt:
    schema = obj["schema"]
    suite = str(obj.get("suite", "default"))
    return ShapedPrompt(str(obj["prompt"]), suite, schema, json_schema_grammar(schema))


@dataclass
class Row:
    """One way of decoding, over the prompts."""

    stats: GenerationStats = field(default_factory=GenerationStats)
    per_prompt: list[float] = field(default_factory=list)  # tokens/s, in prompt order
    forced: int = 0  # tokens the grammar drafted (all accepted)
    invalid: int = 0  # constrained replies that do not parse as JSON
    cut: int = 0  # constrained replies cut at the length limit


@dataclass
class _Way:
    """How a row decodes: on which engine, speculating or not, with which
    controller, the grammar drafting or not, constrained or not."""

    engine: Engine
    controller: GammaController | None
    grammar_drafts: bool = True
    constrained: bool = True


def run_structured_bench(
    engine: Engine,
    grammar_engine: Engine,
    prompts: list[ShapedPrompt],
    config: GenerationConfig,
    *,
    raw: bool = False,
    cancel: threading.Event | None = None,
) -> dict[str, Row]:
    """Every prompt under every row (``engine`` has the drafter, or none;
    ``grammar_engine`` has none: ``engine`` itself where it has none either)."""
    ways = {
        FREE: _Way(engine, None, constrained=False),
        CONSTRAINED: _Way(engine, None),
        GRAMMAR: _Way(grammar_engine, grammar_engine.new_controller("adaptive")),
    }
    if engine.drafter is not None:
        name = engine.drafter.name
        ways[f"{name} alone"] = _Way(engine, engine.new_controller("adaptive"), False)
        ways[f"{GRAMMAR} + {name}"] = _Way(engine, engine.new_controller("adaptive"))
    rows = {name: Row() for name in ways}
    names = list(ways)
    for i, shaped in enumerate(prompts):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            if cancel is not None and cancel.is_set():
                raise OperationCancelledError("the benchmark was stopped")
            way, row = ways[name], rows[name]
            grammar = shaped.grammar if way.constrained else None
            rounds: list[Round] = []
            with _grammar_drafts(way.engine, way.grammar_drafts):
                stats, _ = run_once(
                    way.engine, shaped.prompt, dataclasses.replace(config, grammar=grammar),
                    way.controller, rounds, raw=raw,
                )  # fmt: skip
            row.stats.merge(stats)
            row.per_prompt.append(stats.tokens_per_s)
            row.forced += stats.accepted_by_drafter.get(GRAMMAR_SOURCE, 0)
            if way.constrained:
                _check(row, rounds)
    return rows


@contextmanager
def _grammar_drafts(engine: Engine, on: bool) -> Iterator[None]:
    engine.decoder.grammar_drafts = on
    try:
        yield
    finally:
        engine.decoder.grammar_drafts = True


def _check(row: Row, rounds: list[Round]) -> None:
    if rounds and rounds[-1].stop is StopReason.MAX_TOKENS:
        row.cut += 1
        return
    try:
        json.loads("".join(r.text for r in rounds))
    except ValueError:
        row.invalid += 1


def report(rows: dict[str, Row], prompts: list[ShapedPrompt]) -> dict[str, Any]:
    """Per row: its rate, its speedup over ``constrained`` (over the suite,
    and per prompt), the share of its tokens the grammar drafted; and what
    the mask costs; and, with a drafter, both ÷ the drafter alone."""
    base = rows[CONSTRAINED]
    out: dict[str, Any] = {"rows": {}}
    for name, row in rows.items():
        labels = [f"{p.suite} #{i + 1}" for i, p in enumerate(prompts)]
        per_prompt = [
            r / b if b > 0 else None for r, b in zip(row.per_prompt, base.per_prompt, strict=True)
        ]
        shown = [p for p in per_prompt if p is not None]
        rate, base_rate = row.stats.tokens_per_s, base.stats.tokens_per_s
        out["rows"][name] = {
            "tokens_per_s": rate,
            "over_constrained": rate / base_rate if base_rate > 0 else None,
            "per_prompt": dict(zip(labels, per_prompt, strict=True)),
            "worst_prompt": min(shown) if shown else None,
            "forced_share": row.forced / row.stats.n_tokens if row.stats.n_tokens else 0.0,
            "invalid": row.invalid,
            "cut": row.cut,
        }  # fmt: skip
    free = rows[FREE].stats.tokens_per_s
    out["mask_cost"] = 1 - base.stats.tokens_per_s / free if free > 0 else None
    both = [n for n in rows if n.startswith(f"{GRAMMAR} + ")]
    if both:
        alone = rows[both[0].removeprefix(f"{GRAMMAR} + ") + " alone"]
        pairs = zip(rows[both[0]].per_prompt, alone.per_prompt, strict=True)
        per = [b / a for b, a in pairs if a > 0]
        rate = alone.stats.tokens_per_s
        out["both_over_drafter_alone"] = rows[both[0]].stats.tokens_per_s / rate if rate else None
        out["both_over_drafter_alone_worst_prompt"] = min(per) if per else None
    return out


def format_report(summary: dict[str, Any]) -> str:
    width = max(len(name) for name in summary["rows"])  # (a drafter's name may be long)
    lines = [f"{'row':<{width}} {'tok/s':>7} {'÷ constrained':>14} {'worst prompt':>13} "
             f"{'forced':>7}  replies"]  # fmt: skip
    for name, row in summary["rows"].items():
        ratio, worst = row["over_constrained"], row["worst_prompt"]
        replies = "" if name == FREE else _replies_word(row)
        lines.append(
            f"{name:<{width}} {row['tokens_per_s']:7.1f} "
            f"{_x(ratio):>14} {_x(worst):>13} {row['forced_share']:7.0%}  {replies}"
        )
    mask = summary["mask_cost"]
    if mask is not None:
        lines.append(f"the grammar's mask: constrained decoding {mask:+.1%} slower than free")
    if "both_over_drafter_alone" in summary:
        both, worst = (
            summary["both_over_drafter_alone"],
            summary["both_over_drafter_alone_worst_prompt"],
        )
        lines.append(f"grammar + drafter ÷ drafter alone: {_x(both)} (worst prompt {_x(worst)})")
    lines.append("per prompt, ÷ constrained:")
    for name, row in summary["rows"].items():
        cells = ", ".join(f"{k} {_x(v)}" for k, v in row["per_prompt"].items())
        lines.append(f"  {name}: {cells}")
    return "\n".join(lines)


def _replies_word(row: dict[str, Any]) -> str:
    bad = [f"{row['invalid']} not JSON"] if row["invalid"] else []
    bad += [f"{row['cut']} cut at the length limit"] if row["cut"] else []
    return ", ".join(bad) if bad else "all JSON"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def run_structured_cli(
    args: argparse.Namespace,
    config: EngineConfig,
    sampling: SamplingParams,
    suite: Path,
    cancel: threading.Event,
) -> int:
    prompts = load_shaped_prompts(suite)
    if args.limit:
        prompts = prompts[: args.limit]
    gen = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling)
    with contextlib.ExitStack() as stack:
        engine = Engine(config)
        stack.callback(engine.close)
        grammar_engine = engine  # (without a drafter, the one engine serves every row)
        if engine.drafter is not None:
            grammar_engine = Engine(dataclasses.replace(config, drafter="none", draft=None))
            stack.callback(grammar_engine.close)
        rows = run_structured_bench(
            engine, grammar_engine, prompts, gen, raw=args.raw, cancel=cancel
        )
    summary = report(rows, prompts)
    print(json.dumps(summary, indent=1) if args.json else format_report(summary))
    return 0
