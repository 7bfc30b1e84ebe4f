"""An OpenAI-compatible HTTP API over Gambit's engine (Starlette; uvicorn serves it).

- ``GET /v1/models``: the loaded target;
- ``POST /v1/chat/completions``: with and without ``stream`` (server-sent
  events, ending ``data: [DONE]``), ``temperature``, ``top_p``, ``max_tokens``
  (or ``max_completion_tokens``), ``stop``, ``seed``, ``response_format``
  (``json_object``, or ``json_schema``: the reply is masked to what the
  schema allows at every position a round verifies, ``engine.text.grammar``);
  the model's chat template, as in the window. Each response, and a stream's
  last chunk, carries the speculation figures under ``"gambit"``;
- ``POST /v1/completions``: a raw completion of ``prompt`` (base models
  too), or with ``suffix`` the middle between the two (fill-in-the-middle,
  laid out with the FIM tokens the model declares; a 400 naming ``suffix``
  for a model without them), with ``echo``, ``stream`` and the sampling
  fields above; one choice, no ``logprobs``;
- ``GET /metrics``: Prometheus text (``gambit.serve.prometheus``).

Safe by default: an API key, when set, is required on every route
(``Authorization: Bearer …``, else 401); no CORS unless origins are named;
request bodies and ``max_tokens`` are bounded; requests beyond
``queue_max`` running or waiting get 429. Errors are OpenAI-style objects.
A client that goes away stops its reply within a round.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gambit.engine.text.chat import Message
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.serve.jobs import EngineHost, Job, Outcome, TextPrompt
from gambit.serve.prometheus import ServeMetrics
from gambit.serve.request_body import (
    ApiError,
    chat_messages,
    flag,
    invalid,
    json_body,
    number,
    response_grammar,
    stops,
    text_prompt,
    tools_of,
)
from gambit.serve.tools import ToolReply, read_reply, with_tools
from gambit.words import counted

MAX_TOKENS_LIMIT = 32768  # as the settings' Max tokens
GENERATING_PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass(frozen=True)
class ServeOptions:
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    queue_max: int = 4  # requests running or waiting; beyond: 429
    # Sampling for what a request leaves out (the server's own settings).
    defaults: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 512


class _Queue:
    """A reply's text and outcome, handed from the engine thread to the request's task."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: asyncio.Queue[str | Outcome] = asyncio.Queue()

    def put(self, item: str | Outcome) -> None:  # (engine thread)
        with contextlib.suppress(RuntimeError):  # the server has stopped: nobody waits
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)


