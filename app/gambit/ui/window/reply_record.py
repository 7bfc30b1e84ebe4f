"""How a reply is stored with its figures, and drawn again from them.

The window writes these dicts with each assistant message and reads them back
when a conversation is reopened, so the footer and the drafted-text highlight
look as they did when the reply streamed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gambit.qt.reply_stream import ReplyResult
from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.reply_stats import MAX_DEPTHS, ReplyStop
from gambit.ui.window.chat_view import ChatMessage, reply_footer


def stats_dict(result: ReplyResult | None, error: str | None) -> dict[str, Any]:
    if result is None:
        return {"stop": ReplyStop.ERROR, "error": error}
    s = result.snapshot
    return {
        "stop": ReplyStop.ERROR if error else result.stop,
        "error": error,
        "tokens": s.n_tokens,
        # The figures of gambit.engine.gamma.metrics, as the panel shows them.
        "tokens_per_s": s.tokens_per_s,
        "baseline_tokens_per_s": s.baseline_tokens_per_s,
        "speedup": s.speedup,  # None: nothing drafted, no claim
        "drafted_tokens": s.n_drafted,
        "accepted_tokens": s.n_accepted,
        "accepted_by_drafter": dict(s.accepted_by_drafter),
        "acceptance_rate": s.acceptance_rate,
        "ttft_ms": s.ttft_ms,
        "p50_ms": s.p50_ms,
        "p99_ms": s.p99_ms,
        # the controller's last word and the depths' acceptance, for the panel
        "gamma": s.gamma,
        "gamma_reason": s.gamma_reason,
        "acceptance_by_position": [round(a, 4) for a in s.acceptance_by_position[:MAX_DEPTHS]],
        "busy": s.busy,  # other programs kept the cores busy meanwhile (None: quiet)
        # why a reply that drafted claims no speedup (None: it claims one, or drafted nothing)
        "speedup_withheld": s.speedup_withheld,
        "threads": s.threads,  # the CPU threads it ran on, and why
        "speculation": result.speculation,
        # run-length encoded per-character drafted flags, to redraw the highlight
        "drafted": run_lengths(result.drafted),
    }


def continued_stats(before: dict[str, Any] | None, stats: dict[str, Any]) -> dict[str, Any]:
    """The stats of a reply after Continue: the figures of its latest part
    (its tokens as ``part_tokens``, its rate and speedup), the token count of
    the whole reply, and how many times it was continued (the footer says
    "continued", and which figures are the last part's)."""
    earlier, part = _count(before, "tokens"), _count(stats, "tokens")
    return {**stats, "tokens": earlier + part, "part_tokens": part,
            "continued": _count(before, "continued") + 1}  # fmt: skip


def _count(stats: dict[str, Any] | None, key: str) -> int:
    value = (stats or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def run_lengths(flags: tuple[bool, ...]) -> list[int]:
    """[n_false, n_true, n_false, ...] — compact enough to store per message."""
    runs: list[int] = []
    current, count = False, 0
    for f in flags:
        if f == current:
            count += 1
        else:
            runs.append(count)
            current, count = f, 1
    runs.append(count)
    return runs


def expand(runs: list[int], length: int) -> list[bool]:
    flags: list[bool] = []
    value = False
    for n in runs:
        flags.extend([value] * int(n))
        value = not value
    return (flags + [False] * length)[:length]


def shown_messages(stored: Iterable[StoredMessage]) -> list[ChatMessage]:
    """The stored messages as the chat view draws them: footer and highlight included."""
    shown = []
    for m in stored:
        footer = reply_footer(m.stats) if m.role == "assistant" else ""
        drafted = list(m.stats.get("drafted", [])) if m.stats else []
        flags = expand(drafted, len(m.content))
        shown.append(ChatMessage(m.role, m.content, flags, footer, id=m.id, stats=m.stats))
    return shown
