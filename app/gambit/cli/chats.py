"""``gambit-cli chats ...``: the chat history from the terminal: list the
conversations, export them as Markdown or JSON, import a file of them
(docs/export.md). The same history the window keeps (``GAMBIT_HOME`` moves it)."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

from gambit.errors import GambitError
from gambit.fsutil import write_atomic
from gambit.storage.chat_files.chat_export import (
    EXPORT_FORMATS,
    ExportFormat,
    export_text,
    local_time,
    read_conversations,
)
from gambit.storage.chat_files.chat_file import MAX_FILE_BYTES, MAX_MESSAGES
from gambit.storage.chat_files.chat_import import add_chat_file, read_chat_file
from gambit.storage.chat_store.conversations import ConversationStore, default_store_path
from gambit.words import counted

_MARKDOWN_SUFFIXES = (".md", ".markdown")


def add_chats_parser(sub: Any) -> None:
    """Add ``chats`` and its commands to the CLI's subparsers."""
    chats = sub.add_parser(
        "chats", help="your conversations: list, export as Markdown or JSON, import"
    )
    csub = chats.add_subparsers(dest="chats_command", required=True)
    csub.add_parser("list", help="the conversations, latest first: id, messages, time, title")

    p = csub.add_parser(
        "export",
        help="conversations as Markdown (to read) or JSON (imports back)",
        description="Write the conversations ID ... (all of them without ID) as Markdown, "
        "to read, or as JSON, which `chats import` reads back (roles, texts, times and each "
        "reply's statistics; docs/export.md).",
    )
    p.add_argument("ids", nargs="*", type=int, metavar="ID", help="a conversation (`chats list`)")
    p.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        help="md or json (default json, or md when --out ends in .md)",
    )
    p.add_argument("--out", type=Path, metavar="FILE", help="write FILE (default: standard output)")

    p = csub.add_parser(
        "import",
        help="add the conversations of a JSON file (a Gambit export, or OpenAI-style messages)",
        description="Add the conversations of FILE as new ones (never merged into existing "
        'ones): a Gambit JSON export, or OpenAI-style {"messages": [...]} (one object, a '
        "list of them, or one per line), whose text is kept and whose images and tool "
        f"messages are left out. At most {MAX_FILE_BYTES // 2**20} MiB and "
        f"{MAX_MESSAGES:,} messages; a file that cannot be imported changes nothing.",
    )
    p.add_argument("file", type=Path, metavar="FILE")


def run_chats(args: argparse.Namespace) -> int:
    command = args.chats_command
    if command == "list":
        return cmd_list()
    if command == "export":
        return cmd_export(args.ids, args.format, args.out)
    return cmd_import(args.file)


def _reader() -> ConversationStore:
    """The history to read: with no history file yet, an empty one (none is made)."""
    path = default_store_path()
    return ConversationStore(path, in_memory=not path.is_file())


def cmd_list() -> int:
    with _reader() as store:
        conversations = store.list()
        path = store.path
    if not conversations:
        print(f"No conversations yet (the history is {path}).")
        return 0
    table = [("ID", "MESSAGES", "UPDATED", "TITLE")]
    table += [(str(c.id), str(c.n_messages), local_time(c.updated_at), c.title)
              for c in conversations]  # fmt: skip
    id_w, n_w, at_w = (max(len(row[i]) for row in table) for i in range(3))
    if isinstance(sys.stdout, io.TextIOWrapper):  # a title the terminal cannot show: "?"s
        sys.stdout.reconfigure(errors="replace")
    for ident, n, at, title in table:
        print(f"{ident:>{id_w}}  {n:>{n_w}}  {at:<{at_w}}  {title}")
    return 0


def cmd_export(ids: list[int], fmt: ExportFormat | None, out: Path | None) -> int:
    if fmt is None:
        markdown = out is not None and out.suffix.lower() in _MARKDOWN_SUFFIXES
        fmt = "md" if markdown else "json"
    with _reader() as store:
        conversations = read_conversations(store, ids or None)
    text = export_text(conversations, fmt)
    if out is None:
        # UTF-8 whatever the terminal's encoding: this is a file's content
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
        return 0
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise GambitError(f"Cannot write {out}: {exc.strerror or exc}.") from exc
    n_messages = sum(len(messages) for _, messages in conversations)
    print(
        f"Exported {counted(len(conversations), 'conversation')} with "
        f"{counted(n_messages, 'message')} to {out} ({fmt})."
    )
    return 0


def cmd_import(file: Path) -> int:
    chat_file = read_chat_file(file)  # read and checked before the history is opened
    with ConversationStore(default_store_path()) as store:
        result = add_chat_file(store, chat_file, str(file))
    ids = result.ids
    if ids:
        span = str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}"
        print(f"{result.message()} New ids: {span}.")
    else:
        print(result.message())
    return 0
