"""How a reply is stored with its figures, and drawn again from them.

The window writes a ``ReplyRecord`` with each assistant message and reads it
back when a conversation is reopened, so the footer, the drafted-text
highlight and the panel look as they did when the reply streamed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gambit.qt.reply_stream import ReplyResult
from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.reply_stats import MAX_DEPTHS, ReplyRecord, ReplyStop
from gambit.ui.window.chat_view import ChatMessage, reply_footer


def record_of(result: ReplyResult | None, error: str | None) -> ReplyRecord:
    """The record of a reply that ended with ``result`` (None: nothing came of
    it) and ``error`` (None: none): its figures as the panel showed them."""
    if result is None:
        return ReplyRecord(stop=ReplyStop.ERROR, error=error)
    s = result.snapshot
    return ReplyRecord(
        stop=ReplyStop.ERROR if error else result.stop,
        error=error,
        tokens=s.n_tokens,
        # The figures of gambit.engine.gamma.metrics, as the panel shows them.
        tokens_per_s=s.tokens_per_s,
        baseline_tokens_per_s=s.baseline_tokens_per_s,
        speedup=s.speedup,
        drafted_tokens=s.n_drafted,
        accepted_tokens=s.n_accepted,
        accepted_by_drafter=dict(s.accepted_by_drafter),
        acceptance_rate=s.acceptance_rate,
        ttft_ms=s.ttft_ms,
        p50_ms=s.p50_ms,
        p99_ms=s.p99_ms,
        gamma=s.gamma,
        gamma_reason=s.gamma_reason,
        acceptance_by_position=tuple(round(a, 4) for a in s.acceptance_by_position[:MAX_DEPTHS]),
        busy=s.busy,
        speedup_withheld=s.speedup_withheld,
        threads=s.threads,
        speculation=result.speculation,
        drafted=tuple(run_lengths(result.drafted)),
    )


def continued_record(before: ReplyRecord, part: ReplyRecord) -> ReplyRecord:
    """The record of a reply after Continue: the figures of its latest part
    (its tokens as ``part_tokens``, its rate and speedup), the token count of
    the whole reply, and how many times it was continued (the footer says
    "continued", and which figures are the last part's)."""
    n_part = part.tokens or 0
    return replace(
        part, tokens=(before.tokens or 0) + n_part, part_tokens=n_part,
        continued=before.continued + 1,
    )  # fmt: skip


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
    """Per-character drafted flags from their run lengths (``run_lengths``)."""
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
        record = ReplyRecord.of(m.stats) if m.role == "assistant" else None
        footer = reply_footer(record) if record is not None else ""
        flags = expand(list(record.drafted) if record else [], len(m.content))
        shown.append(ChatMessage(m.role, m.content, flags, footer, id=m.id, record=record))
    return shown
