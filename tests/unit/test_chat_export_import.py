"""Export and import of conversations (gambit.storage.chat_files.chat_export, chat_import,
chat_openai) on real SQLite files: what goes out comes back field for field,
other tools' OpenAI-style files come in as documented, and a file that cannot
be imported gets one clear error and leaves the database as it was."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gambit.storage.chat_files.chat_export import (
    FORMAT_NAME,
    export_file_name,
    read_conversations,
    to_json,
    to_markdown,
)
from gambit.storage.chat_files.chat_file import (
    MAX_CONVERSATION_CHARS,
    MAX_CONVERSATIONS,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_MESSAGES,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
)
from gambit.storage.chat_files.chat_import import ChatImportError, import_chat_file, read_chat_file
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.history_memory import HistoryMemory, Tokenizer

# A reply's figures as the window stores them (gambit.ui.window.reply_record.stats_dict).
REPLY_STATS: dict[str, Any] = {
    "stop": "end of text",
    "error": None,
    "tokens": 42,
    "tokens_per_s": 95.25,
    "baseline_tokens_per_s": 61.0,
    "speedup": 1.5614754098360655,
    "drafted_tokens": 30,
    "accepted_tokens": 24,
    "accepted_by_drafter": {"lookup": 14, "draft": 10},
    "acceptance_rate": 0.8,
    "ttft_ms": 31.7,
    "p99_ms": 12.25,
    "busy": "other programs used 1.0 of 2 cores",
    "speculation": True,
    "drafted": [3, 10, 2, 14],
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    with ConversationStore(tmp_path / "history.sqlite3") as s:
        yield s


def _fill(store: ConversationStore) -> None:
    """Conversations with every kind of field a history holds."""
    code = store.create("Parse a config — naïve 🐍 *version*")
    store.add_message(code, "system", "You are terse.")
    store.add_message(code, "user", "Write parse_config(path).\r\nTabs\there, a NUL \x00 too.")
    store.add_message(code, "assistant", "```python\ndef parse_config(path):\n", complete=True,
                      stats=REPLY_STATS)  # fmt: skip
    store.add_message(code, "user", "Again, shorter")
    store.add_message(code, "assistant", "def parse", complete=False,
                      stats={"stop": "interrupted", "drafted": [2, 7]})  # fmt: skip
    cut = store.create("Window closed mid-reply")
    store.add_message(cut, "user", "Hello?")
    store.add_message(cut, "assistant", "", complete=False, stats={"stop": "window closed"})
    store.create("New chat")  # an empty one, as the window makes at start


def _fill_story(store: ConversationStore) -> None:
    """A completion-mode text from a preset, and a branch of it."""
    story = store.create("A story", mode="completion", preset="Writer")
    store.add_message(story, "user", "Once upon a time")
    store.branch(
        store.add_message(story, "assistant", " a keeper counted ships.", stats=REPLY_STATS)
    )


def _rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Everything in the file but ids, conversations in id order."""
    with closing(sqlite3.connect(db)) as conn:
        conversations = conn.execute(
            "SELECT id, title, created_at, updated_at, mode, preset, branched_from"
            " FROM conversations ORDER BY id"
        ).fetchall()
        messages = conn.execute(
            "SELECT conversation_id, position, role, content, complete, stats, created_at"
            " FROM messages ORDER BY conversation_id, position"
        ).fetchall()
    order = {row[0]: n for n, row in enumerate(conversations)}
    return {
        "conversations": [row[1:] for row in conversations],
        "messages": [
            (order[m[0]], m[1], m[2], m[3], m[4], json.loads(m[5]) if m[5] else None, m[6])
            for m in messages
        ],
    }


def _dump(db: Path) -> list[str]:
    """The database's whole content, as SQL: what 'unchanged' compares."""
    with closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


