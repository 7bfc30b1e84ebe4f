"""The history file's tables, and how an older file is brought up to them.

Format 1 had conversations with a title and times only. Format 2 adds what a
conversation remembers of how it is written:

- ``mode``: "chat" (turns through the model's chat template) or "completion"
  (one text the model continues in place: base models, which have no template);
- ``preset``: the name of the preset the conversation started from ("" none);
- ``branched_from``: for a branch (Branch from here), the start of the message
  it was branched at, so that the list can say which one ("" not a branch).

A format-1 file gains the columns (with those defaults) when it is opened, in
the same transaction that reads its version; a Gambit that reads format 1
only then refuses it as "written by a newer Gambit", as it refuses any.
"""

from __future__ import annotations

import sqlite3
from typing import Final

SCHEMA_VERSION: Final = 2  # PRAGMA user_version of files this code writes
MODES: Final = ("chat", "completion")

# The columns format 2 added to conversations, declared once: in the table a
# new file is made with, and as ALTER TABLE adds them to a format-1 file.
_ADDED: Final = (
    ("mode", "TEXT NOT NULL DEFAULT 'chat' CHECK (mode IN ('chat', 'completion'))"),
    ("preset", "TEXT NOT NULL DEFAULT ''"),
    ("branched_from", "TEXT NOT NULL DEFAULT ''"),
)

# Positions are unique per conversation; that constraint's index also serves
# ordering and counting. Without AUTOINCREMENT the id of the newest row can be
# handed out again after it is deleted; nothing keeps ids of deleted rows.
TABLES: Final = (
    """
    CREATE TABLE IF NOT EXISTS conversations (
        id          INTEGER PRIMARY KEY,
        title       TEXT    NOT NULL,
        created_at  REAL    NOT NULL,
        updated_at  REAL    NOT NULL,
        """
    + ",\n        ".join(f"{name} {declaration}" for name, declaration in _ADDED)
    + "\n    )",
    "CREATE INDEX IF NOT EXISTS conversations_by_update ON conversations (updated_at)",
    """
    CREATE TABLE IF NOT EXISTS messages (
        id               INTEGER PRIMARY KEY,
        conversation_id  INTEGER NOT NULL
                         REFERENCES conversations (id) ON DELETE CASCADE,
        position         INTEGER NOT NULL,
        role             TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content          TEXT    NOT NULL,
        complete         INTEGER NOT NULL DEFAULT 1 CHECK (complete IN (0, 1)),
        stats            TEXT,
        created_at       REAL    NOT NULL,
        UNIQUE (conversation_id, position)
    )
    """,
)

# The columns this code reads: checked at every open (a garbled schema, or
# another program's file, is reported as damaged rather than half-read).
READ_CHECKS: Final = (
    "SELECT id, title, created_at, updated_at, mode, preset, branched_from"
    " FROM conversations LIMIT 0",
    "SELECT id, conversation_id, position, role, content, complete, stats, created_at"
    " FROM messages LIMIT 0",
)


def bring_up_to_date(conn: sqlite3.Connection) -> None:
    """Create the tables where there are none, and add the columns a format-1
    file lacks (inside the caller's write transaction)."""
    for statement in TABLES:
        conn.execute(statement)
    have = {row[1] for row in conn.execute("PRAGMA table_info(conversations)")}
    for name, declaration in _ADDED:
        if name not in have:
            conn.execute(f"ALTER TABLE conversations ADD COLUMN {name} {declaration}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
