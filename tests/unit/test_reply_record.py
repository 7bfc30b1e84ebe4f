"""One record of a reply (storage.reply_stats.ReplyRecord): one JSON form,
read back as written, a damaged value read as missing, another version's
keys kept."""

from __future__ import annotations

from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.prompts.continuing import was_cut
from gambit.storage.reply_stats import ReplyRecord, ReplyStop, stats_problem

FULL = ReplyRecord(
    stop=ReplyStop.MAX_TOKENS, tokens=192, part_tokens=40, continued=1, speculation=True,
    drafted_tokens=21, accepted_tokens=2, accepted_by_drafter={"draft model": 2},
    acceptance_rate=0.095, acceptance_by_position=(0.4, 0.1), tokens_per_s=31.0,
    baseline_tokens_per_s=14.2, speedup=2.18, ttft_ms=80.0, p50_ms=30.1, p99_ms=92.5,
    gamma=8, gamma_reason="on: drafting γ=8", busy=None, threads="2 threads",
    drafted=(3, 5, 2), series=((0.5, 20.0, 14.0, 8), (1.0, 31.0, 14.2, 8)),
    kept_tokens={"tokenizer": "abc", "ids": [1, 2, 3]},
)  # fmt: skip


def test_a_record_reads_back_as_it_was_written() -> None:
    stored = FULL.to_json()
    assert stats_problem(stored, max_drafted=10) is None  # what an import accepts
    assert ReplyRecord.of(stored) == FULL
    assert "busy" not in stored  # (a missing figure is left out, as readers take it)


def test_damaged_values_read_as_missing_and_unknown_keys_are_kept() -> None:
    record = ReplyRecord.of({
        "stop": 5, "tokens": "many", "speedup": float("inf"), "gamma": -1,
        "drafted": [1, -2], "series": [[0, 1]], "continued": True, "kept_tokens": [1],
        "from a newer version": {"x": 1},
    })  # fmt: skip
    assert record == ReplyRecord(extra={"from a newer version": {"x": 1}})
    assert record.to_json()["from a newer version"] == {"x": 1}


def test_a_stored_message_is_read_through_its_record() -> None:
    def reply(stats: dict[str, object] | None, complete: bool = True) -> StoredMessage:
        return StoredMessage(1, 1, "assistant", "Hello", complete, stats, 0.0)

    assert reply(None).record == ReplyRecord()
    assert was_cut(reply({"stop": ReplyStop.MAX_TOKENS}))  # a limit cut it
    assert not was_cut(reply({"stop": ReplyStop.EOG}))
    assert not was_cut(reply({"stop": ["not", "a", "stop"]}))  # damaged: as if unknown