def _by_title(rows: dict[str, list[tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """Each conversation with its messages, independent of ids and insertion order."""
    convs = rows["conversations"]
    return sorted(
        (c, tuple(m[1:] for m in rows["messages"] if m[0] == n)) for n, c in enumerate(convs)
    )


# ----------------------------------------------------------------- round trip
def test_export_then_import_gives_back_every_field(
    store: ConversationStore, tmp_path: Path
) -> None:
    _fill(store)
    _fill_story(store)
    exported = tmp_path / "chats.json"
    exported.write_text(to_json(read_conversations(store)), encoding="utf-8")

    with ConversationStore(tmp_path / "other.sqlite3") as other:
        result = import_chat_file(other, exported)
    assert result.file.kind == "a Gambit export"
    assert result.message().startswith("Imported 5 conversations with 11 messages from ")
    assert _by_title(_rows(tmp_path / "other.sqlite3")) == _by_title(_rows(store.path))
    # (and as the store reads it: flags and figures as dicts, as the window shows them)
    with ConversationStore(tmp_path / "other.sqlite3") as other:
        back = {c.title: other.messages(c.id) for c in other.list()}
    reply = back["Parse a config — naïve 🐍 *version*"][2]
    assert reply.stats == REPLY_STATS and reply.complete
    assert back["Window closed mid-reply"][1].complete is False
    assert back["New chat"] == []
    with ConversationStore(tmp_path / "other.sqlite3") as other:
        branch = next(c for c in other.list() if c.branched_from)
    assert (branch.mode, branch.preset, branch.branched_from) == (
        "completion",
        "Writer",
        "a keeper counted ships.",
    )


def test_import_adds_new_conversations_and_never_merges(
    store: ConversationStore, tmp_path: Path
) -> None:
    _fill(store)
    before = _rows(store.path)
    old_ids = [c.id for c in store.list()]
    exported = tmp_path / "chats.json"
    exported.write_text(to_json(read_conversations(store)), encoding="utf-8")
    result = import_chat_file(store, exported)  # into the history it came from
    n = len(old_ids)
    assert len(result.ids) == n and min(result.ids) > max(old_ids)
    after = _rows(store.path)  # (conversations in id order: the originals first)
    assert after["conversations"][:n] == before["conversations"]
    assert [m for m in after["messages"] if m[0] < n] == before["messages"]
    copies = {
        "conversations": after["conversations"][n:],
        "messages": [(m[0] - n, *m[1:]) for m in after["messages"] if m[0] >= n],
    }
    assert _by_title(copies) == _by_title(before)


def test_one_conversation_exports_alone_in_the_same_format(store: ConversationStore) -> None:
    _fill(store)
    target = store.list()[1]
    document = json.loads(to_json(read_conversations(store, [target.id, target.id])))
    assert document["format"] == FORMAT_NAME and document["version"] == 1
    assert [c["title"] for c in document["conversations"]] == [target.title]
    first = document["conversations"][0]
    assert set(first) == {
        "id", "title", "created_at", "updated_at", "mode", "preset", "branched_from", "messages"
    }  # fmt: skip
    assert set(first["messages"][0]) == {"role", "content", "created_at", "complete", "stats"}


def test_markdown_reads_as_the_chat(store: ConversationStore) -> None:
    _fill(store)
    _fill_story(store)
    text = to_markdown(read_conversations(store))
    assert "# Parse a config — naïve 🐍 \\*version\\*" in text  # a title, not emphasis
    assert "## System · " in text and "## User · " in text and "## Assistant · " in text
    # the reply's figures, as the window's footer says them
    figures = "42 tokens · 95.2 tok/s · accepted 24/30 (80%): 14 lookup, 10 draft · 1.56× vs plain"
    assert f"*{figures} · timed while the machine was busy*" in text
    # the code block the reply left open is closed before the next heading
    block = text.split("def parse_config(path):\n", 1)[1]
    assert block.startswith("\n```\n")
    assert "*interrupted*" in text  # a reply cut off says so
    assert text.count("\n---\n") == 4  # five conversations
    # a completion-mode text reads as one text, its last part's figures under it
    story = text.split("# A story\n", 1)[1].split("\n---\n", 1)[0]
    assert "*Completion mode: the model continued this text.*" in story
    assert "\nOnce upon a time a keeper counted ships.\n" in story and "## " not in story
    assert f"*{figures} · timed while the machine was busy*" in story


def test_export_file_names() -> None:
    assert export_file_name("md", "Parse a config: naïve/…?") == "gambit-parse-a-config-naïve.md"
    assert export_file_name("json", "???") == "gambit-chat.json"
    assert export_file_name("json").startswith("gambit-chats-")


# ---------------------------------------------------------- OpenAI-style files
def _write(tmp_path: Path, content: Any, name: str = "in.json") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), "utf-8")
    return path


def test_openai_messages_with_content_parts(store: ConversationStore, tmp_path: Path) -> None:
    path = _write(tmp_path, {
        "model": "gpt-4o",
        "format": "json",  # (Ollama's requests have a format of their own)
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "this picture?"},
            ]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "1", "type": "function", "function": {"name": "look"}}]},
            {"role": "tool", "tool_call_id": "1", "content": "a cat"},
            {"role": "assistant", "content": "A cat."},
        ],
    })  # fmt: skip
    result = import_chat_file(store, path)
    assert result.message() == (
        f"Imported 1 conversation with 3 messages from {path} (OpenAI-style messages). "
        "Left out (Gambit keeps text only): 1 image_url part, 1 tool call, 1 tool message."
    )
    (conv,) = store.list()
    assert conv.id == result.ids[0] and conv.title == "What is in this picture?"
    messages = store.messages(conv.id)
    assert [(m.role, m.content, m.complete, m.stats) for m in messages] == [
        ("system", "Be brief.", True, None),
        ("user", "What is in this picture?", True, None),
        ("assistant", "A cat.", True, None),
    ]


