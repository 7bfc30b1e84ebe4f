"""Conversations in the OpenAI-style ``{"messages": [...]}`` that other tools
write: a request logged by an app, a chat saved by a script, a fine-tuning
set. A file holds one such object, a JSON list of them, or one per line
(JSON Lines); each becomes one conversation.

Gambit keeps text. A message's ``content`` is a string, null, or a list of
parts whose ``"text"`` parts are joined (with nothing between them, as
Gambit's server joins them); other parts (images, audio, files) are left
out. ``developer`` messages (OpenAI's newer name) are kept as system
messages; ``tool`` and ``function`` messages, and messages left with no text
(an assistant's tool call), are left out. What is left out is counted and
said after the import. Any other role, or a value of the wrong type, refuses
the file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gambit.storage.chat_files.chat_file import (
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    ChatFile,
    Conversation,
    MessageCount,
    check_conversation_text,
    check_conversations,
    list_value,
    refuse,
    text_value,
    title_value,
)
from gambit.storage.chat_store.conversations import title_from
from gambit.storage.chat_store.rows import ConversationSummary, Role, StoredMessage
from gambit.storage.json_values import shown

KEPT_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
LEFT_OUT_ROLES = ("tool", "function")
IMPORTED_TITLE = "Imported chat"  # for a conversation with no title and no user text
# Conversations imported together are listed in the file's order: each a
# millisecond earlier than the one before it in the file.
_ORDER_STEP_S = 0.001
_PART_NAME = re.compile(r"[A-Za-z0-9_]{1,32}")


def read_openai(documents: Sequence[tuple[str, Any]], now: float) -> ChatFile:
    """The conversations of ``documents`` (each with where it is in the file:
    "" for a whole file, "line 3" for JSON Lines); raises ``RefusedError``."""
    if len(documents) == 1 and isinstance(documents[0][1], list):
        items = [(f"[{i}].", item) for i, item in enumerate(documents[0][1])]
    else:
        items = [(f"{where}: " if where else "", item) for where, item in documents]
    if not items:
        refuse("it holds no conversation (an empty list)")
    check_conversations(len(items))
    count = MessageCount()
    left_out: Counter[str] = Counter()
    conversations = tuple(
        _conversation(item, prefix, count, left_out, now - n * _ORDER_STEP_S)
        for n, (prefix, item) in enumerate(items)
    )
    return ChatFile("OpenAI-style messages", conversations, tuple(left_out.items()))


def _conversation(
    item: object, prefix: str, count: MessageCount, left_out: Counter[str], at: float
) -> Conversation:
    """``prefix``: where ``item`` is, as its values' paths begin ("[3].", "line 3: ")."""
    if not isinstance(item, dict) or "messages" not in item:
        refuse(
            f"{prefix.rstrip(': .') or 'it'} is neither a Gambit export "
            f'({{"format": "gambit-chats", ...}}) nor OpenAI-style messages '
            f'({{"messages": [...]}}): {shown(item)}'
        )
    items = list_value(item, "messages", prefix)
    count.add(len(items))
    messages = []
    for j, m in enumerate(items):
        message = _message(m, f"{prefix}messages[{j}]", left_out, at)
        if message is not None:
            messages.append(message)
    if not messages:
        refuse(f"{prefix}messages holds no message with text")
    check_conversation_text(messages, prefix.rstrip(": .") or "it")
    title = _title(item, prefix, messages)
    return ConversationSummary(0, title, at, at, len(messages), ""), tuple(messages)


def _title(item: dict[str, Any], prefix: str, messages: Sequence[StoredMessage]) -> str:
    """The object's own "title" (not a standard field, but some tools write one),
    else the start of its first user message, as a new chat is titled."""
    given = item.get("title")
    if given is not None and text_value(given, f"{prefix}title", MAX_TITLE_CHARS).strip():
        return title_value(given, f"{prefix}title")
    first = next((m for m in messages if m.role == "user"), messages[0])
    return title_from(first.content) or IMPORTED_TITLE


def _message(item: object, where: str, left_out: Counter[str], at: float) -> StoredMessage | None:
    if not isinstance(item, dict):
        refuse(f"{where} must be an object, not {shown(item)}")
    role = item.get("role")
    if role in LEFT_OUT_ROLES:
        left_out[f"{role} message"] += 1
        return None
    if not isinstance(role, str) or role not in KEPT_ROLES:
        known = ", ".join([*KEPT_ROLES, *LEFT_OUT_ROLES])
        refuse(f"{where}.role must be one of {known}, not {shown(role)}")
    text = _content(item.get("content"), f"{where}.content", left_out)
    if not text:
        called = item.get("tool_calls") or item.get("function_call")
        left_out["tool call" if called else "message without text"] += 1
        return None
    return StoredMessage(0, 0, KEPT_ROLES[role], text, True, None, at)


def _content(content: object, where: str, left_out: Counter[str]) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return text_value(content, where)
    if not isinstance(content, list):
        refuse(f"{where} must be text, a list of content parts or null, not {shown(content)}")
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            refuse(f'{where}[{k}] must be a content part ({{"type": ...}}), not {shown(part)}')
        if kind == "text":
            texts.append(text_value(part.get("text"), f"{where}[{k}].text"))
        else:
            left_out[f"{kind if _PART_NAME.fullmatch(kind) else 'other'} part"] += 1
    return text_value("".join(texts), where, MAX_TEXT_CHARS)
