"""Opening a damaged, locked or unwritable chat history: the app always starts."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from gambit.storage.chat_store import conversations as conv_module
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.recovery import NOT_SAVED, OpenedHistory, move_aside, open_history
from gambit.storage.chat_store.salvage import RECOVERED_TITLE, salvage
from gambit.storage.chat_store.schema import SCHEMA_VERSION
from gambit.storage.chat_store.store_errors import DamagedStoreError, StoreInUseError

N_CONVERSATIONS, N_MESSAGES = 30, 8


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "conversations.sqlite3"


@pytest.fixture
def filled(db_path: Path) -> Path:
    """A history of N_CONVERSATIONS conversations, long enough to span many pages."""
    with ConversationStore(db_path) as store:
        for i in range(N_CONVERSATIONS):
            conv = store.create(f"chat {i}")
            for j in range(N_MESSAGES):
                role = "user" if j % 2 == 0 else "assistant"
                store.add_message(conv, role, f"message {i}.{j} " + "words " * 60)
    return db_path


@pytest.fixture
def opened() -> Iterator[list[OpenedHistory]]:
    """Closes whatever the test opened."""
    items: list[OpenedHistory] = []
    yield items
    for item in items:
        item.store.close()


def open_(opened: list[OpenedHistory], path: Path) -> OpenedHistory:
    result = open_history(path)
    opened.append(result)
    return result


def asides(path: Path) -> list[str]:
    """The damaged files moved aside (not counting their -wal and -shm)."""
    return sorted(
        p.name for p in path.parent.glob("*.corrupt-*") if not p.name.endswith(("-wal", "-shm"))
    )


def garble(path: Path, start: int, length: int) -> None:
    data = bytearray(path.read_bytes())
    data[start : start + length] = bytes((i * 37 + 11) & 0xFF for i in range(length))
    path.write_bytes(bytes(data))


def test_a_sound_file_opens_without_a_notice(filled: Path, opened: list[OpenedHistory]) -> None:
    result = open_(opened, filled)
    assert result.notice is None and not result.store.in_memory
    assert len(result.store.list()) == N_CONVERSATIONS
    assert asides(filled) == []


def test_not_a_database_is_moved_aside_and_a_new_history_started(
    db_path: Path, opened: list[OpenedHistory]
) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not sqlite, just some text that is long enough" * 20)
    with pytest.raises(DamagedStoreError):
        ConversationStore(db_path)
    result = open_(opened, db_path)
    assert result.notice is not None
    assert "damaged (file is not a database)" in result.notice
    assert "Nothing could be read back" in result.notice
    [aside] = asides(db_path)
    assert aside in result.notice
    assert (db_path.parent / aside).read_bytes().startswith(b"this is not sqlite")
    # the new history works and is saved to the original path
    conv = result.store.create("fresh")
    result.store.add_message(conv, "user", "hello")
    result.store.close()
    with ConversationStore(db_path) as again:
        assert [c.title for c in again.list()] == ["fresh"]


def test_truncated_file_keeps_what_can_be_read(filled: Path, opened: list[OpenedHistory]) -> None:
    size = filled.stat().st_size
    with filled.open("r+b") as f:
        f.truncate(size // 2)
    result = open_(opened, filled)
    assert result.notice is not None and "could be read back from it and were kept" in result.notice
    kept = result.store.list()
    assert 0 < sum(c.n_messages for c in kept) < N_CONVERSATIONS * N_MESSAGES
    # every kept message is whole, and each conversation's messages are in order
    for conv in kept:
        texts = [m.content for m in result.store.messages(conv.id)]
        assert all(t.startswith("message ") and t.endswith("words ") for t in texts)
        assert texts == sorted(texts, key=lambda t: int(t.split()[1].split(".")[1]))
    assert len(asides(filled)) == 1


def test_garbled_pages_fail_the_check_and_the_rest_is_kept(
    filled: Path, opened: list[OpenedHistory]
) -> None:
    size = filled.stat().st_size
    garble(filled, size // 2, 8192)  # two pages in the middle of the messages
    with pytest.raises(DamagedStoreError, match="integrity check"):
        ConversationStore(filled)
    result = open_(opened, filled)
    assert result.notice is not None and "integrity check" in result.notice
    kept = result.store.list()
    n_kept = sum(c.n_messages for c in kept)
    assert len(kept) == N_CONVERSATIONS  # their table is on other pages
    assert N_CONVERSATIONS * N_MESSAGES * 0.7 < n_kept < N_CONVERSATIONS * N_MESSAGES
    # titles and the order of the list survive
    assert [c.title for c in kept][:2] == [
        f"chat {N_CONVERSATIONS - 1}",
        f"chat {N_CONVERSATIONS - 2}",
    ]


def test_messages_without_their_conversation_are_kept_under_a_new_title(db_path: Path) -> None:
    with ConversationStore(db_path) as store:
        conv = store.create("lost title")
        store.add_message(conv, "user", "question")
        store.add_message(conv, "assistant", "answer")
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("PRAGMA ignore_check_constraints=ON")  # as garbled bytes would
        conn.execute("DELETE FROM conversations")
        conn.execute("UPDATE messages SET role = 'garbled' WHERE content = 'answer'")
        conn.commit()
    found = salvage(db_path)
    [(summary, messages)] = found.conversations
    assert summary.title == RECOVERED_TITLE
    assert [m.content for m in messages] == ["question"]  # the row with a bad role is left out
    assert found.describe() == "1 conversation with 1 message"


def test_a_foreign_schema_counts_as_damage(db_path: Path, opened: list[OpenedHistory]) -> None:
    db_path.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.commit()
    result = open_(opened, db_path)
    assert result.notice is not None and "no such column" in result.notice
    assert result.store.list() == [] and len(asides(db_path)) == 1


def test_log_files_move_aside_with_the_file(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").write_text(suffix or "db")
    first = move_aside(db_path)
    db_path.write_text("again")
    second = move_aside(db_path)  # within the same second: a new name
    assert first != second and not db_path.exists()
    assert Path(f"{first}-wal").read_text() == "-wal"
    assert Path(f"{first}-shm").read_text() == "-shm"
    assert second.read_text() == "again"


def test_locked_by_another_process_works_in_memory(
    filled: Path, opened: list[OpenedHistory], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conv_module, "LOCK_TIMEOUT_S", 0.2)
    before = filled.read_bytes()
    with closing(sqlite3.connect(filled, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # holds the write lock, as a stuck writer would
        with pytest.raises(StoreInUseError):
            ConversationStore(filled)
        result = open_(opened, filled)
        other.execute("ROLLBACK")
    assert result.store.in_memory
    assert result.notice is not None
    assert "in use by another Gambit window or process" in result.notice
    assert NOT_SAVED in result.notice
    # the saved chats are there to read, and the window can still chat
    assert len(result.store.list()) == N_CONVERSATIONS
    conv = result.store.create("only in memory")
    result.store.add_message(conv, "user", "hi")
    assert result.store.list()[0].title == "only in memory"
    result.store.close()
    assert filled.read_bytes() == before  # nothing reached the file
    assert asides(filled) == []


def test_a_newer_file_is_read_but_not_written(db_path: Path, opened: list[OpenedHistory]) -> None:
    ConversationStore(db_path).close()
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    result = open_(opened, db_path)
    assert result.store.in_memory
    assert result.notice is not None and "newer Gambit" in result.notice
    assert result.store.list() == []  # its content is not shown: this version cannot read it
    assert asides(db_path) == []  # not damage: left where it is


def test_a_folder_that_cannot_be_made_works_in_memory(
    tmp_path: Path, opened: list[OpenedHistory]
) -> None:
    (tmp_path / "data").write_text("a file where the data folder should be")
    result = open_(opened, tmp_path / "data" / "conversations.sqlite3")
    assert result.store.in_memory and result.notice is not None
    assert "Cannot open the chat history" in result.notice
    result.store.create("still usable")
