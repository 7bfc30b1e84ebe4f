"""The conversation store, on real SQLite files."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from gambit.errors import GambitError
from gambit.storage.chat_store import conversations as conv_module
from gambit.storage.chat_store.conversations import (
    ConversationStore,
    default_store_path,
    message_title,
)
from gambit.storage.chat_store.schema import SCHEMA_VERSION
from gambit.storage.chat_store.store_errors import (
    ConversationNotFoundError,
    ConversationStoreError,
    MessageNotFoundError,
)
from gambit.storage.documents import Document, compose


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "history" / "conversations.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[ConversationStore]:
    with ConversationStore(db_path) as s:
        yield s


def ids(store: ConversationStore, search: str = "") -> list[int]:
    return [c.id for c in store.list(search)]


def test_new_file_gets_schema_wal_and_foreign_keys(db_path: Path, store: ConversationStore) -> None:
    assert db_path.is_file()
    with closing(sqlite3.connect(db_path)) as other:
        assert other.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in other.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"conversations", "messages"} <= tables
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_create_and_list(store: ConversationStore) -> None:
    assert store.list() == []
    a = store.create()
    b = store.create("  Recipes  ")
    summaries = store.list()
    assert [s.id for s in summaries] == [b, a]  # newest first
    assert summaries[0].title == "Recipes"
    assert summaries[1].title == "New chat"
    assert summaries[0].n_messages == 0
    assert summaries[0].preview == ""
    assert summaries[0].created_at == summaries[0].updated_at


def test_get(store: ConversationStore) -> None:
    c = store.create("Hello")
    store.add_message(c, "system", "You are terse.")
    store.add_message(c, "user", "Hi\n\n  there")
    summary = store.get(c)
    assert (summary.id, summary.title, summary.n_messages) == (c, "Hello", 2)
    assert summary.preview == "Hi there"  # one line; system prompts are not previews
    assert store.get(c) == store.list()[0]


def test_preview_is_shortened(store: ConversationStore) -> None:
    c = store.create()
    store.add_message(c, "assistant", "word " * 500)
    preview = store.get(c).preview
    assert len(preview) <= conv_module.PREVIEW_CHARS
    assert preview.endswith("…")


def test_search_title_and_content_ignoring_case(store: ConversationStore) -> None:
    pasta = store.create("Pasta recipes")
    physics = store.create("Homework")
    store.add_message(physics, "user", "Explain QUANTUM tunnelling")
    store.add_message(physics, "assistant", "Sure.")
    russian = store.create("Вопрос")
    store.add_message(russian, "user", "Привет, мир")

    assert ids(store, "pasta") == [pasta]
    assert ids(store, "quantum") == [physics]  # a message, not the title
    assert ids(store, "  Tunnel ") == [physics]  # surrounding spaces ignored
    assert ids(store, "привет") == [russian]  # case folding beyond ASCII
    assert ids(store, "вопрос") == [russian]
    assert ids(store, "e") == [physics, pasta]  # order as in list()
    assert ids(store, "nothing like this") == []
    assert ids(store, "") == ids(store) == [russian, physics, pasta]


def test_search_treats_percent_and_underscore_literally(store: ConversationStore) -> None:
    percent = store.create("Discount")
    store.add_message(percent, "user", "Is 50% off a good deal?")
    underscore = store.create("Code")
    store.add_message(underscore, "user", "rename my_var please")
    plain = store.create("Other")
    store.add_message(plain, "user", "50 people, myxvar, 100 percent")

    assert ids(store, "50%") == [percent]
    assert ids(store, "%") == [percent]
    assert ids(store, "my_var") == [underscore]
    assert ids(store, "_") == [underscore]
    assert ids(store, "\\") == []


def test_rename(store: ConversationStore) -> None:
    a = store.create("Old")
    b = store.create("Newer")
    store.rename(a, "  Fresh title ")
    assert store.get(a).title == "Fresh title"
    assert ids(store) == [b, a]  # renaming does not move it up
    with pytest.raises(ValueError, match="empty"):
        store.rename(a, "   ")
    assert store.get(a).title == "Fresh title"


def test_delete_cascades_to_messages(store: ConversationStore) -> None:
    keep = store.create("Keep")
    gone = store.create("Gone")
    store.add_message(keep, "user", "stay")
    store.add_message(gone, "user", "one")
    store.add_message(gone, "assistant", "two")
    store.delete(gone)
    assert ids(store) == [keep]
    assert store._conn.execute(
        "SELECT COUNT(*) FROM messages WHERE conversation_id = ?", (gone,)
    ).fetchone() == (0,)
    assert [m.content for m in store.messages(keep)] == ["stay"]


def test_add_message_moves_conversation_first(store: ConversationStore) -> None:
    a = store.create("A")
    b = store.create("B")
    c = store.create("C")
    assert ids(store) == [c, b, a]
    store.add_message(a, "user", "bump")
    assert ids(store) == [a, c, b]
    before = store.get(a).updated_at
    store.add_message(b, "user", "bump")
    assert ids(store) == [b, a, c]
    # Strictly increasing even when the clock has not moved between writes
    assert store.get(b).updated_at > before


def test_messages_in_order_with_fields(store: ConversationStore) -> None:
    c = store.create()
    m1 = store.add_message(c, "system", "Be brief.")
    m2 = store.add_message(c, "user", "Hi")
    m3 = store.add_message(c, "assistant", "Hello!")
    msgs = store.messages(c)
    assert [m.id for m in msgs] == [m1, m2, m3]
    assert [m.role for m in msgs] == ["system", "user", "assistant"]
    assert all(m.conversation_id == c and m.complete and m.stats is None for m in msgs)
    assert msgs[0].created_at <= msgs[2].created_at
    assert store.get(c).n_messages == 3


def test_invalid_role_rejected(store: ConversationStore) -> None:
    c = store.create()
    with pytest.raises(ValueError, match="role"):
        store.add_message(c, "tool", "x")  # type: ignore[arg-type]
    assert store.messages(c) == []


def test_partial_reply_then_completed(store: ConversationStore) -> None:
    c = store.create()
    store.add_message(c, "user", "Tell me a story")
    reply = store.add_message(c, "assistant", "Once upon", complete=False)
    [_, partial] = store.messages(c)
    assert (partial.content, partial.complete) == ("Once upon", False)

    stats = {"tokens": 42, "tokens_per_s": 31.5, "acceptance": [0.9, 0.5], "policy": "adaptive"}
    store.update_message(reply, "Once upon a time, the end.", complete=True, stats=stats)
    [_, done] = store.messages(c)
    assert (done.id, done.content, done.complete, done.stats) == (
        reply,
        "Once upon a time, the end.",
        True,
        stats,
    )
    store.update_message(reply, "Shorter.", complete=False)
    [_, again] = store.messages(c)
    assert (again.content, again.complete, again.stats) == ("Shorter.", False, None)


def test_update_message_moves_conversation_first(store: ConversationStore) -> None:
    a = store.create()
    reply = store.add_message(a, "assistant", "")
    b = store.create()
    store.update_message(reply, "done", complete=True)
    assert ids(store) == [a, b]


def test_stats_round_trip_json(store: ConversationStore) -> None:
    c = store.create()
    stats = {
        "n": 3,
        "rate": 12.25,
        "nested": {"gamma": [1, 2, 3], "ok": True, "none": None},
        "text": "γ ✓",
    }
    m = store.add_message(c, "assistant", "x", stats=stats)
    [stored] = store.messages(c)
    assert stored.id == m
    assert stored.stats == stats


def test_delete_from_for_regenerate(store: ConversationStore) -> None:
    c = store.create()
    other = store.create()
    store.add_message(other, "user", "untouched")
    store.add_message(c, "user", "Q1")
    store.add_message(c, "assistant", "A1")
    store.add_message(c, "user", "Q2")
    a2 = store.add_message(c, "assistant", "A2")
    assert store.delete_from(a2) == 1
    assert [m.content for m in store.messages(c)] == ["Q1", "A1", "Q2"]
    assert ids(store)[0] == c

    q1 = store.messages(c)[0].id
    assert store.delete_from(q1) == 3
    assert store.messages(c) == []
    assert [m.content for m in store.messages(other)] == ["untouched"]

    # Positions continue correctly after a cut: the new reply comes last
    store.add_message(c, "user", "again")
    store.add_message(c, "assistant", "fresh")
    assert [m.content for m in store.messages(c)] == ["again", "fresh"]


def test_reopen_restores_everything(db_path: Path) -> None:
    with ConversationStore(db_path) as first:
        a = first.create("First")
        first.add_message(a, "user", "question")
        reply = first.add_message(a, "assistant", "partial", complete=False, stats={"t": 1.5})
        b = first.create("Second")
        first.add_message(b, "user", "other")
        listed = first.list()
        messages_a = first.messages(a)
    assert not db_path.with_name(db_path.name + "-wal").exists()  # folded back on close

    with ConversationStore(db_path) as second:
        assert second.list() == listed
        assert second.messages(a) == messages_a
        assert second.messages(a)[1].id == reply
        assert second.messages(a)[1].stats == {"t": 1.5}
        assert not second.messages(a)[1].complete
        # and it keeps working: new ids do not collide
        c = second.create("Third")
        assert c not in (a, b)
        assert ids(second) == [c, b, a]


def test_two_stores_on_one_file_see_each_others_writes(db_path: Path) -> None:
    with ConversationStore(db_path) as one, ConversationStore(db_path) as two:
        c = one.create("Shared")
        two.add_message(c, "user", "from two")
        assert [m.content for m in one.messages(c)] == ["from two"]


def test_missing_conversation_raises(store: ConversationStore) -> None:
    missing = store.create()
    store.delete(missing)
    calls: list[Callable[[], object]] = [
        lambda: store.get(missing),
        lambda: store.messages(missing),
        lambda: store.rename(missing, "x"),
        lambda: store.delete(missing),
        lambda: store.add_message(missing, "user", "x"),
    ]
    for call in calls:
        with pytest.raises(ConversationNotFoundError) as info:
            call()
        assert info.value.conv_id == missing
        assert isinstance(info.value, GambitError)
        assert str(missing) in str(info.value)


def test_missing_message_raises(store: ConversationStore) -> None:
    c = store.create()
    m = store.add_message(c, "user", "x")
    store.delete_from(m)
    with pytest.raises(MessageNotFoundError):
        store.update_message(m, "y", complete=True)
    with pytest.raises(MessageNotFoundError):
        store.delete_from(m)


def test_failed_write_rolls_back(store: ConversationStore) -> None:
    c = store.create()
    store.add_message(c, "user", "kept")
    with pytest.raises(TypeError):  # not JSON: refused before anything is written
        store.add_message(c, "assistant", "lost", stats={"bad": object()})
    with pytest.raises(RuntimeError), store._write() as conn:
        conn.execute("DELETE FROM messages")
        raise RuntimeError("crash mid-write")
    assert [m.content for m in store.messages(c)] == ["kept"]
    assert not store._conn.in_transaction


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    path.write_bytes(b"this is not sqlite, just some text that is long enough" * 20)
    with pytest.raises(ConversationStoreError, match="Cannot open"):
        ConversationStore(path)


def test_newer_schema_refused(db_path: Path) -> None:
    ConversationStore(db_path).close()
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ConversationStoreError, match="newer Gambit"):
        ConversationStore(db_path)


def test_closed_store_refuses_use(db_path: Path) -> None:
    s = ConversationStore(db_path)
    s.close()
    s.close()  # idempotent
    with pytest.raises(sqlite3.ProgrammingError):
        s.list()


def test_default_store_path_follows_gambit_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path))
    assert default_store_path() == tmp_path / "data" / "conversations.sqlite3"


def test_a_title_made_from_the_first_message_is_known_as_such(store: ConversationStore) -> None:
    notes = Document("notes.md", "Marta orders the chairs.")
    made = store.create(message_title("Plan the  garden\nparty"))
    first = store.add_message(made, "user", "Plan the  garden\nparty")
    store.add_message(made, "assistant", "Sure.")
    second = store.add_message(made, "user", "And the food?")
    assert store.get(made).title == "Plan the garden party"
    assert store.titled_after(first)
    assert not store.titled_after(second)  # (not the first message)

    attached = store.create(message_title(compose("", [notes])))
    only_a_file = store.add_message(attached, "user", compose("", [notes]))
    assert store.get(attached).title == "notes.md" and store.titled_after(only_a_file)

    store.rename(made, "Garden party")  # a title the user gave is theirs
    assert not store.titled_after(first)
    branch = store.branch(first)  # "… (branch)": the branch's own, kept too
    (copied,) = store.messages(branch)
    assert not store.titled_after(copied.id)


# The tables as format 1 wrote them (before a conversation had a mode).
_FORMAT_1 = (
    "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL,"
    " created_at REAL NOT NULL, updated_at REAL NOT NULL)",
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL"
    " REFERENCES conversations (id) ON DELETE CASCADE, position INTEGER NOT NULL,"
    " role TEXT NOT NULL, content TEXT NOT NULL, complete INTEGER NOT NULL DEFAULT 1,"
    " stats TEXT, created_at REAL NOT NULL, UNIQUE (conversation_id, position))",
    "INSERT INTO conversations VALUES (1, 'Old chat', 1.7e9, 1.7e9)",
    "INSERT INTO messages VALUES (1, 1, 0, 'user', 'Hello', 1, NULL, 1.7e9)",
    "PRAGMA user_version = 1",
)


@pytest.mark.parametrize("in_memory", [False, True])
def test_a_format_1_file_opens_as_chats_and_takes_modes(db_path: Path, in_memory: bool) -> None:
    db_path.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db_path)) as conn:
        for statement in _FORMAT_1:
            conn.execute(statement)
        conn.commit()
    with ConversationStore(db_path, in_memory=in_memory) as store:
        old = store.get(1)
        assert (old.title, old.mode, old.preset, old.branched_from) == ("Old chat", "chat", "", "")
        assert [m.content for m in store.messages(1)] == ["Hello"]
        store.set_mode(1, "completion")
        assert store.get(1).completion
    with closing(sqlite3.connect(db_path)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert version == (1 if in_memory else 2)  # (in memory, the file is only read)


def test_a_conversation_keeps_its_mode_and_a_branch_says_where_it_began(
    store: ConversationStore,
) -> None:
    text = store.create("A story", mode="completion", preset="Writer")
    assert store.get(text).completion and store.get(text).preset == "Writer"
    store.add_message(text, "user", "Once upon a time")
    at = store.add_message(text, "assistant", " there was a lighthouse keeper who counted ships.")
    branch = store.get(store.branch(at))
    assert branch.completion and branch.preset == "Writer"
    assert branch.branched_from == "there was a lighthouse keeper who counted ships."
    assert store.get(text).branched_from == ""
    store.set_mode(text, "chat")
    assert not store.get(text).completion
    with pytest.raises(ValueError, match="mode must be one of chat, completion"):
        store.set_mode(text, "notebook")
    with pytest.raises(ConversationNotFoundError):
        store.set_mode(text + 99, "chat")
