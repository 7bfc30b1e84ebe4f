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
import math
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
from gambit.engine.text.grammar import ANY_OBJECT, GrammarError, json_schema_grammar
from gambit.engine.text.reply import GenerationConfig
from gambit.engine.verification.sampling import SamplingParams
from gambit.serve.jobs import EngineHost, Job, Outcome, TextPrompt
from gambit.serve.prometheus import ServeMetrics
from gambit.words import counted

BODY_MAX_BYTES = 4 * 1024 * 1024
MAX_TOKENS_LIMIT = 32768  # as the settings' Max tokens
STOP_MAX = 4  # as OpenAI's API
SCHEMA_MAX_BYTES = 64 * 1024  # a response_format's JSON schema, as JSON text
ROLES = ("system", "user", "assistant")
GENERATING_PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass(frozen=True)
class ServeOptions:
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    queue_max: int = 4  # requests running or waiting; beyond: 429
    # Sampling for what a request leaves out (the server's own settings).
    defaults: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 512


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


def _invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param)


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
        body = await _json_body(request)
        # The body's shape first: a malformed request is a 400 naming its
        # field, whichever model it asks for.
        messages = _messages(body.get("messages"))
        stream = _flag(body, "stream")
        grammar = _grammar(body.get("response_format"))
        model = self._model(body)
        config = self._config(body)  # (max_tokens is checked against the model's context)
        config = replace(config, grammar=grammar)
        return await self._serve(request, messages, config, stream, _Reply(model))

    async def completions(self, request: Request) -> Response:
        body = await _json_body(request)
        text = _prompt(body.get("prompt"))
        suffix = body.get("suffix")
        if suffix is not None and not isinstance(suffix, str):
            raise _invalid("suffix must be text.", "suffix")
        stream, echo = _flag(body, "stream"), _flag(body, "echo")
        for name in ("n", "best_of"):
            if body.get(name, 1) != 1:
                raise _invalid(f"{name} must be 1: one completion per request.", name)
        if body.get("logprobs") is not None:
            raise _invalid("logprobs are not returned by this server; leave it out.", "logprobs")
        model = self._model(body)
        if suffix is not None and not self.host.fills_in_the_middle():
            raise _invalid(
                f"suffix needs a model trained to fill in the middle: {model} declares no "
                "fill-in-the-middle tokens. Leave suffix out to continue the prompt.",
                "suffix",
            )
        if echo and suffix is not None:
            raise _invalid("echo cannot be used with suffix.", "echo")
        config = self._config(body)
        reply = _Reply(model, chat=False, echo=text if echo else "")
        return await self._serve(request, TextPrompt(text, suffix), config, stream, reply)

    def _model(self, body: dict[str, Any]) -> str:
        """The loaded model's name, which the request must ask for."""
        asked = body.get("model")
        if not isinstance(asked, str):
            raise _invalid("model must be the model's name, as GET /v1/models lists it.", "model")
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
        temperature = _number(body, "temperature", d.temperature, 0.0, 5.0)
        top_p = _number(body, "top_p", d.top_p, 0.0, 1.0, low_open=True)
        limit = min(MAX_TOKENS_LIMIT, max(1, self.host.context_size() - 1))
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = self.options.max_tokens if asked is None else asked
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise _invalid("max_tokens must be a whole number.", "max_tokens")
        if not 1 <= max_tokens <= limit:
            raise _invalid(
                f"max_tokens must be between 1 and {limit:,} (the context holds "
                f"{self.host.context_size():,} tokens).",
                "max_tokens",
            )
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _invalid("seed must be a whole number.", "seed")
        sampling = SamplingParams(
            temperature=temperature, top_k=d.top_k, top_p=top_p, min_p=d.min_p,
            repeat_penalty=d.repeat_penalty, seed=seed % 2**63 if seed is not None else d.seed,
        )  # fmt: skip
        return GenerationConfig(max_tokens, sampling, _stops(body.get("stop")))

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
                    yield _event(reply.chunk(item))
                    continue
                try:
                    outcome = self._finished(item)
                except ApiError as exc:
                    yield _event(exc.body())
                else:
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

    def __init__(self, model: str, chat: bool = True, echo: str = "") -> None:
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}"
        self.created = int(time.time())
        self.model = model
        self.chat = chat
        self.text = echo

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, outcome: Outcome) -> JSONResponse:
        if self.chat:
            body = self._head("chat.completion")
            message = {"role": "assistant", "content": self.text}
            choice = {"index": 0, "message": message, "finish_reason": outcome.finish_reason}
        else:
            body = self._head("text_completion")
            choice = {"index": 0, "text": self.text, "logprobs": None,
                      "finish_reason": outcome.finish_reason}  # fmt: skip
        body["choices"] = [choice]
        body |= _tail(outcome)
        return JSONResponse(body)

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


