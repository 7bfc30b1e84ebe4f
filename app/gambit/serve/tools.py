"""Tool calls in the local server, in a generic format any chat model can follow.

A request's ``tools`` (OpenAI's function tools) are described in the system
message, and the reply is constrained (``gambit.engine.text.grammar``) to
JSON that either calls one of them, ``{"tool_call": {"name": ..., "arguments":
{...}}}`` with the arguments its schema allows (with ``parallel_tool_calls``,
one or more: ``{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}``),
or (``tool_choice`` "auto") answers in text, ``{"response": "..."}`` — as
llama.cpp's generic tool-call handler does for templates that do not take
tools. A call comes back as
OpenAI's ``tool_calls``, and the conversation's earlier calls and their
results (``role: "tool"``) go back in the same format.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from gambit.engine.text.chat import Message

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # as OpenAI's API
TOOLS_MAX = 128
# Most calls in one reply with parallel_tool_calls: a small model that
# repeats its calls stops there, where it would run on to max_tokens and
# come back as text.
PARALLEL_CALLS_MAX = 8


class ToolError(ValueError):
    """A tools field that cannot be used: ``param`` names it."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema of the arguments


@dataclass(frozen=True)
class ToolUse:
    """The tools a request offers and how its reply may use them: ``choice``
    "auto" (call one, or answer in text), "required" (call one), or a tool's
    name (call that one); ``parallel``: one or more calls in a reply."""

    tools: tuple[Tool, ...]
    choice: str
    parallel: bool = False

    @property
    def offered(self) -> tuple[Tool, ...]:
        if self.choice in ("auto", "required"):
            return self.tools
        return tuple(t for t in self.tools if t.name == self.choice)

    def schema(self) -> dict[str, Any]:
        """The JSON the reply must be."""
        one = [_object(name={"const": t.name}, arguments=t.parameters) for t in self.offered]
        if self.parallel:
            items = one[0] if len(one) == 1 else {"anyOf": one}
            listed = {"type": "array", "items": items, "minItems": 1,
                      "maxItems": PARALLEL_CALLS_MAX}  # fmt: skip
            calls = [_object(tool_calls=listed)]
        else:
            calls = [_object(tool_call=call) for call in one]
        if self.choice == "auto":
            calls.append(_object(response={"type": "string"}))
        return calls[0] if len(calls) == 1 else {"anyOf": calls}

    def instructions(self) -> str:
        """What the system message says of the tools."""
        listed = "\n".join(
            json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters})
            for t in self.offered
        )
        call = '{"name": <a tool\'s name>, "arguments": <its arguments>}'
        if self.parallel:
            how = f'reply with {{"tool_calls": [{call}, ...]}} to call one or more tools'
        else:
            how = f'reply with {{"tool_call": {call}}} to call a tool'
        if self.choice == "auto":
            how += ', or with {"response": <your answer>} to answer without one'
        return f"You can use these tools:\n{listed}\nReply in JSON only: {how}."


def tool_use(body: dict[str, Any]) -> ToolUse | None:
    """The tools of a chat request and its ``tool_choice`` (None: no tools,
    or "none": a text reply)."""
    raw, choice = body.get("tools"), body.get("tool_choice")
    if raw is None:
        if choice not in (None, "none"):
            raise ToolError("tool_choice needs tools to choose from.", "tool_choice")
        return None
    if not isinstance(raw, list) or not 1 <= len(raw) <= TOOLS_MAX:
        raise ToolError(f"tools must be a list of 1 to {TOOLS_MAX} tools.", "tools")
    tools = tuple(_tool(t, i) for i, t in enumerate(raw))
    if len({t.name for t in tools}) < len(tools):
        raise ToolError("tools must have different names.", "tools")
    parallel = parallel_calls(body)
    if choice is None or choice in ("auto", "required", "none"):
        return None if choice == "none" else ToolUse(tools, choice or "auto", parallel)
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or named is None:
        raise ToolError(
            'tool_choice must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            "tool_choice",
        )
    if named not in {t.name for t in tools}:
        raise ToolError(
            f"tool_choice names {named!r}, which is not among the tools.", "tool_choice"
        )
    return ToolUse(tools, named, parallel)


