"""What a request to the local server says, read and checked: each field that
is wrong is a 400 naming it (``ApiError``), before anything is decoded."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from gambit.engine.text.chat import Message
from gambit.engine.text.grammar import ANY_OBJECT, GrammarError, json_schema_grammar
from gambit.serve.tools import ToolError, ToolUse, tool_message, tool_use

BODY_MAX_BYTES = 4 * 1024 * 1024
STOP_MAX = 4  # as OpenAI's API
SCHEMA_MAX_BYTES = 64 * 1024  # a response_format's JSON schema, as JSON text
ROLES = ("system", "user", "assistant")


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, param: str | None = None,
                 code: str | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code

    def body(self) -> dict[str, Any]:
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param)


async def json_body(request: Request) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > BODY_MAX_BYTES:
        raise ApiError(413, f"The request body is over {BODY_MAX_BYTES:,} bytes.",
                       "invalid_request_error")  # fmt: skip
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > BODY_MAX_BYTES:
            raise ApiError(413, f"The request body is over {BODY_MAX_BYTES:,} bytes.",
                           "invalid_request_error")  # fmt: skip
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise invalid(f"The request body is not valid JSON ({exc}).") from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def chat_messages(value: object, parallel_calls: bool = False) -> list[Message]:
    """The conversation, refused as the window refuses an empty message: it
    needs a user message (a tool's result counts), and the last one must
    have text. ``parallel_calls``: an assistant's tool calls are written as
    one list (``gambit.serve.tools``)."""
    if not isinstance(value, list) or not value:
        raise invalid(
            'messages must be a list of messages, each {"role": ..., "content": ...}.', "messages"
        )
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in (*ROLES, "tool"):
            raise invalid(f"messages[{i}] needs a role of {', '.join(ROLES)} or tool.", "messages")
        try:  # (a tool's result, an assistant's calls: gambit.serve.tools)
            called = tool_message(m, i, parallel_calls)
        except ToolError as exc:
            raise invalid(str(exc), exc.param) from None
        out.append(called or Message(m["role"], content(m.get("content"), i)))
    if out[-1].role == "assistant":
        raise invalid("The last message must be the user's (or the system's).", "messages")
    users = [i for i, m in enumerate(out) if m.role == "user"]
    if not users:
        raise invalid("messages needs a user message to reply to.", "messages")
    if not out[users[-1]].content.strip():
        raise invalid(f"messages[{users[-1]}], the last user message, is empty.", "messages")
    return out


def content(content: object, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text only
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise invalid(f"messages[{i}]: only text content is supported.", "messages")
            text = part.get("text")
            if not isinstance(text, str):
                raise invalid(f"messages[{i}]: a text part needs its text.", "messages")
            texts.append(text)
        return "".join(texts)
    raise invalid(f"messages[{i}].content must be text.", "messages")


def number(body: dict[str, Any], name: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:  # fmt: skip
    value = body.get(name)
    if value is None:
        return float(default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(f"{name} must be a number.", name)
    if value < low or value > high or (low_open and value == low):
        side = f"more than {low:g}" if low_open else f"at least {low:g}"
        raise invalid(f"{name} must be {side} and at most {high:g}.", name)
    return float(value)


def stops(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise invalid("stop must be a text or a list of texts.", "stop")
    if len(stops) > STOP_MAX:
        raise invalid(f"stop takes at most {STOP_MAX} texts.", "stop")
    return tuple(stops)


def flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false.", name)
    return value


def text_prompt(value: object) -> str:
    """A completion's prompt: text, or a list of one text."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise invalid("prompt must be text (or a list of one text).", "prompt")
    return value


def response_grammar(value: object) -> str | None:
    """The grammar ``response_format`` asks for (None: free text)."""
    kinds = '{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", ...}'
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object",
                                                                "json_schema"):  # fmt: skip
        raise invalid(f"response_format must be {kinds}.", "response_format")
    if value["type"] == "text":
        return None
    schema: object = ANY_OBJECT
    if value["type"] == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise invalid(
                "response_format.json_schema.schema must be a JSON schema (an object).",
                "response_format",
            )
    text = json.dumps(schema)
    if len(text.encode()) > SCHEMA_MAX_BYTES:
        raise invalid(
            f"response_format: the schema is over {SCHEMA_MAX_BYTES // 1024} KB as JSON.",
            "response_format",
        )
    try:
        return json_schema_grammar(text)
    except GrammarError as exc:
        message = f"response_format: the schema cannot be used: {exc}"
        raise invalid(message, "response_format") from None


def tools_of(body: dict[str, Any]) -> tuple[ToolUse, str] | None:
    """The request's ``tools`` and ``tool_choice``, and the grammar of the
    reply they ask for (None: a text reply)."""
    try:
        use = tool_use(body)
    except ToolError as exc:
        raise invalid(str(exc), exc.param) from None
    if use is None:
        return None
    if body.get("response_format") not in (None, {"type": "text"}):
        raise invalid("response_format cannot be combined with tools here.", "response_format")
    try:  # (the functions' parameters must compile: a 400 names tools)
        return use, json_schema_grammar(use.schema())
    except GrammarError as exc:
        raise invalid(f"tools: a function's parameters cannot be used: {exc}", "tools") from None
