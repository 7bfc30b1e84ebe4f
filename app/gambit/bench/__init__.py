"""Benchmarks and Measure on my chats: everything that times speculation.

The front of the package: the window, the worker and the command line import
these names from here, never a module inside.

- ``runner``: ``gambit-cli bench`` on a prompts file, every mode side by side;
- ``regimes``: ``--regimes``, toy and cost-scaled targets derived from one
  model (``targets``), the cost-model bound (``costs``), round parts timed
  mid-reply (``parts``) and the tables (``regimes_report``); with
  ``--playback``, the policies played on recorded replies, no clock
  (``playback``; ``--playback-from`` plays a recording again);
- ``measure``, ``measure_history``, ``measure_report``: Measure on my chats,
  replaying the user's own turns, and its recommendation;
- ``served``: ``--through-server``, the local server's cost per token;
- ``reuse``: ``--reuse``, what prompt lookup's memory of earlier chats is worth;
- ``load``: ``--load``, automatic threads against each fixed count under a
  background load;
- ``structured``: ``--structured``, replies constrained to a JSON schema, the
  grammar drafting what it forces.
"""

import argparse

from gambit.bench.load import run_load_cli
from gambit.bench.measure import (
    DRAFTER_LABELS,
    MeasurementCancelledError,
    MeasureProgress,
    replays_per_turn,
)
from gambit.bench.measure_history import (
    MeasureOutcome,
    MeasureRequest,
    measure_history,
    run_history_cli,
)
from gambit.bench.measure_report import PAYS_FROM, report_csv
from gambit.bench.playback import run_playback_cli
from gambit.bench.regimes import DEFAULT_TARGETS as REGIME_TARGETS
from gambit.bench.regimes import DRAFTERS as REGIME_DRAFTERS
from gambit.bench.regimes import run_regimes_cli
from gambit.bench.reuse import run_reuse_cli
from gambit.bench.runner import TARGET_ONLY, run_bench
from gambit.bench.structured import run_structured_cli
from gambit.engine.session import EngineConfig
from gambit.engine.verification.sampling import SamplingParams


def run_served_bench(
    args: argparse.Namespace, config: EngineConfig, sampling: SamplingParams
) -> int:
    """``gambit.bench.served``, imported here: the web stack loads only for it."""
    from gambit.bench.served import run_served_bench as run

    return run(args, config, sampling)


__all__ = [
    "DRAFTER_LABELS",
    "PAYS_FROM",
    "REGIME_DRAFTERS",
    "REGIME_TARGETS",
    "TARGET_ONLY",
    "MeasureOutcome",
    "MeasureProgress",
    "MeasureRequest",
    "MeasurementCancelledError",
    "measure_history",
    "replays_per_turn",
    "report_csv",
    "run_bench",
    "run_history_cli",
    "run_load_cli",
    "run_playback_cli",
    "run_regimes_cli",
    "run_reuse_cli",
    "run_served_bench",
    "run_structured_cli",
]
