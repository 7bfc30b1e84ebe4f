"""The line under a reply names why it ended and the scope of each figure."""

from __future__ import annotations

from typing import Any

from gambit.engine.gamma.metrics import format_rate
from gambit.storage.reply_stats import ReplyRecord, stats_problem
from gambit.storage.reply_stats import reply_footer as footer_of
from gambit.ui.window.reply_record import continued_record


def reply_footer(stats: dict[str, Any]) -> str:
    """The footer of a reply whose record was stored as ``stats``."""
    return footer_of(ReplyRecord.of(stats))


FIRST: dict[str, Any] = {
    "stop": "max tokens", "error": None, "tokens": 152, "tokens_per_s": 31.0,
    "speedup": 2.4, "drafted_tokens": 160, "accepted_tokens": 140,
    "accepted_by_drafter": {}, "speculation": True, "drafted": [],
}  # fmt: skip


def test_the_footer_names_why_a_reply_ended() -> None:
    assert reply_footer(FIRST).endswith(" · cut at the length limit")
    assert reply_footer({**FIRST, "stop": "context full"}).endswith(" · cut: the context is full")
    assert reply_footer({**FIRST, "stop": "cancelled"}).endswith(" · stopped")
    assert reply_footer({**FIRST, "stop": "window closed"}).endswith(" · interrupted")
    ended = reply_footer({**FIRST, "stop": "end of text"})
    assert ended.endswith(" vs plain")  # (ended on its own: nothing to say)
    failed = reply_footer({"stop": "error", "error": "the model file vanished"})
    assert failed == "error: the model file vanished"


def test_a_continued_reply_says_which_figures_are_its_last_part_s() -> None:
    # 152 tokens, then Continue made 40 more at another rate, drafting little.
    part: dict[str, Any] = {
        **FIRST, "tokens": 40, "tokens_per_s": 1.6, "speedup": 0.03, "drafted_tokens": 21,
        "accepted_tokens": 2,
    }  # fmt: skip
    stats = continued_record(ReplyRecord.of(FIRST), ReplyRecord.of(part)).to_json()
    assert stats["tokens"] == 192 and stats["part_tokens"] == 40 and stats["continued"] == 1
    assert stats_problem(stats, 0) is None
    footer = reply_footer(stats)
    assert footer.startswith(f"192 tokens in all · last part: 40 tokens, {format_rate(1.6)}, ")
    assert "accepted 2/21" in footer
    assert footer.endswith(" vs plain · cut at the length limit · continued")
    # A record written before the last part's count was kept says the scope too.
    older = {k: v for k, v in stats.items() if k != "part_tokens"}
    assert reply_footer(older).startswith(f"192 tokens in all · last part: {format_rate(1.6)}")


def test_a_damaged_part_count_is_refused_on_import() -> None:
    assert stats_problem({**FIRST, "part_tokens": -1}, 0) == (
        "part_tokens must be a whole number of 0 or more"
    )