def create_app(host: EngineHost, options: ServeOptions, metrics: ServeMetrics) -> Starlette:
    api = _Api(host, options, metrics)
    middleware = []
    if options.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(options.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    routes = [
        Route("/v1/models", api.guard(api.models), methods=["GET"]),
        Route("/v1/chat/completions", api.guard(api.chat), methods=["POST"]),
        Route("/v1/completions", api.guard(api.completions), methods=["POST"]),
        Route("/metrics", api.guard(api.metrics_text), methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=middleware)


Endpoint = Callable[[Request], Any]


class _Api:
    def __init__(self, host: EngineHost, options: ServeOptions, metrics: ServeMetrics) -> None:
        self.host = host
        self.options = options
        self.metrics = metrics
        self.pending = 0  # requests running or waiting (the event loop's thread only)

    def guard(self, endpoint: Endpoint) -> Endpoint:
        """The API key check and OpenAI-style errors around ``endpoint``."""

        async def guarded(request: Request) -> Response:
            try:
                self._authorize(request)
                response: Response = await endpoint(request)
            except ApiError as exc:
                response = exc.response()
            if request.url.path in GENERATING_PATHS:
                self.metrics.request(response.status_code)
            return response

        return guarded

    def _authorize(self, request: Request) -> None:
        key = self.options.api_key
        if not key:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), key):
            raise ApiError(
                401, "Invalid or missing API key: send Authorization: Bearer <key>.",
                "invalid_request_error", code="invalid_api_key",
            )  # fmt: skip

    async def models(self, request: Request) -> Response:
        model = self.host.model_id()
        data = [{"id": model, "object": "model", "created": 0, "owned_by": "gambit"}]
        return JSONResponse({"object": "list", "data": data if model else []})

    async def metrics_text(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def chat(self, request: Request) -> Response:
        body = await json_body(request)
        # The body's shape first: a malformed request is a 400 naming its
        # field, whichever model it asks for.
        tools = tools_of(body)
        messages = chat_messages(body.get("messages"), tools is not None and tools[0].parallel)
        stream = flag(body, "stream")
        grammar = tools[1] if tools else response_grammar(body.get("response_format"))
        model = self._model(body)
        config = self._config(body)  # (max_tokens is checked against the model's context)
        config = replace(config, grammar=grammar)
        if tools is not None:
            messages = with_tools(messages, tools[0])
        reply = _Reply(model, tools=tools is not None)
        return await self._serve(request, messages, config, stream, reply)

    async def completions(self, request: Request) -> Response:
        body = await json_body(request)
        text = text_prompt(body.get("prompt"))
        suffix = body.get("suffix")
        if suffix is not None and not isinstance(suffix, str):
            raise invalid("suffix must be text.", "suffix")
        stream, echo = flag(body, "stream"), flag(body, "echo")
        for name in ("n", "best_of"):
            if body.get(name, 1) != 1:
                raise invalid(f"{name} must be 1: one completion per request.", name)
        if body.get("logprobs") is not None:
            raise invalid("logprobs are not returned by this server; leave it out.", "logprobs")
        model = self._model(body)
        if suffix is not None and not self.host.fills_in_the_middle():
            raise invalid(
                f"suffix needs a model trained to fill in the middle: {model} declares no "
                "fill-in-the-middle tokens. Leave suffix out to continue the prompt.",
                "suffix",
            )
        if echo and suffix is not None:
            raise invalid("echo cannot be used with suffix.", "echo")
        config = self._config(body)
        reply = _Reply(model, chat=False, echo=text if echo else "")
        return await self._serve(request, TextPrompt(text, suffix), config, stream, reply)

    def _model(self, body: dict[str, Any]) -> str:
        """The loaded model's name, which the request must ask for."""
        asked = body.get("model")
        if not isinstance(asked, str):
            raise invalid("model must be the model's name, as GET /v1/models lists it.", "model")
        model = self.host.model_id()
        if model is None:
            raise ApiError(503, "No model is loaded.", "server_error", code="model_not_loaded")
        if asked != model:
            raise ApiError(
                404, f"The model {asked!r} does not exist here: this server has {model!r}.",
                "invalid_request_error", "model", "model_not_found",
            )  # fmt: skip
        return model

    async def _serve(
        self,
        request: Request,
        prompt: list[Message] | TextPrompt,
        config: GenerationConfig,
        stream: bool,
        reply: _Reply,
    ) -> Response:
        """Queue the job and answer with its reply, whole or streamed."""
        if self.pending >= self.options.queue_max:
            raise ApiError(
                429, f"{counted(self.pending, 'request')} running or waiting; try again shortly.",
                "rate_limit_error", code="queue_full",
            )  # fmt: skip
        queue = _Queue(asyncio.get_running_loop())

        def done(outcome: Outcome) -> None:  # (engine thread)
            self.metrics.finished(outcome)  # counted even when nobody reads it any more
            queue.put(outcome)

        job = Job(prompt, config, on_text=queue.put, on_done=done)
        self.pending += 1
        self.metrics.started()
        self.host.submit(job)
        if stream:
            return StreamingResponse(
                self._stream(job, queue, reply), media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )  # fmt: skip
        return await self._whole(request, job, queue, reply)

    def _config(self, body: dict[str, Any]) -> GenerationConfig:
        d = self.options.defaults
        temperature = number(body, "temperature", d.temperature, 0.0, 5.0)
        top_p = number(body, "top_p", d.top_p, 0.0, 1.0, low_open=True)
        limit = min(MAX_TOKENS_LIMIT, max(1, self.host.context_size() - 1))
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = self.options.max_tokens if asked is None else asked
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise invalid("max_tokens must be a whole number.", "max_tokens")
        if not 1 <= max_tokens <= limit:
            raise invalid(
                f"max_tokens must be between 1 and {limit:,} (the context holds "
                f"{self.host.context_size():,} tokens).",
                "max_tokens",
            )
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise invalid("seed must be a whole number.", "seed")
        sampling = SamplingParams(
            temperature=temperature, top_k=d.top_k, top_p=top_p, min_p=d.min_p,
            repeat_penalty=d.repeat_penalty, seed=seed % 2**63 if seed is not None else d.seed,
        )  # fmt: skip
        return GenerationConfig(max_tokens, sampling, stops(body.get("stop")))

    async def _whole(self, request: Request, job: Job, queue: _Queue, reply: _Reply) -> Response:
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.items.get(), timeout=0.25)
                except TimeoutError:
                    if await request.is_disconnected():
                        job.cancel.set()  # the reply stops within a round
                    continue
                if isinstance(item, str):
                    reply.text += item
                    continue
                return reply.whole(self._finished(item))
        finally:
            self.pending -= 1
            self.metrics.ended()

    async def _stream(self, job: Job, queue: _Queue, reply: _Reply) -> AsyncIterator[str]:
        try:
            yield _event(reply.chunk(reply.text, first=True))  # (a chat's role; an echo)
            while True:
                item = await queue.items.get()
                if isinstance(item, str):
                    if reply.tools:  # (read back whole at its end: a call, or text)
                        reply.text += item
                    else:
                        yield _event(reply.chunk(item))
                    continue
                try:
                    outcome = self._finished(item)
                except ApiError as exc:
                    yield _event(exc.body())
                else:
                    for delta in reply.tool_deltas():
                        yield _event(reply.delta(delta))
                    yield _event(reply.chunk("", outcome))
                yield "data: [DONE]\n\n"
                return
        finally:  # also when the client went away: its reply stops within a round
            job.cancel.set()
            self.pending -= 1
            self.metrics.ended()

    @staticmethod
    def _finished(outcome: Outcome) -> Outcome:
        if outcome.error is not None:
            kind = "invalid_request_error" if outcome.status == 400 else "server_error"
            raise ApiError(outcome.status, outcome.error, kind, outcome.param)
        return outcome


