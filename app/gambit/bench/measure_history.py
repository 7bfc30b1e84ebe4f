"""A measurement on the user's stored chats, from request to saved file: what
the window's worker and ``gambit-cli bench --from-history`` both run.

The history is only read (``storage.prompts.history_turns``, read-only SQLite); the
report goes to its own file under the data folder (``storage.measurements``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gambit.bench.measure import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_POLICIES,
    DEFAULT_SEED,
    MeasureProgress,
    Progress,
    available_drafters,
    plan,
    run_measurement,
)
from gambit.bench.runner import print_table
from gambit.engine.session import Engine, EngineConfig
from gambit.errors import GambitError
from gambit.storage import measurements
from gambit.storage.chat_store.conversations import default_store_path
from gambit.storage.prompts.history_turns import DEFAULT_LAST_TURNS, list_conversations, read_turns


@dataclass(frozen=True)
class MeasureRequest:
    """What to replay and what to compare (the window's choices, or the CLI's)."""

    db_path: Path
    drafters: tuple[str, ...]
    policies: tuple[str, ...] = DEFAULT_POLICIES
    trees: bool = False
    last: int = DEFAULT_LAST_TURNS
    conversation_ids: tuple[int, ...] | None = None  # None: every conversation
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int = DEFAULT_SEED
    system_prompt: str = ""
    save_to: Path | None = None  # folder; None: the data folder's measurements
    app_settings: dict[str, Any] | None = None  # the window's settings, kept with the report
    # Draft model files of the library to compare too, each loaded next to the
    # target for its replays (adaptive policy)
    drafts: tuple[str, ...] = ()


@dataclass(frozen=True)
class MeasureOutcome:
    """How a measurement ended: a report and its file, or an error (cancelled or not)."""

    report: dict[str, Any] | None = None
    path: Path | None = None
    error: str | None = None
    cancelled: bool = False
    worker_lost: bool = False  # a worker holding the target's layers went, and the engine


def measure_history(
    engine: Engine,
    request: MeasureRequest,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], Path]:
    """Read the turns, replay them, save the report; (report, its file).
    Raises ``GambitError`` (``MeasurementCancelledError`` when cancelled)."""
    turns = read_turns(
        request.db_path, request.last, request.conversation_ids, request.system_prompt
    )
    configs, notes = plan(engine, request.drafters, request.policies, request.trees, request.drafts)
    report = run_measurement(
        engine,
        turns,
        configs,
        max_tokens=request.max_tokens,
        seed=request.seed,
        cancel=cancel,
        progress=progress,
        notes=notes,
    )
    report["history"] = {
        "last": request.last,
        "conversations": list(request.conversation_ids) if request.conversation_ids else "all",
    }
    if request.app_settings is not None:
        report["app_settings"] = request.app_settings
    return report, measurements.save(report, request.save_to)


def _cli_policies(args: argparse.Namespace) -> tuple[str, ...]:
    """bench's --policy values as measurement policies: "fixed" is γ = --gamma;
    "off" is the target-only baseline every measurement runs anyway."""
    if not args.policy:
        return ("adaptive", f"fixed={args.gamma}")
    out = []
    for p in args.policy:
        if p == "fixed":
            out.append(f"fixed={args.gamma}")
        elif p != "off":
            out.append(p)
    return tuple(out)


def run_history_cli(args: argparse.Namespace, engine_config: Callable[[], EngineConfig]) -> int:
    """``gambit-cli bench --from-history [--last N]``: bench's table, on stored chats.
    ``engine_config`` is asked for once the history is known to hold turns (it may
    fetch the default model)."""

    def log(p: MeasureProgress) -> None:
        eta = f", about {p.eta_s:.0f} s left" if p.eta_s is not None else ""
        print(f"  [{p.done}/{p.total}] {p.line}{eta}", file=sys.stderr, flush=True)

    if args.temp != 0:
        print("bench --from-history replays greedily (temperature 0)", file=sys.stderr)
    db = default_store_path()
    if not list_conversations(db):
        raise GambitError(f"There are no user turns to replay in {db}: chat a little first.")
    engine = Engine(engine_config())
    try:
        request = MeasureRequest(
            db_path=db,
            drafters=available_drafters(engine),
            policies=_cli_policies(args),
            trees=engine.tree,
            last=args.last,
            max_tokens=args.max_tokens,
            seed=args.seed if args.seed >= 0 else DEFAULT_SEED,  # (-1: not given)
        )
        report, path = measure_history(engine, request, progress=log)
    finally:
        engine.close()
    print(f"saved to {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    print_table(report, [m["name"] for m in report["modes"]])
    print(report["regime"]["sentence"])
    rec = report["recommendation"]
    print(f"Recommendation: {rec['headline']} — {rec['reason']}.")
    for note in report["notes"]:
        print(f"note: {note}")
    return 0
