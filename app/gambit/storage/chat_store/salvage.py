"""Reading back what can still be read of a damaged history file.

Each table is scanned by rowid forwards until the first unreadable page, then
backwards until the first unreadable page from the other end: a damaged page
in the middle costs the rows on it, not the whole table. Rows whose values
are not what the schema promises (a garbled role, text that is not text) are
left out. Messages whose conversation is lost are kept in a conversation
called "Recovered chat". Nothing here writes to the damaged file.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import struct
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gambit.storage.chat_store.conversations import ROLES
from gambit.storage.chat_store.rows import ConversationSummary, StoredMessage
from gambit.words import counted

log = logging.getLogger(__name__)

RECOVERED_TITLE = "Recovered chat"

_MAGIC = b"SQLite format 3\x00"
_CONVERSATION_COLUMNS = "title, created_at, updated_at"
_MESSAGE_COLUMNS = "conversation_id, position, role, content, complete, stats, created_at"


@dataclass(frozen=True)
class Salvage:
    """What was read back: conversations (oldest first) with their messages in order."""

    conversations: tuple[tuple[ConversationSummary, tuple[StoredMessage, ...]], ...]

    @property
    def n_messages(self) -> int:
        return sum(len(messages) for _, messages in self.conversations)

    def describe(self) -> str:
        n_conv, n_msg = len(self.conversations), self.n_messages
        return f"{counted(n_conv, 'conversation')} with {counted(n_msg, 'message')}"


def salvage(path: Path) -> Salvage:
    """Whatever can be read of the history file at ``path``; empty if nothing can."""
    try:  # read-only, with its write-ahead log if that was moved aside with it
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            return _read(conn)
    except sqlite3.Error as exc:
        log.info("salvage of %s: %s; trying a copy with a repaired header", path, exc)
    # A truncated file's header still counts the pages it lost, and SQLite then
    # refuses to read even the table list: read a copy whose header counts the
    # pages the file has.
    with tempfile.TemporaryDirectory(prefix="gambit-salvage-") as tmp:
        copy = Path(tmp) / "copy.sqlite3"
        try:
            if not _copy_with_page_count(path, copy):
                return Salvage(())
            with closing(sqlite3.connect(copy)) as conn:
                return _read(conn)
        except (OSError, sqlite3.Error) as exc:
            log.warning("salvage of %s: nothing could be read: %s", path, exc)
            return Salvage(())


def _read(conn: sqlite3.Connection) -> Salvage:
    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the schema, or raise
    conversations = _scan(conn, "conversations", _CONVERSATION_COLUMNS)
    messages = _scan(conn, "messages", _MESSAGE_COLUMNS)
    return _assemble(conversations, messages)


def _copy_with_page_count(src: Path, dst: Path) -> bool:
    """Copy ``src`` to ``dst`` with the header's page count (offset 28) set to the
    whole pages the file holds. False if ``src`` has no SQLite header at all."""
    with src.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(_MAGIC):
        return False
    (page_size,) = struct.unpack(">H", header[16:18])
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        return False
    n_pages = src.stat().st_size // page_size
    shutil.copyfile(src, dst)
    with dst.open("r+b") as f:
        f.truncate(n_pages * page_size)
        f.seek(28)
        f.write(struct.pack(">I", n_pages))
    return True


def _scan(conn: sqlite3.Connection, table: str, columns: str) -> dict[int, tuple[Any, ...]]:
    rows: dict[int, tuple[Any, ...]] = {}
    for order in ("ASC", "DESC"):
        try:
            for rowid, *values in conn.execute(
                f"SELECT rowid, {columns} FROM {table} ORDER BY rowid {order}"
            ):
                if rowid in rows:
                    break  # met the rows read from the other end
                rows[rowid] = tuple(values)
        except sqlite3.Error as exc:
            log.info("salvage: %s read %s stopped after %d rows: %s", table, order, len(rows), exc)
    return rows


def _number(value: object, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def _assemble(
    conversations: dict[int, tuple[Any, ...]], messages: dict[int, tuple[Any, ...]]
) -> Salvage:
    now = time.time()
    by_conv: dict[int, list[tuple[int, int, StoredMessage]]] = {}
    for msg_id, (conv_id, position, role, content, complete, stats, created_at) in messages.items():
        if role not in ROLES or not isinstance(content, str) or not isinstance(conv_id, int):
            continue
        message = StoredMessage(
            id=msg_id,
            conversation_id=conv_id,
            role=role,
            content=content,
            complete=complete == 1,
            stats=_stats(stats),
            created_at=_number(created_at, now),
        )
        order = position if isinstance(position, int) else msg_id
        by_conv.setdefault(conv_id, []).append((order, msg_id, message))

    result: list[tuple[ConversationSummary, tuple[StoredMessage, ...]]] = []
    for conv_id in sorted(set(conversations) | set(by_conv)):
        msgs = tuple(m for _, _, m in sorted(by_conv.get(conv_id, [])))
        if conv_id in conversations:
            title, created_at, updated_at = conversations[conv_id]
        else:  # its messages survived, the conversation's own row did not
            times = [m.created_at for m in msgs]
            title, created_at, updated_at = RECOVERED_TITLE, min(times), max(times)
        created = _number(created_at, now)
        summary = ConversationSummary(
            id=conv_id,
            title=title.strip() if isinstance(title, str) and title.strip() else RECOVERED_TITLE,
            created_at=created,
            updated_at=_number(updated_at, created),
            n_messages=len(msgs),
            preview="",
        )
        result.append((summary, msgs))
    return Salvage(tuple(result))


def _stats(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        stats = json.loads(text)
    except ValueError:
        return None
    return stats if isinstance(stats, dict) else None
