"""The figures stored with a reply, as they read and as their readers rely on them.

The window stores a dict of figures with each assistant message
(``gambit.ui.window.reply_record.stats_dict``) and reads it back as the line under the
reply (``reply_footer``), also written into Markdown exports. A file imported
from elsewhere may hold any JSON there, so ``stats_problem`` says whether a
dict has the types these readers assume: keys they know must have them,
others are kept as they are.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from typing import Any

from gambit.engine.gamma.metrics import format_accepted, format_rate, format_speedup
from gambit.engine.text.reply import StopReason


def accepted_by_drafter(stats: Mapping[str, Any]) -> dict[str, int]:
    """The stored accepted tokens by drafter; entries that are not a name and
    a count (an edited or damaged record) are left out."""
    stored = stats.get("accepted_by_drafter")
    if not isinstance(stored, dict):
        return {}
    return {
        str(name): n
        for name, n in stored.items()
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0
    }


class ReplyStop(str, enum.Enum):
    """Why a stored reply ended (its record's ``"stop"``): the engine's
    ``StopReason``, or what ended it outside the engine."""

    EOG = StopReason.EOG.value
    MAX_TOKENS = StopReason.MAX_TOKENS.value
    STOP_STRING = StopReason.STOP_STRING.value
    CANCELLED = StopReason.CANCELLED.value  # Stop
    CONTEXT_FULL = StopReason.CONTEXT_FULL.value
    INTERRUPTED = "interrupted"  # autosaved as it streamed: the app ended before it did
    WINDOW_CLOSED = "window closed"
    ERROR = "error"


# Why a reply ended, as its footer says it (a reply that ended on its own says
# nothing): cut short on purpose (Stop, a closed window: not "unfinished"), or
# by a limit.
_DELIBERATE_WORDS: dict[str, str] = {
    ReplyStop.CANCELLED: "stopped",
    ReplyStop.WINDOW_CLOSED: "interrupted",
    ReplyStop.INTERRUPTED: "interrupted",
}
DELIBERATE_STOPS = frozenset(_DELIBERATE_WORDS)
STOP_WORDS: dict[str, str] = {
    ReplyStop.MAX_TOKENS: "cut at the length limit",
    ReplyStop.CONTEXT_FULL: "cut: the context is full",
    **_DELIBERATE_WORDS,
}
# The stops that leave a reply cut (its text ended before the model ended it).
CUT_STOPS = frozenset(
    {ReplyStop.MAX_TOKENS, ReplyStop.CONTEXT_FULL, *_DELIBERATE_WORDS, ReplyStop.ERROR}
)


def reply_footer(stats: Mapping[str, Any] | None) -> str:
    """The line under a reply, from the figures stored with it (``"tokens"``,
    ``"tokens_per_s"``, ``"speedup"``, ...: see ``MainWindow``), formatted as
    the statistics panel and the CLI format them (``gambit.engine.gamma.metrics``).

    A speedup shows only where one was stored: a reply that drafted nothing
    has none, and replies saved before it was stored are not guessed at. A
    continued reply counts its tokens in all, and says that its other figures
    are its last part's.
    """
    if not stats:
        return ""
    continued = bool(stats.get("continued"))
    parts = []
    if stats.get("tokens") is not None:
        parts.append(f"{stats['tokens']} tokens" + (" in all" if continued else ""))
    figures = []  # (a continued reply's: its last part's)
    if continued and stats.get("part_tokens") is not None:
        figures.append(f"{stats['part_tokens']} tokens")
    if stats.get("tokens_per_s"):
        figures.append(format_rate(float(stats["tokens_per_s"])))
    if stats.get("speculation") and stats.get("drafted_tokens"):
        # (absent from a record another version or a hand edit wrote: none)
        accepted, drafted = int(stats.get("accepted_tokens", 0)), int(stats["drafted_tokens"])
        figures.append(format_accepted(accepted, drafted, accepted_by_drafter(stats)))
    if stats.get("speedup") is not None and stats.get("drafted_tokens"):
        figures.append(f"{format_speedup(float(stats['speedup']))} vs plain")
    if stats.get("speedup_withheld") and stats.get("drafted_tokens"):
        figures.append("no speedup: the load changed")
    if stats.get("busy") and stats.get("tokens"):
        figures.append("timed while the machine was busy")
    if continued and figures:
        parts.append("last part: " + ", ".join(figures))
    else:
        parts += figures
    stop = stats.get("stop")
    if isinstance(stop, str) and stop in STOP_WORDS:
        parts.append(STOP_WORDS[stop])
    if continued:
        parts.append("continued")
    if stats.get("error"):
        parts.append(f"error: {stats['error']}")
    return " · ".join(parts)


# ------------------------------------------------------------ checking a record
def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _counts(value: object) -> bool:
    return isinstance(value, list) and all(_count(n) for n in value)


def _fraction(value: object) -> bool:
    return _number(value) and isinstance(value, (int, float)) and 0 <= value <= 1


def _series(value: object) -> bool:
    """[[seconds, tokens/s, baseline tokens/s, γ], ...]: the panel's charts, redrawn."""
    return (
        isinstance(value, list)
        and len(value) <= MAX_SERIES_POINTS
        and all(
            isinstance(p, list) and len(p) == 4 and all(_number(x) for x in p[:3]) and _count(p[3])
            for p in value
        )
    )


def _or_null(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or check(value)


MAX_SERIES_POINTS = 256  # "series": the points kept of a reply's charts (64 are written)
MAX_DEPTHS = 64  # "acceptance_by_position": a draft is at most this deep

# What each known key must hold, in words and as a check: the readers above,
# and the drafted-text highlight (``gambit.ui.window.reply_record.expand``, which
# expands "drafted" run lengths into one flag per character).
STATS_KEYS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "stop": ("text", lambda v: isinstance(v, str)),
    "error": ("text or null", _or_null(lambda v: isinstance(v, str))),
    "tokens": ("a whole number of 0 or more, or null", _or_null(_count)),
    "part_tokens": ("a whole number of 0 or more", _count),
    "drafted_tokens": ("a whole number of 0 or more", _count),
    "accepted_tokens": ("a whole number of 0 or more", _count),
    "accepted_by_drafter": ("an object", lambda v: isinstance(v, dict)),
    "speculation": ("true or false", lambda v: isinstance(v, bool)),
    "busy": ("text or null", _or_null(lambda v: isinstance(v, str))),
    "speedup_withheld": ("text or null", _or_null(lambda v: isinstance(v, str))),
    "threads": ("text", lambda v: isinstance(v, str)),
    "drafted": ("a list of whole numbers of 0 or more", _counts),
    "tokens_per_s": ("a number or null", _or_null(_number)),
    "baseline_tokens_per_s": ("a number or null", _or_null(_number)),
    "speedup": ("a number or null", _or_null(_number)),
    "acceptance_rate": ("a number or null", _or_null(_number)),
    "ttft_ms": ("a number or null", _or_null(_number)),
    "p99_ms": ("a number or null", _or_null(_number)),
    # (read by the statistics panel, for a reply selected after it was written)
    "p50_ms": ("a number or null", _or_null(_number)),
    "gamma": ("a whole number of 0 or more", _count),
    "gamma_reason": ("text", lambda v: isinstance(v, str)),
    "acceptance_by_position": (
        f"a list of at most {MAX_DEPTHS} numbers from 0 to 1",
        lambda v: isinstance(v, list) and len(v) <= MAX_DEPTHS and all(_fraction(x) for x in v),
    ),
    "series": (
        f"a list of at most {MAX_SERIES_POINTS} [seconds, tokens/s, baseline, γ] points",
        _series,
    ),
}


def stored_value(stats: Mapping[str, Any], key: str) -> Any:
    """``stats[key]`` where it holds what its readers assume (``STATS_KEYS``),
    else None: a record edited by hand or damaged shows no figure, not a crash."""
    value = stats.get(key)
    return value if value is not None and STATS_KEYS[key][1](value) else None


def stats_problem(stats: Mapping[str, Any], max_drafted: int) -> str | None:
    """What is wrong with ``stats`` for its readers ("tokens must be ..."), or
    None. ``max_drafted``: the most characters the "drafted" runs may cover."""
    for key, (words, check) in STATS_KEYS.items():
        if key in stats and not check(stats[key]):
            return f"{key} must be {words}"
    if sum(stats.get("drafted", ())) > max_drafted:
        return f"drafted covers more than {max_drafted:,} characters"
    return None
