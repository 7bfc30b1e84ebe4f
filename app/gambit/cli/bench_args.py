"""``gambit-cli bench --regimes``'s arguments (``gambit.cli.main`` builds the
rest of the bench's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gambit.bench import REGIME_DRAFTERS, REGIME_TARGETS
from gambit.engine.gamma.policy import DEFAULT_GAMMA_MAX


def add_regimes_args(bench: argparse.ArgumentParser) -> None:
    regimes = bench.add_argument_group(
        "regimes",
        "--regimes derives targets from the model (--target, default: the embedded one), "
        "which also serves as the draft: cost-scaled ones (F32x4: four times the blocks, "
        "the added ones with zero outputs, so a draft step costs about a tenth of a target "
        "step, as with real pairs) and re-quantized ones (F16, F32, Q8_0); it runs each "
        "with each drafter under target-only, adaptive and fixed γ 1-8 (up to 16 and trees "
        "on the scaled ones) (docs/performance.md)",
    )
    regimes.add_argument(
        "--regimes", action="store_true", help="the compute- and bandwidth-bound benchmark"
    )
    regimes.add_argument(
        "--targets",
        default=REGIME_TARGETS,
        help=f"target types, F16/F32/Q8_0, xN to scale (default {REGIME_TARGETS})",
    )
    regimes.add_argument(
        "--drafters",
        default=",".join(REGIME_DRAFTERS),
        help=f"drafters to compare (default {','.join(REGIME_DRAFTERS)})",
    )
    regimes.add_argument(
        "--per-suite", type=int, default=4, help="prompts per suite (default 4; 0: all)"
    )
    regimes.add_argument(
        "--fixed",
        type=_gamma_list,
        default=None,
        metavar="N[,N]|none",
        help="the fixed γs to compare with adaptive (default: 1,2,4,8, up to 16 on cost-scaled "
        "targets; none: adaptive against target-only alone)",
    )
    regimes.add_argument(
        "--fresh",
        action="store_true",
        help="start each prompt's adaptive run anew, as a new process's first reply does: "
        "from the calibration and what earlier sessions kept of the pair (default: it "
        "learns across the prompts)",
    )
    regimes.add_argument(
        "--cold",
        action="store_true",
        help="start adaptive runs from nothing learned of the pair, as its first session "
        "ever does (default: from what earlier sessions kept, as the app does)",
    )
    regimes.add_argument(
        "--draft-without",
        type=_block_list,
        default=(),
        metavar="N[,N]",
        help="a weaker draft of the same tokenizer: the draft (--draft, default the model "
        "itself) with these blocks left out (e.g. 15, a middle block of SmolLM2's 30)",
    )
    regimes.add_argument(
        "--samples",
        type=_sample_count,
        default=1,
        metavar="N",
        help="above temperature 0: sample each prompt's replies N times (seeds --seed .. "
        "--seed + N - 1) and judge each prompt by its N replies together, since each mode "
        "samples a reply of its own (default 1)",
    )
    _add_playback_args(regimes)
    regimes.add_argument(
        "--out",
        type=Path,
        help="also write regimes.json, regimes.md and regimes.png here (playback.json)",
    )


def _add_playback_args(regimes: argparse._ArgumentGroup) -> None:
    """``--playback``: the policies played on recorded replies (gambit.bench.playback)."""
    regimes.add_argument(
        "--playback",
        action="store_true",
        help="record each prompt's greedy reply once and play the policies on it with the "
        "measured costs, no clock: figures that repeat exactly, to compare two versions of "
        "the policy (draft models, through text too; greedy; docs/performance.md)",
    )
    regimes.add_argument(
        "--playback-from",
        type=Path,
        metavar="FILE",
        help="play the recordings a --playback run kept (its --out folder's playback.json) "
        "again, loading no model",
    )
    regimes.add_argument(
        "--batch-scale",
        type=_positive,
        default=1.0,
        metavar="X",
        help="with --playback: what a batch costs beyond one token, times X (another CPU "
        "kind's costs: t(5)/t(1) is 1.5 on an AVX-512 Xeon, 1.7-2.0 on an AVX2 EPYC)",
    )


def _positive(text: str) -> float:
    """ "1.6" -> 1.6 (argparse type: a finite number above 0)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number above 0 such as 1.6, not {text!r}")
    return value


def _sample_count(text: str) -> int:
    """ "3" -> 3 (argparse type: a whole number from 1 to 32)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 32:
        raise argparse.ArgumentTypeError(f"expected a number of samples from 1 to 32, not {text!r}")
    return n


def _block_list(text: str) -> tuple[int, ...]:
    """ "15" or "14,16" -> block numbers (argparse type)."""
    try:
        blocks = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        blocks = ()
    if not blocks or min(blocks) < 0:
        raise argparse.ArgumentTypeError(
            f"expected block numbers such as 15 or 14,16, not {text!r}"
        )
    return blocks


def _gamma_list(text: str) -> tuple[int, ...]:
    """ "1,2,4" or "none" -> fixed γs (argparse type)."""
    if text.strip().lower() == "none":
        return ()
    try:
        gammas = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        gammas = ()
    if not gammas or min(gammas) < 1 or max(gammas) > DEFAULT_GAMMA_MAX:
        raise argparse.ArgumentTypeError(
            f"expected γs from 1 to {DEFAULT_GAMMA_MAX} (1,2,4) or none, not {text!r}"
        )
    return gammas
