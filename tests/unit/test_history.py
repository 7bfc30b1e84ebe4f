"""Stored messages -> prompt messages that alternate, as strict templates demand."""

from __future__ import annotations

import pytest

from gambit.engine.text.chat import ChatTemplate, Message
from gambit.errors import ChatTemplateError
from gambit.storage.chat_store.rows import Role, StoredMessage
from gambit.storage.prompts.history import prompt_messages

# The alternation check of Mistral's and Llama 2's templates, shortened.
STRICT_TEMPLATE = """
{%- for message in messages if message.role != 'system' -%}
  {%- if (message.role == 'user') != (loop.index0 % 2 == 0) -%}
    {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
  {%- endif -%}
  [{{ message.role }}]{{ message.content }}
{%- endfor -%}
"""


def stored(*turns: tuple[Role, str]) -> list[StoredMessage]:
    return [
        StoredMessage(i, 1, role, content, complete=bool(content), stats=None, created_at=0.0)
        for i, (role, content) in enumerate(turns)
    ]


def roles(messages: list[Message]) -> list[str]:
    return [m.role for m in messages]


def test_an_empty_reply_goes_with_its_question() -> None:
    history = stored(
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", ""),  # failed before its first token
        ("user", "Q3"),
    )
    messages = prompt_messages(history)
    assert [m.content for m in messages] == ["Q1", "A1", "Q3"]
    ChatTemplate(STRICT_TEMPLATE).render(messages)  # does not raise


def test_the_old_way_breaks_a_strict_template() -> None:
    history = stored(("user", "Q1"), ("assistant", ""), ("user", "Q2"))
    skipped = [Message(m.role, m.content) for m in history if m.content]
    with pytest.raises(ChatTemplateError, match="alternate"):  # the template's own refusal
        ChatTemplate(STRICT_TEMPLATE).render(skipped)
    assert roles(prompt_messages(history)) == ["user"]


def test_a_question_without_a_reply_row_is_dropped() -> None:
    # The window was killed between storing the question and its reply's row.
    history = stored(("user", "Q1"), ("user", "Q1 again"))
    assert [m.content for m in prompt_messages(history)] == ["Q1 again"]


def test_a_partial_reply_is_kept() -> None:
    history = stored(("user", "Q1"), ("assistant", "Once upon a"), ("user", "go on"))
    assert roles(prompt_messages(history)) == ["user", "assistant", "user"]


def test_system_prompt_comes_first() -> None:
    history = stored(("user", "Q1"), ("assistant", ""), ("user", "Q2"))
    messages = prompt_messages(history, "  Be brief.  ")
    assert messages == [Message("system", "Be brief."), Message("user", "Q2")]
    assert prompt_messages(history, "   ")[0].role == "user"
    ChatTemplate(STRICT_TEMPLATE).render(messages)
    # A conversation's own system prompt (from its preset) is the one it keeps.
    own = stored(("system", "Answer in French."), ("user", "Q1"))
    assert prompt_messages(own, "Be brief.") == [
        Message("system", "Answer in French."), Message("user", "Q1")
    ]  # fmt: skip


def test_replies_left_without_their_question_keep_the_turns_alternating() -> None:
    # The per-message Delete removed the first question, and the one between two replies.
    history = stored(("assistant", "A0"), ("user", "Q1"), ("assistant", "A1"), ("assistant", "A2"))
    messages = prompt_messages(history)
    assert messages == [Message("user", "Q1"), Message("assistant", "A1\n\nA2")]
    ChatTemplate(STRICT_TEMPLATE).render(messages)