class _Reply:
    """The response's fixed parts and the text so far: a chat completion's, or
    (``chat`` False) a text completion's, which starts with ``echo``."""

    def __init__(self, model: str, chat: bool = True, echo: str = "", tools: bool = False) -> None:
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.model = model
        self.chat = chat
        self.text = echo
        self.tools = tools  # written in the tools' format: read back at its end
        self._said: ToolReply | None = None

    def said(self) -> ToolReply:
        """The finished text read back in the tools' format (once: a call's id
        is made there)."""
        if self._said is None:
            self._said = read_reply(self.text)
        return self._said

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, outcome: Outcome) -> JSONResponse:
        if self.chat:
            body = self._head("chat.completion")
            message: dict[str, Any] = {"role": "assistant", "content": self.text}
            finish = outcome.finish_reason
            if self.tools:
                said = self.said()
                message["content"] = said.content
                if said.calls:
                    message["tool_calls"], finish = list(said.calls), "tool_calls"
            choice = {"index": 0, "message": message, "finish_reason": finish}
        else:
            body = self._head("text_completion")
            choice = {"index": 0, "text": self.text, "logprobs": None,
                      "finish_reason": outcome.finish_reason}  # fmt: skip
        body["choices"] = [choice]
        body |= _tail(outcome)
        return JSONResponse(body)

    def tool_deltas(self) -> list[dict[str, Any]]:
        """A tools reply, streamed at its end: each call (the name, then the
        arguments, by its index) or its text."""
        if not self.tools:
            return []
        said = self.said()
        if not said.calls:
            return [{"content": said.content}]
        deltas = []
        for i, call in enumerate(said.calls):
            head = {"index": i, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}  # fmt: skip
            arguments = {"index": i, "function": {"arguments": call["function"]["arguments"]}}
            deltas += [{"tool_calls": [head]}, {"tool_calls": [arguments]}]
        return deltas

    def delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        body = self._head("chat.completion.chunk")
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
        return body

    def chunk(
        self, text: str, outcome: Outcome | None = None, first: bool = False
    ) -> dict[str, Any]:
        """A stream's next piece of ``text`` (the ``first`` chunk of a chat also
        names the role; the last carries ``outcome``)."""
        finish = outcome.finish_reason if outcome is not None else None
        if self.chat:
            body = self._head("chat.completion.chunk")
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            choice: dict[str, Any] = {"index": 0, "delta": delta if text or first else {}}
        else:
            body = self._head("text_completion")
            choice = {"index": 0, "text": text, "logprobs": None}
        if finish == "stop" and self.tools and self.said().calls:
            finish = "tool_calls"
        choice["finish_reason"] = finish
        body["choices"] = [choice]
        if outcome is not None:
            body |= _tail(outcome)
        return body


def _tail(outcome: Outcome) -> dict[str, Any]:
    f = outcome.figures
    if f is None:
        return {}
    usage = {
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
    }
    return {"usage": usage, "gambit": f.as_json()}


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
