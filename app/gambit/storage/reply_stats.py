"""The figures stored with a reply, as they read and as their readers rely on them.

The window stores a ``ReplyRecord`` with each assistant message (its JSON
form, ``ReplyRecord.to_json``; ``gambit.ui.window.reply_record.record_of``
makes it) and reads it back (``ReplyRecord.of``) for the line under the reply
(``reply_footer``, also written into Markdown exports), the statistics panel
and Continue. A file imported from elsewhere may hold any JSON there, so
``stats_problem`` says whether it has the types these readers assume: keys
they know must have them, others are kept as they are.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
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


def reply_footer(record: ReplyRecord | None) -> str:
    """The line under a reply, from its stored record, formatted as the
    statistics panel and the CLI format them (``gambit.engine.gamma.metrics``).

    A speedup shows only where one was stored: a reply that drafted nothing
    has none, and replies saved before it was stored are not guessed at. A
    continued reply counts its tokens in all, and says that its other figures
    are its last part's.
    """
    if record is None:
        return ""
    r = record
    continued = r.continued > 0
    parts = []
    if r.tokens is not None:
        parts.append(f"{r.tokens} tokens" + (" in all" if continued else ""))
    figures = []  # (a continued reply's: its last part's)
    if continued and r.part_tokens is not None:
        figures.append(f"{r.part_tokens} tokens")
    if r.tokens_per_s:
        figures.append(format_rate(r.tokens_per_s))
    if r.speculation and r.drafted_tokens:
        figures.append(format_accepted(r.accepted_tokens, r.drafted_tokens, r.accepted_by_drafter))
    if r.speedup is not None and r.drafted_tokens:
        figures.append(f"{format_speedup(r.speedup)} vs plain")
    if r.speedup_withheld and r.drafted_tokens:
        figures.append("no speedup: the load changed")
    if r.busy and r.tokens:
        figures.append("timed while the machine was busy")
    if continued and figures:
        parts.append("last part: " + ", ".join(figures))
    else:
        parts += figures
    if r.stop in STOP_WORDS:
        parts.append(STOP_WORDS[r.stop])
    if continued:
        parts.append("continued")
    if r.error:
        parts.append(f"error: {r.error}")
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


# ------------------------------------------------------------ the typed record
# A continued reply's count of parts, and the tokens kept to continue a cut
# reply (``gambit.storage.prompts.continuing``): stored with the figures.
CONTINUED = "continued"
KEPT_TOKENS = "kept_tokens"
_OWN_KEYS = frozenset({*STATS_KEYS, CONTINUED, KEPT_TOKENS})


@dataclass(frozen=True)
class ReplyRecord:
    """What is stored with a reply, typed: its figures (the names are those of
    ``STATS_KEYS``, used alike by storage, the window, the export and the
    bench), how it ended, the drafted runs that redraw its highlight, the
    tokens kept to continue it, and how many times it was continued. One JSON
    form: ``of`` reads it (a value that is not what its readers assume reads
    as missing, never as another figure), ``to_json`` writes it; keys it does
    not know (a newer version's) are kept as they were (``extra``)."""

    stop: str | None = None  # a ReplyStop's value (another version's: kept as text)
    error: str | None = None
    tokens: int | None = None  # in all, a continued reply's parts together
    part_tokens: int | None = None  # a continued reply's last part
    continued: int = 0  # times Continue added a part
    speculation: bool = False
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_by_drafter: Mapping[str, int] = field(default_factory=dict)
    acceptance_rate: float | None = None
    acceptance_by_position: tuple[float, ...] = ()
    tokens_per_s: float | None = None
    baseline_tokens_per_s: float | None = None
    speedup: float | None = None  # None: nothing drafted, no claim
    ttft_ms: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    gamma: int | None = None
    gamma_reason: str | None = None
    busy: str | None = None  # other programs kept the cores busy meanwhile
    speedup_withheld: str | None = None  # why a reply that drafted claims no speedup
    threads: str | None = None  # the CPU threads it ran on, and why
    drafted: tuple[int, ...] = ()  # run lengths of per-character drafted flags
    series: tuple[tuple[float, float, float, int], ...] = ()  # the panel's chart points
    kept_tokens: Mapping[str, Any] | None = None  # {"tokenizer", "ids"}: to continue it
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, stats: Mapping[str, Any] | None) -> ReplyRecord:
        """The record stored as ``stats`` (None: a reply with none)."""
        if not stats:
            return cls()

        def value(key: str, default: Any = None) -> Any:
            found = stored_value(stats, key)
            return default if found is None else found

        continued = stats.get(CONTINUED, 0)
        kept = stats.get(KEPT_TOKENS)
        return cls(
            stop=value("stop"),
            error=value("error"),
            tokens=value("tokens"),
            part_tokens=value("part_tokens"),
            continued=continued if isinstance(continued, int) and _count(continued) else 0,
            speculation=value("speculation", False),
            drafted_tokens=value("drafted_tokens", 0),
            accepted_tokens=value("accepted_tokens", 0),
            accepted_by_drafter=accepted_by_drafter(stats),
            acceptance_rate=value("acceptance_rate"),
            acceptance_by_position=tuple(value("acceptance_by_position", ())),
            tokens_per_s=value("tokens_per_s"),
            baseline_tokens_per_s=value("baseline_tokens_per_s"),
            speedup=value("speedup"),
            ttft_ms=value("ttft_ms"),
            p50_ms=value("p50_ms"),
            p99_ms=value("p99_ms"),
            gamma=value("gamma"),
            gamma_reason=value("gamma_reason"),
            busy=value("busy"),
            speedup_withheld=value("speedup_withheld"),
            threads=value("threads"),
            drafted=tuple(value("drafted", ())),
            series=tuple(
                (float(t), float(r), float(b), int(g)) for t, r, b, g in value("series", ())
            ),
            kept_tokens=kept if isinstance(kept, dict) else None,
            extra={k: v for k, v in stats.items() if k not in _OWN_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        """The record as it is stored: the figures under their names (a
        missing one left out, as readers take it); continued and the kept
        tokens where set."""
        out: dict[str, Any] = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", CONTINUED, KEPT_TOKENS) or value is None:
                continue
            if f.name in ("acceptance_by_position", "drafted"):
                value = list(value)
            elif f.name == "series":
                value = [list(point) for point in value]
            elif f.name == "accepted_by_drafter":
                value = dict(value)
            out[f.name] = value
        if self.continued:
            out[CONTINUED] = self.continued
        if self.kept_tokens is not None:
            out[KEPT_TOKENS] = dict(self.kept_tokens)
        return out
