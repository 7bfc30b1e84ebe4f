"""HistoryMemory: prompt lookup's index kept in step with a real conversations file.

The tokenizer here is UTF-8 bytes (a real, if simple, one); the real model's
tokenizer drives it in tests/gui/test_worker.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gambit.engine.drafters.history import HistoryIndex
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.history_memory import HistoryMemory, Tokenizer, forget

BYTES = Tokenizer("utf8-bytes", 256, lambda text: list(text.encode("utf-8")))
CODE = "def parse_config(path):\n    with open(path) as f:\n        return json.load(f)\n"


def follows(index: HistoryIndex, text: str) -> str:
    """What the index copies after ``text`` ("" without a match)."""
    match = index.match(list(text.encode()))
    return bytes(index.continuation(match.start, 1000)).decode() if match else ""


@pytest.fixture
def store(tmp_path: Path) -> ConversationStore:
    s = ConversationStore(tmp_path / "conversations.db")
    yield s
    s.close()


def test_saved_messages_are_added_as_they_come(store: ConversationStore, tmp_path: Path) -> None:
    memory = HistoryMemory(store.path, tmp_path / "memory")
    conv = store.create()
    store.add_message(conv, "user", "Please review:\n" + CODE)
    index = memory.index(BYTES)
    assert memory.last_sync.added == 1 and memory.last_sync.rebuilt == "no saved index yet"
    assert follows(index, "def parse_config(path):\n    with open") == CODE.split("open", 1)[1]
    reply = store.add_message(conv, "assistant", "", complete=False)  # a reply under way
    memory.index(BYTES)
    assert memory.last_sync.added == 0  # (stored empty until it ends: never its own source)
    store.update_message(reply, "Looks fine; add a docstring to parse_config.", True)
    index = memory.index(BYTES)
    assert memory.last_sync.added == 1
    assert follows(index, "add a docstring") == " to parse_config."
    memory.index(BYTES)
    assert memory.last_sync == memory.last_sync.__class__(0, 0, None, memory.last_sync.seconds)


def test_a_chats_system_prompt_is_read_like_a_message(
    store: ConversationStore, tmp_path: Path
) -> None:
    """A preset's system prompt, stored as a chat's first message, and one
    changed over the chat later, both become sources for lookup."""
    memory = HistoryMemory(store.path, tmp_path / "memory")
    conv = store.create(preset="Reviewer", system_prompt="Review the code; end with LGTM or NACK.")
    store.add_message(conv, "user", "Please review:\n" + CODE)
    index = memory.index(BYTES)
    assert memory.last_sync.added == 2
    assert follows(index, "Review the code; end with") == " LGTM or NACK."
    store.set_system_prompt(conv, "Review the code; reply in haiku form.")
    index = memory.index(BYTES)
    assert follows(index, "Review the code; reply in") == " haiku form."


def test_deleted_and_edited_messages_leave_memory_and_file(
    store: ConversationStore, tmp_path: Path
) -> None:
    memory = HistoryMemory(store.path, tmp_path / "memory")
    secret = store.create()
    store.add_message(secret, "user", "my password hint is purple-elephant-42")
    kept = store.create()
    edited = store.add_message(kept, "user", "the quick brown fox jumps")
    index = memory.index(BYTES)
    assert follows(index, "hint is purple") == "-elephant-42"
    store.delete(secret)
    store.update_message(edited, "the quick brown cat naps", True)
    index = memory.index(BYTES)
    assert memory.last_sync.removed == 2 and memory.last_sync.added == 1
    assert follows(index, "hint is purple") == ""
    assert follows(index, "quick brown") == " cat naps"
    saved = HistoryIndex.load(memory.path_for(BYTES.fingerprint), BYTES.fingerprint, 256)
    assert follows(saved, "hint is purple") == ""  # gone from the file too
    assert follows(saved, "quick brown") == " cat naps"


def test_it_survives_a_restart_without_reading_the_messages_again(
    store: ConversationStore, tmp_path: Path
) -> None:
    conv = store.create()
    store.add_message(conv, "user", CODE)
    HistoryMemory(store.path, tmp_path / "memory").index(BYTES)
    restarted = HistoryMemory(store.path, tmp_path / "memory")
    index = restarted.index(BYTES)
    assert restarted.last_sync.rebuilt is None and restarted.last_sync.added == 0
    assert follows(index, "with open(path)") == " as f:\n        return json.load(f)\n"


@pytest.mark.parametrize("damage", ["truncated", "zeros", "another tokenizer"])
def test_a_damaged_saved_index_is_rebuilt(
    store: ConversationStore, tmp_path: Path, damage: str
) -> None:
    conv = store.create()
    store.add_message(conv, "user", CODE)
    memory = HistoryMemory(store.path, tmp_path / "memory")
    memory.index(BYTES)
    path = memory.path_for(BYTES.fingerprint)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "zeros":
        path.write_bytes(bytes(path.stat().st_size))
    else:
        index = HistoryIndex()
        index.add(1, [1, 2, 3, 4, 5])
        index.save(path, "someone else's tokenizer")
    restarted = HistoryMemory(store.path, tmp_path / "memory")
    index = restarted.index(BYTES)
    assert restarted.last_sync.rebuilt and restarted.last_sync.added == 1
    assert follows(index, "with open(path)") == " as f:\n        return json.load(f)\n"
    HistoryIndex.load(path, BYTES.fingerprint, 256)  # (saved again, whole)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_folder_that_cannot_be_written_keeps_the_index_in_memory(
    store: ConversationStore, tmp_path: Path
) -> None:
    folder = tmp_path / "memory"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        conv = store.create()
        store.add_message(conv, "user", CODE)
        memory = HistoryMemory(store.path, folder)
        index = memory.index(BYTES)
        assert follows(index, "with open(path)")
        assert not list(folder.iterdir())
    finally:
        folder.chmod(0o700)


def test_a_full_disk_keeps_the_index_in_memory(
    store: ConversationStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    conv = store.create()
    store.add_message(conv, "user", CODE)
    memory = HistoryMemory(store.path, tmp_path / "memory")
    monkeypatch.setattr("numpy.savez", no_space)
    index = memory.index(BYTES)
    assert follows(index, "with open(path)")
    assert not list((tmp_path / "memory").glob("*"))  # no half-written file left


def test_a_missing_or_damaged_conversations_file_costs_nothing_but_the_memory(
    tmp_path: Path,
) -> None:
    memory = HistoryMemory(tmp_path / "nowhere.db", tmp_path / "memory")
    assert len(memory.index(BYTES)) == 0
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + bytes(4000))
    assert len(HistoryMemory(damaged, tmp_path / "memory").index(BYTES)) == 0


def test_a_long_history_keeps_its_newest_messages_within_the_bound(
    store: ConversationStore, tmp_path: Path
) -> None:
    conv = store.create()
    for i in range(60):
        store.add_message(conv, "user" if i % 2 == 0 else "assistant", f"message {i:03d} " * 10)
    memory = HistoryMemory(store.path, tmp_path / "memory", max_tokens=2_000)
    index = memory.index(BYTES)
    assert len(index) <= 2_000
    assert follows(index, "message 059 ").startswith("message 059")
    assert follows(index, "message 000 ") == ""  # the oldest went
    memory.index(BYTES)
    assert memory.last_sync.added == 0  # and are not read again
    store.add_message(conv, "user", "message 060 " * 10)
    index = memory.index(BYTES)
    assert memory.last_sync.added == 1
    assert follows(index, "message 060 ").startswith("message 060")
    assert follows(index, "message 000 ") == ""


def test_forget_deletes_the_saved_index(store: ConversationStore, tmp_path: Path) -> None:
    conv = store.create()
    store.add_message(conv, "user", CODE)
    memory = HistoryMemory(store.path, tmp_path / "memory")
    memory.index(BYTES)
    assert list((tmp_path / "memory").glob("*.npz"))
    memory.forget()
    assert not list((tmp_path / "memory").glob("*.npz"))
    assert forget(tmp_path / "memory") == 0
    assert forget(tmp_path / "no such folder") == 0


def test_new_messages_are_saved_after_the_reply_deleted_ones_at_once(
    store: ConversationStore, tmp_path: Path
) -> None:
    conv = store.create()
    store.add_message(conv, "user", CODE)
    memory = HistoryMemory(store.path, tmp_path / "memory")
    memory.index(BYTES)  # the first build is saved
    path = memory.path_for(BYTES.fingerprint)
    saved = path.read_bytes()
    store.add_message(conv, "assistant", "Add a docstring.")
    memory.index(BYTES)
    assert path.read_bytes() == saved  # not before the reply's first token
    memory.flush()
    restarted = HistoryMemory(store.path, tmp_path / "memory")
    restarted.index(BYTES)
    assert restarted.last_sync.added == 0 and restarted.last_sync.rebuilt is None
    assert follows(HistoryIndex.load(path, BYTES.fingerprint, 256), "Add a doc") == "string."
    store.delete(conv)
    restarted.index(BYTES)  # (no flush needed)
    assert follows(HistoryIndex.load(path, BYTES.fingerprint, 256), "Add a doc") == ""


def test_a_long_history_is_read_in_slices_and_joins_whole_oldest_first(
    store: ConversationStore, tmp_path: Path
) -> None:
    conv = store.create()
    ids = [store.add_message(conv, "user", f"note {i:02d}: " + "words " * 20) for i in range(30)]
    memory = HistoryMemory(store.path, tmp_path / "memory")
    index = memory.index(BYTES, budget_s=0.0)  # one message per slice
    assert memory.pending and len(index) == 0  # nothing until it is whole
    store.delete_from(ids[5])  # (a regenerate: messages 5 and on go)
    slices = 1
    while memory.pending:
        index = memory.index(BYTES, budget_s=0.0)
        slices += 1
        assert slices < 100
    assert slices > 2
    assert list(index.documents()) == ids[:5]  # oldest first; the deleted ones never joined
    assert follows(index, "note 04: ").startswith("words")
    assert follows(index, "note 07: ") == ""


def test_a_message_holding_a_nul_character_is_read_once(
    store: ConversationStore, tmp_path: Path
) -> None:
    """SQLite's length() of text stops at a NUL character (one can come in an
    imported file): the memory compares byte lengths, so such a message is not
    taken for an edited one, dropped and tokenized again at every sync."""
    memory = HistoryMemory(store.path, tmp_path / "memory")
    conv = store.create()
    store.add_message(conv, "user", "a NUL \x00 inside, then the rest of the line")
    memory.index(BYTES)
    assert memory.last_sync.added == 1
    store.add_message(conv, "assistant", "noted")
    index = memory.index(BYTES)
    assert (memory.last_sync.added, memory.last_sync.removed) == (1, 0)
    assert follows(index, "inside, then") == " the rest of the line"


def test_a_message_edited_to_the_same_length_in_a_reused_row_is_read_again(
    store: ConversationStore, tmp_path: Path
) -> None:
    """Edit and resend deletes the message and those after it, then stores
    the new text: SQLite may hand the new row the deleted one's id, and an
    edit may keep the length. The memory must still drop the old text."""
    memory = HistoryMemory(store.path, tmp_path / "memory")
    conv = store.create()
    old = store.add_message(conv, "user", "send the report to alice tomorrow")
    store.add_message(conv, "assistant", "I will remind you about alice.")
    assert follows(memory.index(BYTES), "send the report to") == " alice tomorrow"
    store.delete_from(old)
    new = store.add_message(conv, "user", "send the report to bobby tomorrow")
    store.add_message(conv, "assistant", "I will remind you about bobby.")
    assert new == old  # (the id came back: only the row's time tells them apart)
    index = memory.index(BYTES)
    assert follows(index, "send the report to") == " bobby tomorrow"
    assert follows(index, "remind you about") == " bobby."
