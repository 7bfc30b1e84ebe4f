"""The generic tool-call format (gambit.serve.tools) read and written without
a model: the schema a reply must follow, with one call or several
(``parallel_tool_calls``), a reply read back as OpenAI's ``tool_calls``, and
earlier calls written back into the conversation in the same format."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from gambit.serve.tools import ToolError, read_reply, tool_message, tool_use

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": CITY}}
    for name in ("get_weather", "get_time")
]
TWO = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                      {"name": "get_time", "arguments": {"city": "Rome"}}]}  # fmt: skip


def _use(**extra: Any) -> Any:
    use = tool_use({"tools": TOOLS, **extra})
    assert use is not None
    return use


def test_one_call_unless_parallel_calls_are_asked_for() -> None:
    one = {"tool_call": {"name": "get_time", "arguments": {"city": "Oslo"}}}
    two = TWO
    single, parallel = _use(), _use(parallel_tool_calls=True)
    jsonschema.validate(one, single.schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(two, single.schema())
    jsonschema.validate(two, parallel.schema())
    with pytest.raises(jsonschema.ValidationError):  # (at least one call)
        jsonschema.validate({"tool_calls": []}, parallel.schema())
    with pytest.raises(jsonschema.ValidationError):  # (and at most PARALLEL_CALLS_MAX)
        jsonschema.validate({"tool_calls": TWO["tool_calls"] * 5}, parallel.schema())
    assert '"tool_calls": [' in parallel.instructions()
    assert '"tool_call": {' in single.instructions()


def test_parallel_calls_read_back_as_openai_s_tool_calls_each_with_its_id() -> None:
    said = read_reply(json.dumps(TWO))
    assert said.content is None
    assert [c["function"]["name"] for c in said.calls] == ["get_weather", "get_time"]
    assert [json.loads(c["function"]["arguments"]) for c in said.calls] == [
        {"city": "Oslo"}, {"city": "Rome"},
    ]  # fmt: skip
    assert len({c["id"] for c in said.calls}) == 2
    assert read_reply('{"tool_calls": [{"arguments": {}}]}').calls == ()  # (no name: text)
    assert read_reply('{"response": "Hi"}').content == "Hi"


def test_earlier_calls_go_back_in_the_format_the_reply_is_asked_for() -> None:
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "get_time", "arguments": json.dumps({"city": city})}}
             for i, city in enumerate(("Oslo", "Rome"))]  # fmt: skip
    raw = {"role": "assistant", "content": None, "tool_calls": calls}
    listed = tool_message(raw, 1, parallel=True)
    assert listed is not None
    jsonschema.validate(json.loads(listed.content), _use(parallel_tool_calls=True).schema())
    one_each = tool_message(raw, 1)
    assert one_each is not None and one_each.content.count('{"tool_call": ') == 2


def test_parallel_tool_calls_must_be_a_boolean() -> None:
    with pytest.raises(ToolError) as refused:
        tool_use({"tools": TOOLS, "parallel_tool_calls": "yes"})
    assert refused.value.param == "parallel_tool_calls"
