"""Reading the user's turns (read-only) and keeping measurements, on real SQLite
files and real JSON files under tmp_path."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from gambit.errors import GambitError
from gambit.storage import measurements
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.prompts.history_turns import list_conversations, read_turns
from gambit.storage.settings import Settings


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.sqlite3"
    with ConversationStore(path) as store:
        a = store.create("First")
        store.add_message(a, "user", "one")
        store.add_message(a, "assistant", "reply one")
        store.add_message(a, "user", "two")
        store.add_message(a, "assistant", "")  # a reply that failed: left out
        store.add_message(a, "user", "three")
        store.add_message(a, "assistant", "reply three")
        b = store.create("Second")
        store.add_message(b, "user", "four")
        store.create("Empty")
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_turns_are_the_latest_user_messages_with_what_came_before(db: Path) -> None:
    before = _digest(db)
    turns = read_turns(db, last=3)
    assert [t.text for t in turns] == ["two", "three", "four"]  # oldest first
    two, three, four = turns
    assert [(m.role, m.content) for m in two.messages] == [
        ("user", "one"), ("assistant", "reply one"), ("user", "two"),
    ]  # fmt: skip
    # the unanswered "two" and its empty reply are left out, as the chat does
    assert [m.content for m in three.messages] == ["one", "reply one", "three"]
    assert (four.title, [m.content for m in four.messages]) == ("Second", ["four"])
    with_system = read_turns(db, last=1, system_prompt="Be brief.")
    assert [m.role for m in with_system[0].messages] == ["system", "user"]
    assert _digest(db) == before  # read-only: not a byte changed


def test_turns_of_chosen_conversations_only(db: Path) -> None:
    convs = list_conversations(db)
    assert [(c.title, c.n_user_turns) for c in convs] == [("Second", 1), ("First", 3)]
    first = next(c.id for c in convs if c.title == "First")
    assert [t.text for t in read_turns(db, last=20, conversation_ids=[first])] == [
        "one", "two", "three",
    ]  # fmt: skip
    assert read_turns(db, conversation_ids=[]) == []


def test_no_history_and_a_damaged_file_say_so(tmp_path: Path) -> None:
    with pytest.raises(GambitError, match="no chat history to measure on yet"):
        read_turns(tmp_path / "missing.sqlite3")
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(GambitError, match="Cannot read the chat history"):
        list_conversations(bad)


def _report(headline: str, started: str, **rec: Any) -> dict[str, Any]:
    return {
        "started": started,
        "target": "/models/t.gguf",
        "draft": "/models/d.gguf",
        "turns": 4,
        "suites": {"ALL": {}},
        "recommendation": {"headline": headline, **rec},
    }


def test_measurements_are_saved_and_listed_newest_first(tmp_path: Path) -> None:
    folder = tmp_path / "measurements"
    first = measurements.save(_report("old", "2026-01-01T10:00:00", off=True), folder)
    second = measurements.save(_report("new", "2026-01-01T11:00:00", off=True), folder)
    (folder / "measure-99999999-garbage.json").write_text("{", encoding="utf-8")
    listed = measurements.list_saved(folder)
    assert [m.path for m in listed] == [second, first]  # the unreadable one is skipped
    assert listed[0].headline == "new" and listed[0].title == "2026-01-01 11:00 · 4 turns"
    assert measurements.load(second)["recommendation"]["headline"] == "new"
    assert measurements.list_saved(tmp_path / "none") == []
    not_one = tmp_path / "x.json"
    not_one.write_text(json.dumps([1, 2]), encoding="utf-8")
    with pytest.raises(GambitError, match="not a Gambit measurement"):
        measurements.load(not_one)


def test_a_recommendation_becomes_settings(tmp_path: Path) -> None:
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    base = Settings(drafter="lookup", policy="adaptive", tree_drafts=True, gamma_max=4)
    rec = {"off": False, "drafter": "draft", "policy": "fixed", "gamma": 8, "tree": False}
    report = {**_report("x", "t", **rec), "draft": str(draft)}
    new = measurements.recommended_settings(base, report)
    assert (new.drafter, new.draft_model, new.policy, new.fixed_gamma) == (
        "draft", str(draft), "fixed", 8,
    )  # fmt: skip
    assert new.gamma_max == 8 and not new.tree_drafts and new.speculation
    off = measurements.recommended_settings(base, _report("Speculation off", "t", off=True))
    assert off == base.with_(speculation=False)
    missing = {**report, "draft": str(tmp_path / "gone.gguf")}
    with pytest.raises(GambitError, match="cannot be applied: Draft model file not found"):
        measurements.recommended_settings(base, missing)
    thin = _report("Not enough evidence yet: measure more turns", "t", off=True, apply=False)
    with pytest.raises(GambitError, match="nothing to apply: Not enough evidence yet"):
        measurements.recommended_settings(base, thin)


def test_measurements_saved_in_one_millisecond_list_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "measurements"
    folder.mkdir()
    names = ["measure-20261201-001630-100.json", "measure-20261201-001630-100-2.json",
             "measure-20261201-001630-100-10.json", "measure-20261201-001630-101.json"]  # fmt: skip
    for i, name in enumerate(names):
        (folder / name).write_text(json.dumps(_report(str(i), "t")), encoding="utf-8")
    assert [m.headline for m in measurements.list_saved(folder)] == ["3", "2", "1", "0"]