def test_openai_list_and_json_lines_keep_the_files_order(
    store: ConversationStore, tmp_path: Path
) -> None:
    chats = [
        {"title": "First", "messages": [{"role": "user", "content": "one\u2028line"}]},
        {"messages": [{"role": "user", "content": "two"}, {"role": "assistant", "content": "2"}]},
    ]
    listed = import_chat_file(store, _write(tmp_path, chats, "list.json"))
    # Windows line ends; U+2028 written as it is (a line end to str.splitlines, not to JSON)
    lines = "\r\n".join(json.dumps(c, ensure_ascii=False) for c in chats) + "\r\n\r\n"
    jsonl = import_chat_file(store, _write(tmp_path, lines, "chats.jsonl"))
    shown = [c.id for c in store.list()]  # as the sidebar lists them
    titles = {c.id: c.title for c in store.list()}
    for result in (listed, jsonl):
        assert [titles[i] for i in result.ids] == ["First", "two"]
        assert shown.index(result.ids[0]) < shown.index(result.ids[1])  # the file's order
        assert store.messages(result.ids[0])[0].content == "one\u2028line"


def test_utf16_with_a_byte_order_mark_is_read(store: ConversationStore, tmp_path: Path) -> None:
    # what Windows PowerShell's `>` writes
    data = json.dumps({"messages": [{"role": "user", "content": "héllo"}]}).encode("utf-16")
    import_chat_file(store, _write(tmp_path, data))
    assert store.messages(store.list()[0].id)[0].content == "héllo"


# ------------------------------------------------------------- hostile files
def _gambit(messages: list[Any] | None = None, **conversation: Any) -> dict[str, Any]:
    message = {"role": "user", "content": "hi", "created_at": 1.7e9, "complete": True}
    return {
        "format": FORMAT_NAME,
        "version": 1,
        "conversations": [
            {"title": "t", "created_at": 1.7e9, "updated_at": 1.7e9,
             "messages": [message] if messages is None else messages, **conversation}
        ],
    }  # fmt: skip