async def _json_body(request: Request) -> dict[str, Any]:
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
        raise _invalid(f"The request body is not valid JSON ({exc}).") from None
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.")
    return body


def _messages(value: object) -> list[Message]:
    """The conversation, refused as the window refuses an empty message: it
    needs a user message, and the last one must have text."""
    if not isinstance(value, list) or not value:
        raise _invalid(
            'messages must be a list of messages, each {"role": ..., "content": ...}.', "messages"
        )
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _invalid(f"messages[{i}] needs a role of {', '.join(ROLES)}.", "messages")
        out.append(Message(m["role"], _content(m.get("content"), i)))
    if out[-1].role == "assistant":
        raise _invalid("The last message must be the user's (or the system's).", "messages")
    users = [i for i, m in enumerate(out) if m.role == "user"]
    if not users:
        raise _invalid("messages needs a user message to reply to.", "messages")
    if not out[users[-1]].content.strip():
        raise _invalid(f"messages[{users[-1]}], the last user message, is empty.", "messages")
    return out


def _content(content: object, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text only
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _invalid(f"messages[{i}]: only text content is supported.", "messages")
            text = part.get("text")
            if not isinstance(text, str):
                raise _invalid(f"messages[{i}]: a text part needs its text.", "messages")
            texts.append(text)
        return "".join(texts)
    raise _invalid(f"messages[{i}].content must be text.", "messages")


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:  # fmt: skip
    value = body.get(name)
    if value is None:
        return float(default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _invalid(f"{name} must be a number.", name)
    if value < low or value > high or (low_open and value == low):
        side = f"more than {low:g}" if low_open else f"at least {low:g}"
        raise _invalid(f"{name} must be {side} and at most {high:g}.", name)
    return float(value)


def _stops(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _invalid("stop must be a text or a list of texts.", "stop")
    if len(stops) > STOP_MAX:
        raise _invalid(f"stop takes at most {STOP_MAX} texts.", "stop")
    return tuple(stops)


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise _invalid(f"{name} must be true or false.", name)
    return value


def _prompt(value: object) -> str:
    """A completion's prompt: text, or a list of one text."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise _invalid("prompt must be text (or a list of one text).", "prompt")
    return value


def _grammar(value: object) -> str | None:
    """The grammar ``response_format`` asks for (None: free text)."""
    kinds = '{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", ...}'
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in ("text", "json_object",
                                                                "json_schema"):  # fmt: skip
        raise _invalid(f"response_format must be {kinds}.", "response_format")
    if value["type"] == "text":
        return None
    schema: object = ANY_OBJECT
    if value["type"] == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise _invalid(
                "response_format.json_schema.schema must be a JSON schema (an object).",
                "response_format",
            )
    text = json.dumps(schema)
    if len(text.encode()) > SCHEMA_MAX_BYTES:
        raise _invalid(
            f"response_format: the schema is over {SCHEMA_MAX_BYTES // 1024} KB as JSON.",
            "response_format",
        )
    try:
        return json_schema_grammar(text)
    except GrammarError as exc:
        message = f"response_format: the schema cannot be used: {exc}"
        raise _invalid(message, "response_format") from None
