"""The local OpenAI-compatible server on the real engine: driven with OpenAI's
own client as editors do, and with raw HTTP for what a client library hides
(malformed bodies, a client that hangs up mid-stream)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from serving import DEADLINE_S, MODEL, PROMPT, Served, generate_cli

from gambit.engine.session import Engine
from gambit.serve.request_body import BODY_MAX_BYTES


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], **extra}


def test_greedy_replies_equal_the_cli_streamed_or_not_with_the_figures(
    served: Served, smol_q8_0: Path, smol_q4_1: Path
) -> None:
    client = served.client()
    assert [m.id for m in client.models.list().data] == [MODEL]
    whole = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=40
    )
    text = whole.choices[0].message.content
    assert text and text == generate_cli(smol_q8_0, smol_q4_1, 40)
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage is not None and whole.usage.completion_tokens > 0
    figures = (whole.model_extra or {})["gambit"]
    assert (
        figures["drafted_tokens"] > 0
        and 0 < figures["accepted_tokens"] <= figures["drafted_tokens"]
    )
    assert figures["tokens_per_pass"] >= 1.0 and figures["mean_gamma"] > 0
    assert figures["speedup"] is not None and figures["baseline_tokens_per_s"] > 0
    assert figures["accepted_by_source"] == {"draft model": figures["accepted_tokens"]}

    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": PROMPT}], temperature=0,
            max_tokens=40, stream=True,
        )
    )  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    last = chunks[-1]
    assert last.choices[0].finish_reason == whole.choices[0].finish_reason
    assert (last.model_extra or {})["gambit"]["drafted_tokens"] > 0
    # The metrics saw both replies, with drafts accepted by position.
    status, text_metrics = served.raw("GET", "/metrics")
    assert status == 200
    assert re.search(r'^gambit_replies_total\{finish="(stop|length)"\} 2$', text_metrics, re.M)
    assert re.search(
        r'^gambit_draft_position_accepted_total\{position="1"\} [1-9]', text_metrics, re.M
    )
    assert re.search(r"^gambit_speedup_count 2$", text_metrics, re.M)


def test_bad_requests_get_openai_style_errors(served: Served) -> None:
    cases: list[tuple[bytes | str, int, str]] = [
        ("{not json", 400, "not valid JSON"),
        ("[1, 2]", 400, "must be a JSON object"),
        (json.dumps({"model": MODEL}), 400, "messages must be a list of messages"),
        (json.dumps(chat(model="gpt-4")), 404, "does not exist here"),
        (json.dumps(chat(temperature="hot")), 400, "temperature must be a number"),
        (json.dumps(chat(top_p=0)), 400, "top_p must be more than 0"),
        (json.dumps(chat(max_tokens=10**6)), 400, "max_tokens must be between 1 and 1,023"),
        (json.dumps(chat(stop=["a", "b", "c", "d", "e"])), 400, "stop takes at most 4"),
        (json.dumps(chat(messages=[{"role": "robot", "content": "hi"}])), 400, "needs a role"),
        (b"x" * (BODY_MAX_BYTES + 1), 413, "over"),
    ]
    for body, status, says in cases:
        got, payload = served.raw("POST", "/v1/chat/completions", body)
        assert got == status, (body[:60], payload)
        error = payload["error"]
        assert says in error["message"] and error["type"], error
    # A conversation longer than the context: 400, naming the limits.
    long = "word " * 3000
    got, payload = served.raw(
        "POST",
        "/v1/chat/completions",
        json.dumps(chat(messages=[{"role": "user", "content": long}])),
    )
    assert got == 400 and "context" in payload["error"]["message"]
    assert "1,024" in payload["error"]["message"]
    # The server is still well after all of it.
    got, payload = served.raw("POST", "/v1/chat/completions", json.dumps(chat(max_tokens=4)))
    assert got == 200 and payload["choices"][0]["message"]["content"]


EARLIER = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        # The body's shape before the model it names (issue 35: this was a 404,
        # "The model None does not exist here").
        ({"messages": "hello"}, "messages", "messages must be a list of messages"),
        (chat(model=None), "model", "model must be the model's name"),
        # Nothing to reply to, as the window refuses an empty message.
        (chat(messages=[{"role": "user", "content": " \n"}]), "messages", "is empty"),
        (
            chat(messages=[*EARLIER, {"role": "user", "content": ""}]),
            "messages",
            "messages[2], the last user message, is empty",
        ),
        (chat(messages=[{"role": "system", "content": "Hi"}]), "messages", "needs a user message"),
    ],
)
def test_a_malformed_or_empty_conversation_is_a_400_naming_its_field(
    served: Served, body: dict[str, Any], field: str, says: str
) -> None:
    got, payload = served.raw("POST", "/v1/chat/completions", json.dumps(body))
    assert got == 400, payload
    error = payload["error"]
    assert says in error["message"] and error["param"] == field, error
    assert error["type"] == "invalid_request_error"


def test_an_api_key_guards_every_route(engine: Engine) -> None:
    s = Served(engine, api_key="s3cret")
    try:
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").chat.completions.create(**chat(max_tokens=4))
        assert s.raw("GET", "/v1/models")[0] == 401
        assert s.raw("GET", "/metrics")[0] == 401
        good = s.client("s3cret").chat.completions.create(**chat(max_tokens=4))
        assert good.choices[0].message.content
        status, _ = s.raw("GET", "/metrics", headers={"Authorization": "Bearer s3cret"})
        assert status == 200
    finally:
        s.close()


def _stream_raw(port: int, body: dict[str, Any]) -> tuple[http.client.HTTPConnection, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})  # fmt: skip
    response = conn.getresponse()
    assert response.status == 200
    return conn, response


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "no answer in time (a hang)"
        time.sleep(0.05)


def test_a_client_that_hangs_up_stops_its_reply_and_a_full_queue_says_429(engine: Engine) -> None:
    s = Served(engine, queue_max=1)
    try:
        story = [{"role": "user", "content": "Write a very long story."}]
        conn, response = _stream_raw(s.port, chat(max_tokens=900, stream=True, messages=story))
        for _ in range(3):
            assert response.readline().startswith(b"data: ")
            response.readline()
        # While it runs, the queue is full: another request is told to come back.
        status, payload = s.raw("POST", "/v1/chat/completions", json.dumps(chat(max_tokens=4)))
        assert status == 429 and payload["error"]["type"] == "rate_limit_error"
        conn.close()  # the client goes away mid-stream

        def cancelled() -> bool:
            return s.metrics.replies.get("cancelled", 0) == 1

        _wait(cancelled)  # the reply stopped within a round, far short of 900 tokens
        assert s.metrics.completion_tokens < 900
        status, payload = s.raw("POST", "/v1/chat/completions", json.dumps(chat(max_tokens=8)))
        assert status == 200  # and the engine serves the next one
    finally:
        s.close()


def test_two_clients_at_once_get_their_own_replies(served: Served) -> None:
    prompts = [PROMPT, "Name three colours."]
    alone = {
        p: served.client()
        .chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": p}], temperature=0, max_tokens=24
        )
        .choices[0]
        .message.content
        for p in prompts
    }
    together: dict[str, str | None] = {}

    def ask(p: str) -> None:
        stream = served.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": p}], temperature=0,
            max_tokens=24, stream=True,
        )  # fmt: skip
        together[p] = "".join(c.choices[0].delta.content or "" for c in stream)

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert together == alone  # queued on the one engine thread: never interleaved


def test_gambit_cli_serve_answers_and_ends_cleanly_on_ctrl_c(
    smol_q8_0: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gambit", "serve", "--target", str(smol_q8_0), "--lookup",
         "--policy", "fixed", "--gamma", "2",
         "--threads", "2", "--ctx", "1024", "--port", "0", "--temp", "0"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not any("serving" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        url = re.search(r"at (http://\S+/v1)", lines[-1])
        assert url is not None
        client = openai.OpenAI(base_url=url.group(1), api_key="none", max_retries=0)
        reply = client.chat.completions.create(**chat(max_tokens=24))
        assert reply.choices[0].message.content
        # --gamma applies with serve's --policy fixed (issue 35: serve had no --policy,
        # and its --gamma did nothing): prompt lookup copies at most 2 tokens a round.
        figures = (reply.model_extra or {})["gambit"]
        assert figures["drafted_tokens"] > 0 and 0 < figures["mean_gamma"] <= 2, figures
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE_S) == 0
        assert "server stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_bench_through_the_server_compares_it_with_the_engine_directly(
    smol_q8_0: Path, smol_q4_1: Path, tmp_path: Path
) -> None:
    """`gambit-cli bench --through-server`: the same prompts directly and
    through the server (its caller a process of its own), and their ratio."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(json.dumps({"prompt": p, "suite": "chat"}) for p in (PROMPT, "Count to ten.")),
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gambit", "bench", "--through-server", "--prompts", str(prompts),
         "--target", str(smol_q8_0), "--draft", str(smol_q4_1), "--max-tokens", "16",
         "--threads", "2", "--ctx", "1024"],
        capture_output=True, text=True, timeout=DEADLINE_S * 3, check=False,
        env={**os.environ, "GAMBIT_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "[2] direct " in proc.stderr  # progress per prompt
    figures = dict(
        re.findall(r"^(direct \(as gambit-cli generate\)|through the local server|"
                   r"served / direct): +([0-9.]+)", proc.stdout, re.MULTILINE)
    )  # fmt: skip
    assert set(figures) == {
        "direct (as gambit-cli generate)", "through the local server", "served / direct",
    }  # fmt: skip
    direct, served = (float(figures[k]) for k in list(figures)[:2])
    assert direct > 0 and served > 0
    assert float(figures["served / direct"]) == pytest.approx(served / direct, abs=0.01)
    assert "(2 replies each)" in proc.stdout
    paired = re.search(
        r"^per prompt, geometric mean: +([0-9.]+) \(95 % interval ([0-9.]+)-([0-9.]+)\)$",
        proc.stdout, re.MULTILINE,
    )  # fmt: skip
    assert paired is not None, proc.stdout
    mean, low, high = (float(x) for x in paired.groups())
    # (two prompts: Student's t at 1 degree of freedom is 12.7, so where the
    # two ratios differ by ~3x under load the low end prints as 0.000)
    assert 0 <= low <= mean <= high and mean > 0
