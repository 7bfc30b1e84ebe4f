"""The user's own turns, read from the chat history for a measurement to replay.

Reading never writes: every read opens the history file with SQLite's
read-only URI (``mode=ro``) on a connection of its own, so it is safe from
any thread and cannot change a byte of the database file, even while the
window has it open. (In WAL mode SQLite may create the empty ``-wal`` and
``-shm`` companions next to it when they are missing, as any reader does.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from gambit.engine.text.chat import Message
from gambit.errors import GambitError
from gambit.storage.chat_store.rows import StoredMessage
from gambit.storage.prompts.history import prompt_messages

DEFAULT_LAST_TURNS = 20


@dataclass(frozen=True)
class HistoryConversation:
    """A conversation as the measurement's picker lists it."""

    id: int
    title: str
    updated_at: float
    n_user_turns: int


@dataclass(frozen=True)
class HistoryTurn:
    """One user turn with the conversation before it, as the reply was asked for."""

    conversation_id: int
    title: str
    messages: tuple[Message, ...]  # ends with the user's message

    @property
    def text(self) -> str:
        return self.messages[-1].content


class HistoryReadError(GambitError):
    """The chat history cannot be read."""


def _connect(db: Path) -> sqlite3.Connection:
    if not db.is_file():
        raise HistoryReadError(
            f"There is no chat history to measure on yet ({db} does not exist): "
            "chat a little first, then measure."
        )
    try:
        return sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0)
    except sqlite3.Error as exc:
        raise HistoryReadError(f"Cannot read the chat history {db}: {exc}.") from exc


def list_conversations(db: Path) -> list[HistoryConversation]:
    """Conversations with at least one user turn, most recently updated first."""
    try:
        with closing(_connect(db)) as conn:
            rows = conn.execute(
                """
                SELECT c.id, c.title, c.updated_at,
                       (SELECT COUNT(*) FROM messages m
                         WHERE m.conversation_id = c.id AND m.role = 'user' AND m.content != '')
                  FROM conversations c
                 ORDER BY c.updated_at DESC, c.id DESC
                """
            ).fetchall()
    except sqlite3.Error as exc:
        raise HistoryReadError(f"Cannot read the chat history {db}: {exc}.") from exc
    return [HistoryConversation(int(i), str(t), float(u), int(n)) for i, t, u, n in rows if n]


def read_turns(
    db: Path,
    last: int = DEFAULT_LAST_TURNS,
    conversation_ids: Sequence[int] | None = None,
    system_prompt: str = "",
) -> list[HistoryTurn]:
    """The ``last`` user turns (newest by the time they were written) of the
    chosen conversations (None: all), oldest first, each with the conversation
    before it as the chat would have sent it (``storage.prompts.history.prompt_messages``)."""
    if last < 1:
        raise ValueError("last must be 1 or more")
    if conversation_ids is not None and not conversation_ids:
        return []
    where = ""
    params: list[object] = []
    if conversation_ids is not None:
        where = f" AND m.conversation_id IN ({', '.join('?' * len(conversation_ids))})"
        params += [int(i) for i in conversation_ids]
    try:
        with closing(_connect(db)) as conn:
            picked = conn.execute(
                "SELECT m.conversation_id, m.position FROM messages m"
                " WHERE m.role = 'user' AND m.content != ''" + where
                + " ORDER BY m.created_at DESC, m.id DESC LIMIT ?",
                (*params, last),
            ).fetchall()  # fmt: skip
            titles = dict(conn.execute("SELECT id, title FROM conversations").fetchall())
            stored = {cid: _messages(conn, cid) for cid in {int(c) for c, _ in picked}}
    except sqlite3.Error as exc:
        raise HistoryReadError(f"Cannot read the chat history {db}: {exc}.") from exc
    turns = []
    for cid, position in reversed(picked):
        before = [m for pos, m in stored[int(cid)] if pos <= position]
        messages = prompt_messages(before, system_prompt)
        turns.append(HistoryTurn(int(cid), str(titles.get(cid, "")), tuple(messages)))
    return turns


def _messages(conn: sqlite3.Connection, conv_id: int) -> list[tuple[int, StoredMessage]]:
    rows = conn.execute(
        "SELECT id, position, role, content, complete, created_at FROM messages"
        " WHERE conversation_id = ? ORDER BY position",
        (conv_id,),
    ).fetchall()
    return [
        (int(pos), StoredMessage(int(i), conv_id, role, content, bool(done), None, float(at)))
        for i, pos, role, content, done, at in rows
    ]
