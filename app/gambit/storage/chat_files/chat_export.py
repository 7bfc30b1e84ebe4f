"""Conversations written out: as JSON that imports back, and as Markdown to read.

The JSON format (docs/export.md) is an object ``{"format": "gambit-chats",
"version": 1, "exported_at": ..., "conversations": [...]}``: each conversation
with its title, times and messages, each message with its role, text
(``content``), time, whether it was finished (``complete``) and the figures
stored with it (``stats``). A conversation's ``messages`` are OpenAI-style
messages with more fields, so a tool that reads those reads these.
``gambit.storage.chat_files.chat_import`` reads it back.

Times are seconds since 1970 (UTC), as stored: a float's JSON text reads
back as the same float, so nothing shifts on the way round. Figures that
are not finite numbers (none are written today) are written as null, since
JSON has no other way to say them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.chat_store.rows import ConversationSummary, StoredMessage, completion_text
from gambit.storage.reply_stats import DELIBERATE_STOPS, reply_footer
from gambit.words import counted

FORMAT_NAME = "gambit-chats"
FORMAT_VERSION = 1  # what this code writes; chat_import reads up to it

ExportFormat = Literal["md", "json"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("md", "json")

Conversation = tuple[ConversationSummary, Sequence[StoredMessage]]

# Role headings in Markdown: the role's own name, since an export may hold
# conversations imported from other tools, which Gambit did not answer.
_HEADINGS = {"system": "System", "user": "User", "assistant": "Assistant"}


def read_conversations(
    store: ConversationStore, ids: Sequence[int] | None = None
) -> list[Conversation]:
    """The conversations ``ids`` (in that order, each once), or all of them as
    the sidebar lists them (None); ``ConversationNotFoundError`` for an id
    that does not exist."""
    summaries = store.list() if ids is None else [store.get(i) for i in dict.fromkeys(ids)]
    return [(summary, store.messages(summary.id)) for summary in summaries]


def export_text(conversations: Sequence[Conversation], fmt: ExportFormat) -> str:
    return to_json(conversations) if fmt == "json" else to_markdown(conversations)


# -------------------------------------------------------------------- JSON
def to_json(conversations: Sequence[Conversation], exported_at: float | None = None) -> str:
    document = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "exported_at": time.time() if exported_at is None else exported_at,
        "conversations": [_conversation_json(c, m) for c, m in conversations],
    }
    return json.dumps(document, ensure_ascii=False, indent=1, allow_nan=False) + "\n"


def _conversation_json(
    conv: ConversationSummary, messages: Sequence[StoredMessage]
) -> dict[str, Any]:
    return {
        "id": conv.id,  # its id in the history it came from (an import gives new ones)
        "title": conv.title,
        "created_at": conv.created_at,
        "updated_at": conv.updated_at,
        "mode": conv.mode,
        "preset": conv.preset,
        "branched_from": conv.branched_from,
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at,
                "complete": m.complete,
                "stats": None if m.stats is None else _finite(m.stats),
            }
            for m in messages
        ],
    }


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(v) for key, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# ---------------------------------------------------------------- Markdown
def to_markdown(conversations: Sequence[Conversation]) -> str:
    """The conversations one after another, each under its title, each
    message under its role, a reply's figures in italics under it."""
    return "\n---\n\n".join(_conversation_markdown(c, m) for c, m in conversations)


def _conversation_markdown(conv: ConversationSummary, messages: Sequence[StoredMessage]) -> str:
    lines = [
        f"# {_escape(' '.join(conv.title.split()))}",
        "",
        f"*{counted(len(messages), 'message')} · started {local_time(conv.created_at)} · "
        f"updated {local_time(conv.updated_at)}*",
        "",
    ]
    if conv.completion:  # one text, as the window shows it, and the last part's figures
        text = completion_text(messages)
        notes = [_reply_note(m) for m in messages if m.role == "assistant"]
        lines += ["*Completion mode: the model continued this text.*", "", _closed_fences(text)]
        return "\n".join([*lines, "", f"*{_escape(notes[-1])}*"] if notes and notes[-1] else lines)
    for m in messages:
        lines += [f"## {_HEADINGS.get(m.role, m.role)} · {local_time(m.created_at)}", ""]
        if m.content:
            lines += [_closed_fences(m.content), ""]
        note = _reply_note(m) if m.role == "assistant" else ""
        if note:
            lines += [f"*{_escape(note)}*", ""]
    return "\n".join(lines)


def _reply_note(m: StoredMessage) -> str:
    record = m.record
    footer = reply_footer(record)
    if m.complete or record.stop in DELIBERATE_STOPS:
        return footer
    return " · ".join(part for part in (footer, "unfinished") if part)


def local_time(t: float) -> str:
    """Local time to the minute: "2025-03-14 09:26"."""
    return dt.datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M")


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|])")


def _escape(text: str) -> str:
    """Plain text (a title, a figures line) that Markdown shows as it is."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _closed_fences(text: str) -> str:
    """``text`` with a code block it leaves open closed (a reply cut off in the
    middle of one), so that the headings after it are not read as code."""
    open_fence: str | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match is None:
            continue
        fence = match.group(1)
        if open_fence is None:
            open_fence = fence
        elif (
            fence[0] == open_fence[0]
            and len(fence) >= len(open_fence)
            and not line.strip(fence[0] + " ")
        ):
            open_fence = None
    return text if open_fence is None else f"{text}\n{open_fence}"


def export_file_name(fmt: ExportFormat, title: str | None = None) -> str:
    """A file name to offer: "gambit-<title>.md" for one conversation, else
    "gambit-chats-<date>.json"."""
    if title is not None:
        slug = re.sub(r"[^\w-]+", "-", title.casefold()).strip("-_")[:48].strip("-_")
        return f"gambit-{slug or 'chat'}.{fmt}"
    return f"gambit-chats-{dt.date.today():%Y-%m-%d}.{fmt}"