def parallel_calls(body: dict[str, Any]) -> bool:
    """``parallel_tool_calls``: whether a reply may call several tools (off
    unless asked for, as llama.cpp's server has it)."""
    parallel = body.get("parallel_tool_calls", False)
    if not isinstance(parallel, bool):
        raise ToolError("parallel_tool_calls must be true or false.", "parallel_tool_calls")
    return parallel


def _tool(raw: object, i: int) -> Tool:
    where = f"tools[{i}]"
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or raw.get("type") != "function" or not isinstance(function, dict):
        raise ToolError(f'{where} must be {{"type": "function", "function": {{...}}}}.', "tools")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ToolError(f"{where}.function.name must be 1-64 letters, digits, _ or -.", "tools")
    description = function.get("description", "")
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(description, str) or not isinstance(parameters, dict):
        raise ToolError(f"{where}: description must be text, parameters an object.", "tools")
    return Tool(name, description, parameters)


def with_tools(messages: list[Message], use: ToolUse) -> list[Message]:
    """``messages`` with the tools described in the system message."""
    if messages and messages[0].role == "system":
        first = Message("system", f"{messages[0].content}\n\n{use.instructions()}")
        return [first, *messages[1:]]
    return [Message("system", use.instructions()), *messages]


def tool_message(raw: dict[str, Any], i: int, parallel: bool = False) -> Message | None:
    """A message of the tool conversation in the generic format: a tool's
    result (``role: "tool"``) as the user's turn, an assistant's calls as the
    JSON it wrote (``parallel``: as one list; None: an ordinary message)."""
    if raw.get("role") == "tool":
        content = raw.get("content")
        if not isinstance(content, str):
            raise ToolError(f"messages[{i}]: a tool's content must be text.", "messages")
        result = {"tool_call_id": raw.get("tool_call_id"), "content": content}
        return Message("user", json.dumps({"tool_response": result}, ensure_ascii=False))
    calls = raw.get("tool_calls") if raw.get("role") == "assistant" else None
    if calls is None:
        return None
    if not isinstance(calls, list) or not calls:
        raise ToolError(f"messages[{i}].tool_calls must be a list of calls.", "messages")
    written = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ToolError(f"messages[{i}]: a tool call needs its function's name.", "messages")
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            raise ToolError(
                f"messages[{i}]: a call's arguments must be JSON.", "messages"
            ) from None
        written.append({"name": function["name"], "arguments": arguments})
    if parallel:
        return Message("assistant", json.dumps({"tool_calls": written}, ensure_ascii=False))
    said = (json.dumps({"tool_call": w}, ensure_ascii=False) for w in written)
    return Message("assistant", " ".join(said))


@dataclass(frozen=True)
class ToolReply:
    """A reply read back: a call (``calls``) or text (``content``)."""

    content: str | None
    calls: tuple[dict[str, Any], ...] = ()


def read_reply(text: str) -> ToolReply:
    """OpenAI's form of a reply written in the generic format; text that is
    not (a reply cut by its length) is returned as it is."""
    try:
        found = json.loads(text)
    except ValueError:
        return ToolReply(text)
    if not isinstance(found, dict):
        return ToolReply(text)
    listed = found.get("tool_calls")
    calls = listed if isinstance(listed, list) else [found.get("tool_call")]
    if calls and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        return ToolReply(None, tuple(map(_openai_call, calls)))
    if isinstance(found.get("response"), str):
        return ToolReply(found["response"])
    return ToolReply(text)


def _openai_call(call: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
    function = {"name": call["name"], "arguments": arguments}
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function", "function": function}


def _object(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
