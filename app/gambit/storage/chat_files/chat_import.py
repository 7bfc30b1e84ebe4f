"""Conversations read from a file into the chat history: Gambit's own JSON
export (``gambit.storage.chat_files.chat_export``) or the OpenAI-style messages other
tools write (``gambit.storage.chat_files.chat_openai``). docs/export.md describes both.

The whole file is read and checked before anything is written, then every
conversation in it is added in one transaction
(``ConversationStore.import_conversations``): a file that fails a check
(``gambit.storage.chat_files.chat_file`` has the limits), or a write that fails
half-way, leaves the history exactly as it was. An import only adds
conversations (new ids, never merged into existing ones).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from gambit.errors import GambitError
from gambit.storage.chat_files.chat_export import FORMAT_NAME, FORMAT_VERSION
from gambit.storage.chat_files.chat_file import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_TEXT_CHARS,
    ChatFile,
    Conversation,
    MessageCount,
    RefusedError,
    check_conversation_text,
    check_conversations,
    line_value,
    list_value,
    refuse,
    text_value,
    time_value,
    title_value,
)
from gambit.storage.chat_files.chat_openai import read_openai
from gambit.storage.chat_store.conversations import ROLES, ConversationStore
from gambit.storage.chat_store.rows import ConversationSummary, StoredMessage
from gambit.storage.chat_store.schema import MODES
from gambit.storage.json_values import shown
from gambit.storage.reply_stats import stats_problem


class ChatImportError(GambitError):
    """A file that is not imported, and why; nothing was changed."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"Cannot import {source}: {reason}. Nothing was imported.")
        self.reason = reason


@dataclass(frozen=True)
class ImportResult:
    source: str
    file: ChatFile
    ids: tuple[int, ...]  # the new conversations' ids, in the file's order

    def message(self) -> str:
        """ "Imported 2 conversations with 14 messages from chats.json (a Gambit
        export)." and what was left out."""
        text = f"Imported {self.file.describe()} from {self.source} ({self.file.kind})."
        return f"{text} {self.file.left_out_text()}".strip()


def import_chat_file(store: ConversationStore, path: Path) -> ImportResult:
    """Add the conversations of the file at ``path`` to ``store``, all or none.
    Raises ``ChatImportError`` for a file that cannot be imported, and the
    store's ``ConversationStoreError`` when the history cannot be written."""
    return add_chat_file(store, read_chat_file(path), str(path))


def add_chat_file(store: ConversationStore, chat_file: ChatFile, source: str) -> ImportResult:
    """Add the conversations of ``chat_file`` (read from ``source``) in one transaction."""
    ids = store.import_conversations(chat_file.conversations)
    return ImportResult(source, chat_file, tuple(ids))


def read_chat_file(path: Path) -> ChatFile:
    """The conversations in the file at ``path``, checked; ``ChatImportError`` if it
    cannot be imported. Nothing is written."""
    try:
        return parse_chat_file(_read_bytes(Path(path)))
    except RefusedError as exc:
        raise ChatImportError(str(path), str(exc)) from None


def _read_bytes(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            # At most one byte past the limit, whatever the file claims to hold
            # (a file growing meanwhile, a device that never ends).
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        refuse(f"it cannot be read ({exc.strerror or exc})")
    if len(data) > MAX_FILE_BYTES:
        refuse(
            f"it is larger than {MAX_FILE_BYTES // 2**20} MiB, the most Gambit imports from "
            "one file (export fewer conversations per file)"
        )
    return data


def parse_chat_file(data: bytes, now: float | None = None) -> ChatFile:
    """The conversations in a file's bytes (``now``: the time an import without
    times of its own is given). Raises ``RefusedError``."""
    now = time.time() if now is None else now
    documents = _json_documents(_text(data))
    for where, document in documents:
        if _too_deep(document):
            refuse(f"{where or 'its JSON'} is nested more than {MAX_DEPTH} levels deep")
    first = documents[0][1]
    if len(documents) == 1 and isinstance(first, dict):
        if first.get("format") == FORMAT_NAME:
            return ChatFile("a Gambit export", _gambit_conversations(first, now))
        # (a request with "messages" may have a "format" of its own: Ollama's)
        if "format" in first and "messages" not in first:
            refuse(f'its format is {shown(first["format"])}, not "{FORMAT_NAME}"')
    return read_openai(documents, now)


# ------------------------------------------------------------- bytes to JSON
def _text(data: bytes) -> str:
    """The file's text: UTF-8 (with or without a byte order mark), or UTF-16
    with one (what Windows PowerShell's ``>`` writes)."""
    utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
    try:
        return data.decode("utf-16") if utf16 else data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start : exc.start + 1].hex()
        encoding = "UTF-16" if utf16 else "UTF-8"
        refuse(f"it is not {encoding} text (byte 0x{byte} at offset {exc.start:,})")