def _message(**fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": "hi", **fields}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE: dict[str, tuple[Any, str]] = {
    "empty": ("", "it is empty"),
    "not JSON": ("{'messages': []}", "it is not JSON (Expecting property name enclosed in double "
                 "quotes at line 1, column 2)"),
    "cut short": (json.dumps(_gambit())[:-5], "it is not JSON"),
    "invalid UTF-8": (b'{"messages": [{"role": "user", "content": "caf\xe9"}]}',
                      "it is not UTF-8 text (byte 0xe9 at offset 46)"),
    "a number": ("42", "it is neither a Gambit export"),
    "an empty list": ("[]", "it holds no conversation"),
    "a list of strings": (json.dumps(["hi"]), '[0] is neither a Gambit export'),
    "another format": ({"format": "lmstudio", "chats": []}, 'its format is "lmstudio"'),
    "a newer version": ({**_gambit(), "version": 2}, "written by a newer Gambit"),
    "conversations not a list": ({**_gambit(), "conversations": {}},
                                 "conversations must be a list, not {}"),
    "messages not a list": (_gambit(messages="hi"),  # type: ignore[arg-type]
                            'conversations[0].messages must be a list, not "hi"'),
    "a role it does not know": (_gambit([_message(role="tool")]),
                                "conversations[0].messages[0].role must be one of system, user, "
                                'assistant, not "tool"'),
    "content not text": (_gambit([_message(content=["hi"])]),
                         'conversations[0].messages[0].content must be text, not ["hi"]'),
    "complete not a flag": (_gambit([_message(complete=1)]), ".complete must be true or false"),
    "stats not an object": (_gambit([_message(stats=[1])]), ".stats must be an object or null"),
    "stats of the wrong type": (_gambit([_message(stats={"accepted_tokens": "many"})]),
                                ".stats.accepted_tokens must be a whole number"),
    "chart points of the wrong shape": (_gambit([_message(stats={"series": [[0, 1]]})]),
                                        ".stats.series must be a list of at most 256"),
    "drafted runs past the text limit": (
        _gambit([_message(stats={"drafted": [0, 10**12]})]), ".stats.drafted covers more than"),
    "a title that is not text": (_gambit(title=7), "conversations[0].title must be text, not 7"),
    "a mode it does not know": (_gambit(mode="notebook"),
                                'conversations[0].mode must be one of chat, completion, not '
                                '"notebook"'),
    "a preset that is not text": (_gambit(preset=[1]), "conversations[0].preset must be text"),
    "a time that is text": (_gambit(created_at="yesterday"),
                            "conversations[0].created_at must be a time in seconds since 1970"),
    "a time in the future": (_gambit(updated_at=time.time() + 10 * 86400),
                             "more than a day ahead of this machine's clock"),
    "a time before 1970": (_gambit([_message(created_at=-1)]), "before 1970"),
    "NaN": ('{"messages": [{"role": "user", "content": "x"}], "n": NaN}',
            "it holds NaN, which is not a number in JSON"),
    "an integer of 5,000 digits": ('{"messages": [], "n": ' + "9" * 5000 + "}",
                                   "it holds a number of more than 4,300 digits"),
    "an unpaired surrogate": ('{"messages": [{"role": "user", "content": "a\\ud800b"}]}',
                              "messages[0].content holds an unpaired surrogate (\\ud800)"),
    "an unpaired surrogate in stats": (
        json.dumps(_gambit([_message(stats={"note": "\ud800"})])), ".stats holds an unpaired"),
    "an OpenAI role it does not know": ({"messages": [{"role": "robot", "content": "x"}]},
                                        'messages[0].role must be one of system, developer'),
    "a content part without a type": ({"messages": [{"role": "user", "content": [{"t": 1}]}]},
                                      'messages[0].content[0] must be a content part'),
    "no message with text": ({"messages": [{"role": "tool", "content": "x"}]},
                             "messages holds no message with text"),
    "a bad line of JSON Lines": ('{"messages": [{"role": "user", "content": "a"}]}\n{"messages"\n',
                                 "line 2 is not JSON"),
    "nested past the limit": ({"messages": [_message()], "x": json.loads(_nested(MAX_DEPTH))},
                              f"its JSON is nested more than {MAX_DEPTH} levels deep"),
    "nested past Python's parser": (_nested(100_000), "nested more than"),
    "a title past the limit": (_gambit(title="t" * (MAX_TITLE_CHARS + 1)),
                               f"conversations[0].title is longer than {MAX_TITLE_CHARS:,}"),
    "a message past the limit": ({"messages": [_message(content="x" * (MAX_TEXT_CHARS + 1))]},
                                 f"messages[0].content is longer than {MAX_TEXT_CHARS:,}"),
    "a conversation past the limit": (
        _gambit([_message(content="x" * MAX_TEXT_CHARS)] * (MAX_CONVERSATION_CHARS // MAX_TEXT_CHARS
                                                            + 1)),
        f"conversations[0] holds {MAX_CONVERSATION_CHARS + MAX_TEXT_CHARS:,} characters of text, "
        f"more than the {MAX_CONVERSATION_CHARS:,}"),
    "too many messages": (_gambit([_message()] * (MAX_MESSAGES + 1)),
                          f"it holds more than {MAX_MESSAGES:,} messages"),
    "too many conversations": ([{"messages": [_message()]}] * (MAX_CONVERSATIONS + 1),
                               f"it holds {MAX_CONVERSATIONS + 1:,} conversations"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_file_that_cannot_be_imported_changes_nothing(
    case: str, store: ConversationStore, tmp_path: Path
) -> None:
    content, reason = HOSTILE[case]
    _fill(store)
    before = _dump(store.path)
    path = _write(tmp_path, content)
    with pytest.raises(ChatImportError) as caught:
        import_chat_file(store, path)
    message = str(caught.value)
    assert message.startswith(f"Cannot import {path}: ") and reason in message, message
    assert message.endswith(". Nothing was imported.") and "\n" not in message
    assert _dump(store.path) == before


def test_a_file_past_the_size_limit_is_refused_unread(
    store: ConversationStore, tmp_path: Path
) -> None:
    _fill(store)
    before = _dump(store.path)
    path = tmp_path / "huge.json"
    with path.open("wb") as f:  # sparse: 64 MiB and one byte of nothing
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(ChatImportError, match="it is larger than 64 MiB"):
        import_chat_file(store, path)
    assert _dump(store.path) == before
    with pytest.raises(ChatImportError, match="it cannot be read"):
        read_chat_file(tmp_path / "missing.json")
    with pytest.raises(ChatImportError, match="it cannot be read"):
        read_chat_file(tmp_path)  # a folder


def test_a_write_that_fails_half_way_leaves_the_history_as_it_was(
    store: ConversationStore, tmp_path: Path
) -> None:
    _fill(store)
    many = [{"messages": [_message(content=f"chat {i}")]} for i in range(5)]
    path = _write(tmp_path, many)
    # The fourth conversation's message fails to insert, as a full disk would.
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute(
            "CREATE TRIGGER fail_on_fourth BEFORE INSERT ON messages"
            " WHEN NEW.content = 'chat 3' BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
        conn.commit()
    before = _dump(store.path)
    with pytest.raises(sqlite3.DatabaseError, match="disk full"):
        import_chat_file(store, path)
    assert _dump(store.path) == before


def test_lookup_memory_sees_imported_conversations_as_new_ones(
    store: ConversationStore, tmp_path: Path
) -> None:
    """Prompt lookup's memory of earlier chats syncs with the file by message
    ids and lengths (storage.history_memory): imported messages are new rows."""
    tokenizer = Tokenizer("utf8-bytes", 256, lambda text: list(text.encode("utf-8")))
    _fill(store)
    memory = HistoryMemory(store.path, tmp_path / "memory")
    index = memory.index(tokenizer)
    known = memory.last_sync.added
    reply = "Use pathlib.Path.read_text and json.loads for the config file."
    path = _write(tmp_path, {"messages": [_message(content="How?"),
                                          {"role": "assistant", "content": reply}]})  # fmt: skip
    import_chat_file(store, path)
    index = memory.index(tokenizer)
    assert known == 6  # (the empty reply is never a source)
    assert (memory.last_sync.added, memory.last_sync.removed) == (2, 0)
    match = index.match(list(b"Use pathlib.Path.read"))
    assert match is not None
    assert bytes(index.continuation(match.start, 100)).decode().startswith("_text and json")


def test_figures_from_a_file_read_as_the_footer_reads_them(
    store: ConversationStore, tmp_path: Path
) -> None:
    """Figures with only some keys (another version, a hand edit) import, and
    the footer the window and Markdown show is drawn from what is there."""
    stats = {"speculation": True, "drafted_tokens": 5, "extra": {"kept": [1, 2]}}
    path = _write(tmp_path, _gambit([{"role": "assistant", "content": "ok", "stats": stats}]))
    (conv_id,) = import_chat_file(store, path).ids
    assert store.messages(conv_id)[0].stats == stats
    assert "*accepted 0/5 (0%)*" in to_markdown(read_conversations(store, [conv_id]))
