"""``gambit-cli chats list | export | import`` as a user runs them: a subprocess
on a real history file in its own data folder (``GAMBIT_HOME``). No model."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from gambit.storage.chat_store.conversations import ConversationStore

STATS = {
    "stop": "end of text", "tokens": 12, "tokens_per_s": 80.5, "speculation": True,
    "drafted_tokens": 8, "accepted_tokens": 6, "speedup": 1.25, "drafted": [1, 4, 7],
}  # fmt: skip


def chats(*args: str | Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    env.pop("DISPLAY", None)  # headless
    env.pop("WAYLAND_DISPLAY", None)
    return subprocess.run(
        [sys.executable, "-m", "gambit", "chats", *map(str, args)],
        capture_output=True, text=True, encoding="utf-8", env=env, timeout=120, check=False,
    )  # fmt: skip


def history(home: Path) -> Path:
    return home / "data" / "conversations.sqlite3"


def _fill(home: Path) -> None:
    with ConversationStore(history(home)) as store:
        first = store.create("Regex for dates")
        store.add_message(first, "user", "A regex for ISO dates?")
        store.add_message(first, "assistant", r"`\d{4}-\d{2}-\d{2}`", stats=STATS)
        second = store.create("Héllo ✨")
        store.add_message(second, "system", "Answer in French.")
        store.add_message(second, "user", "Hello")
        store.add_message(second, "assistant", "Bonj", complete=False, stats={"stop": "cancelled"})


def _content(db: Path) -> list[tuple[Any, ...]]:
    """Every conversation with its messages, every field but the ids."""
    with closing(sqlite3.connect(db)) as conn:
        convs = conn.execute("SELECT id, title, created_at, updated_at FROM conversations")
        return sorted(
            (*c[1:], tuple(conn.execute(
                "SELECT position, role, content, complete, stats, created_at FROM messages"
                " WHERE conversation_id = ? ORDER BY position", (c[0],)
            ).fetchall()))
            for c in convs.fetchall()
        )  # fmt: skip


def _dump(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


def _one_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gambit-cli: error: "), proc.stderr
    return lines[0]


def test_list_export_and_import_round_trip(tmp_path: Path) -> None:
    home, other = tmp_path / "home", tmp_path / "other"
    empty = chats("list", home=home)
    assert empty.returncode == 0 and empty.stdout.startswith("No conversations yet")
    assert not history(home).exists()  # reading made no history file

    _fill(home)
    listed = chats("list", home=home)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "MESSAGES", "UPDATED", "TITLE"]
    assert [row.split(maxsplit=4)[::4] for row in rows] == [
        ["2", "Héllo ✨"],
        ["1", "Regex for dates"],
    ]
    assert [row.split()[1] for row in rows] == ["3", "2"]

    exported = chats("export", home=home)  # JSON on standard output
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert [c["title"] for c in document["conversations"]] == ["Héllo ✨", "Regex for dates"]

    out = tmp_path / "saved" / "chats.json"
    written = chats("export", "--out", out, home=home)
    assert written.stdout.strip() == (f"Exported 2 conversations with 5 messages to {out} (json).")
    imported = chats("import", out, home=other)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == (
        f"Imported 2 conversations with 5 messages from {out} (a Gambit export). New ids: 1-2."
    )
    assert _content(history(other)) == _content(history(home))


def test_export_one_conversation_as_markdown(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _fill(home)
    proc = chats("export", "--format", "md", "1", home=home)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("# Regex for dates\n") and "Héllo" not in text
    assert "## User · " in text and "A regex for ISO dates?" in text
    assert "*12 tokens · 80.5 tok/s · accepted 6/8 (75%) · 1.25× vs plain*" in text
    out = tmp_path / "notes.md"  # the format follows the file's name
    assert chats("export", "--out", out, "2", home=home).returncode == 0
    assert out.read_text(encoding="utf-8").startswith("# Héllo ✨\n")
    missing = _one_error(chats("export", "7", home=home))
    assert missing == "gambit-cli: error: Conversation 7 does not exist (it may have been deleted)."


def test_openai_messages_import_and_a_bad_file_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": [{"role": "user", "content": 42}]}', encoding="utf-8")
    refused = _one_error(chats("import", bad, home=home))
    assert refused == (
        f"gambit-cli: error: Cannot import {bad}: messages[0].content must be text, a list "
        "of content parts or null, not 42. Nothing was imported."
    )
    assert not history(home).exists()  # not even an empty history

    _fill(home)
    before = _dump(history(home))
    assert _one_error(chats("import", bad, home=home)) == refused
    assert _dump(history(home)) == before

    good = tmp_path / "from-an-app.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                   {"type": "input_audio", "input_audio": {}}]},
                      {"role": "assistant", "content": "Hello!"}]},
        {"messages": [{"role": "user", "content": "Bye"}]},
    ]  # fmt: skip
    good.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    proc = chats("import", good, home=home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"Imported 2 conversations with 3 messages from {good} (OpenAI-style messages). "
        "Left out (Gambit keeps text only): 1 input_audio part. New ids: 3-4."
    )
    with ConversationStore(history(home)) as store:
        assert [m.content for m in store.messages(3)] == ["Hi", "Hello!"]
        assert store.get(4).title == "Bye"
