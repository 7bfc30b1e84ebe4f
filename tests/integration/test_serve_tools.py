"""Tool calls through the local server with OpenAI's own client, on the real
models (gambit.serve.tools): a call whose arguments validate against the
function's schema, the same call streamed as deltas, its result sent back,
and a 400 naming the field for tools the server cannot use."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
from serving import DEADLINE_S, MODEL, Served

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "description":
     "The weather now in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description":
     "The time now in a city", "parameters": {"type": "object", "properties":
     {"city": {"type": "string"}}, "required": ["city"]}}},
]  # fmt: skip
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


def test_a_tool_call_whole_and_streamed_and_its_result_sent_back(served: Served) -> None:
    with served.client() as client:
        whole = client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
            max_tokens=64,
        )  # fmt: skip
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls or []
        assert call.function.name in ("get_weather", "get_time")
        schema = (
            WEATHER if call.function.name == "get_weather" else TOOLS[1]["function"]["parameters"]
        )
        jsonschema.validate(json.loads(call.function.arguments), schema)
        assert (whole.model_extra or {})["gambit"]["accepted_by_source"].get("grammar", 0) > 0

        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                max_tokens=64, stream=True,
            )
        )  # fmt: skip
        deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
        assert deltas[0].function.name == call.function.name
        joined = "".join(d.function.arguments or "" for d in deltas)
        assert json.loads(joined) == json.loads(call.function.arguments)
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

        # The call and its result go back; the model answers, or calls again.
        result = {
            "role": "tool",
            "tool_call_id": call.id,
            "content": '{"temp": 18, "sky": "clear"}',
        }
        answered = client.chat.completions.create(
            model=MODEL, messages=[*ASK, whole.choices[0].message.model_dump(), result],
            tools=TOOLS, temperature=0, max_tokens=64,
        )  # fmt: skip
        reply = answered.choices[0]
        assert reply.message.content or reply.message.tool_calls


def test_a_named_tool_is_the_one_called(served: Served) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    with served.client() as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0,
            max_tokens=64,
        )  # fmt: skip
    assert reply.choices[0].finish_reason == "tool_calls", reply.choices[0].message.content
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name == "get_time"


def test_parallel_calls_whole_and_streamed(served: Served) -> None:
    ask = [{"role": "user", "content": "What are the weather and the time in Paris?"}]
    common: dict[str, Any] = {"model": MODEL, "messages": ask, "tools": TOOLS, "temperature": 0,
                              "max_tokens": 320, "tool_choice": "required",
                              "parallel_tool_calls": True}  # fmt: skip
    with served.client() as client:
        whole = client.chat.completions.create(**common)
        chunks = list(client.chat.completions.create(**common, stream=True))
    calls = whole.choices[0].message.tool_calls or []
    assert whole.choices[0].finish_reason == "tool_calls" and calls
    for call in calls:
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        jsonschema.validate(json.loads(call.function.arguments), schema[call.function.name])
    streamed: dict[int, list[str]] = {}
    for delta in (d for c in chunks for d in (c.choices[0].delta.tool_calls or [])):
        streamed.setdefault(delta.index, []).append(
            delta.function.name or "" if delta.id else delta.function.arguments or ""
        )
    assert [(name, json.loads(arguments)) for name, arguments in streamed.values()] == [
        (c.function.name, json.loads(c.function.arguments)) for c in calls
    ]


def test_tools_the_server_cannot_use_are_a_400_naming_the_field(served: Served) -> None:
    nameless = [{"type": "function", "function": {"parameters": WEATHER}}]
    broken = [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]
    for extra, field in [
        ({"tools": nameless}, "tools"),
        ({"tools": "get_weather"}, "tools"),
        ({"tools": broken}, "tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"messages": [*ASK, {"role": "tool", "content": 5}]}, "messages"),
    ]:  # fmt: skip
        body = {"model": MODEL, "messages": ASK, **extra}
        status, answer = served.raw("POST", "/v1/chat/completions", json.dumps(body))
        assert status == 400 and answer["error"]["param"] == field, (extra, answer)
    with served.client() as client:  # ... and the server keeps serving
        again = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4)
    assert again.choices[0].message.content


def test_the_worked_example_in_the_server_s_documentation_runs(served: Served) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "server.md").read_text(encoding="utf-8")
    section = doc.split("### A worked example", 1)[1]
    script = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert script.count('base_url="http://127.0.0.1:8000/v1"') == 1
    script = script.replace("http://127.0.0.1:8000/v1", served.server.base_url)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE_S,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert set(said) == {"person", "call", "answer"}
    person = ast.literal_eval(said["person"])
    assert isinstance(person["name"], str) and isinstance(person["age"], int)
    name, arguments = said["call"].split(" ", 1)
    assert name == "get_weather"
    assert ast.literal_eval(arguments)["unit"] in ("celsius", "fahrenheit")