def _no_constant(name: str) -> NoReturn:
    refuse(f"it holds {name}, which is not a number in JSON")


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        refuse(f"{where} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")
    except RecursionError:  # deeper than Python's parser goes
        refuse(f"{where} is nested more than {MAX_DEPTH} levels deep")
    except ValueError:  # (the one other: an integer longer than Python reads)
        limit = f"{sys.get_int_max_str_digits():,}"
        refuse(f"{where} holds a number of more than {limit} digits, which Gambit does not read")


_NON_SPACE = re.compile(r"\S")


def _json_documents(text: str) -> list[tuple[str, Any]]:
    """The file as one JSON document, or as JSON Lines (a JSON object on each
    line, as fine-tuning sets are written); each with where it is ("line 3")."""
    if _NON_SPACE.search(text) is None:
        refuse("it is empty")
    end = text.find("\n")
    if end > 0 and _NON_SPACE.search(text, end) and _is_object(text[:end]):
        return [
            (f"line {n}", _loads(line, f"line {n}"))
            # (split at line feeds only: a JSON string may hold U+2028 and the like)
            for n, line in enumerate(text.split("\n"), start=1)
            if line.strip()
        ]
    return [("", _loads(text, "it"))]


def _is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line, parse_constant=_no_constant), dict)
    except (ValueError, RecursionError, RefusedError):
        return False


def _too_deep(document: Any) -> bool:
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return False


# ------------------------------------------------------------ Gambit's format
def _gambit_conversations(document: dict[str, Any], now: float) -> tuple[Conversation, ...]:
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        refuse(f"its format version must be a whole number of 1 or more, not {shown(version)}")
    if version > FORMAT_VERSION:
        refuse(
            f"it was written by a newer Gambit (format version {version}; this one reads "
            f"up to {FORMAT_VERSION}): update Gambit to import it"
        )
    items = list_value(document, "conversations", "")
    check_conversations(len(items))
    count = MessageCount()
    return tuple(
        _gambit_conversation(c, f"conversations[{i}]", count, now) for i, c in enumerate(items)
    )


def _gambit_conversation(item: object, where: str, count: MessageCount, now: float) -> Conversation:
    if not isinstance(item, dict):
        refuse(f"{where} must be an object, not {shown(item)}")
    title = title_value(item.get("title"), f"{where}.title")
    created = time_value(item, "created_at", where, now, now)
    updated = time_value(item, "updated_at", where, created, now)
    items = list_value(item, "messages", f"{where}.")
    count.add(len(items))
    messages = tuple(
        _gambit_message(m, f"{where}.messages[{j}]", created, now) for j, m in enumerate(items)
    )
    check_conversation_text(messages, where)
    mode = item.get("mode", "chat")
    if mode not in MODES:
        refuse(f"{where}.mode must be one of {', '.join(MODES)}, not {shown(mode)}")
    preset = line_value(item.get("preset", ""), f"{where}.preset")
    branched_from = line_value(item.get("branched_from", ""), f"{where}.branched_from")
    summary = ConversationSummary(0, title, created, updated, len(messages), "", mode, preset,
                                  branched_from)  # fmt: skip
    return summary, messages


def _gambit_message(item: object, where: str, default_time: float, now: float) -> StoredMessage:
    if not isinstance(item, dict):
        refuse(f"{where} must be an object, not {shown(item)}")
    role = item.get("role")
    if role not in ROLES:
        refuse(f"{where}.role must be one of {', '.join(ROLES)}, not {shown(role)}")
    content = text_value(item.get("content"), f"{where}.content")
    complete = item.get("complete", True)
    if not isinstance(complete, bool):
        refuse(f"{where}.complete must be true or false, not {shown(complete)}")
    stats = item.get("stats")
    if stats is not None:
        _check_stats(stats, f"{where}.stats")
    created = time_value(item, "created_at", where, default_time, now)
    return StoredMessage(0, 0, role, content, complete, stats, created)


def _check_stats(stats: object, where: str) -> None:
    if not isinstance(stats, dict):
        refuse(f"{where} must be an object or null, not {shown(stats)}")
    problem = stats_problem(stats, MAX_TEXT_CHARS)
    if problem:
        refuse(f"{where}.{problem}")
    try:  # as the store will write it
        json.dumps(stats, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        refuse(f"{where} holds an unpaired surrogate (a \\ud800-\\udfff escape), which is not text")
