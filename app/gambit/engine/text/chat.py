"""Chat messages -> prompt tokens, with the model's own template and KV reuse.

The GGUF carries the chat template it was trained with (Jinja, as in Hugging
Face ``tokenizer_config.json``); rendering it ourselves, in a sandbox, formats
every model the way its authors intended.

Multi-turn reuse: the conversation's tokens so far (prompt and generated
reply) are remembered with the text they render to. When the next turn's
prompt text extends that text, only the new suffix is tokenized, so the
caches of target and draft keep their whole prefix, reply included, and only
the new turn is evaluated.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import jinja2

from gambit.engine.machine.runtime import ModelRuntime
from gambit.engine.text.template_sandbox import (
    LimitedSandbox,
    RenderCancelledError,
    RenderLimits,
    TemplateLimitError,
)
from gambit.errors import ChatTemplateError, ContextOverflowError, NoChatTemplateError

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class ChatTemplate:
    """A model's chat template, rendered in a sandbox under limits it cannot
    escape (time, loop iterations, output size; see ``template_sandbox``).

    Everything that goes wrong inside the template (its own
    ``raise_exception``, a syntax error, a limit) is a ``ChatTemplateError``
    naming ``model``; ``render`` with a set ``cancel`` stops at the next loop
    step or call with ``RenderCancelledError``.
    """

    def __init__(
        self,
        source: str,
        bos_token: str = "",
        eos_token: str = "",
        *,
        model: str = "this model",
        limits: RenderLimits | None = None,
    ) -> None:
        self.model = model
        self._env = env = LimitedSandbox(limits, trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"the chat template of {model} cannot be read: {exc.message} "
                f"(line {exc.lineno}); use another model or a fixed copy of it"
            ) from None
        except (jinja2.TemplateError, RecursionError, MemoryError) as exc:
            raise ChatTemplateError(
                f"the chat template of {model} cannot be read: {_reason(exc)}"
            ) from None
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        cancel: threading.Event | None = None,
    ) -> str:
        try:
            return self._env.render_limited(
                self._template,
                cancel,
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except RenderCancelledError:
            raise
        except TemplateLimitError as exc:
            raise ChatTemplateError(
                f"the chat template of {self.model} was stopped: {exc}; "
                "it is broken or hostile, use another model"
            ) from None
        except Exception as exc:  # the template is foreign code: any failure is its own
            raise ChatTemplateError(
                f"the chat template of {self.model} failed: {_reason(exc)}"
            ) from None

    @classmethod
    def for_model(cls, runtime: ModelRuntime) -> ChatTemplate:
        source = runtime.chat_template()
        if not source:
            raise NoChatTemplateError(
                f"{runtime.path.name} has no chat template, so it cannot be used for chat "
                "(it is probably a base model, not an instruct model); "
                "use plain completion (gambit-cli generate --raw) or an instruct model"
            )
        return cls(
            source,
            bos_token=runtime.token_text(runtime.bos_token) if runtime.bos_token >= 0 else "",
            eos_token=runtime.token_text(runtime.eos_token) if runtime.eos_token >= 0 else "",
            model=runtime.path.name,
        )


def _reason(exc: BaseException) -> str:
    """An exception raised inside a template, in one line for the user."""
    if isinstance(exc, jinja2.TemplateError) and type(exc) is jinja2.TemplateError:
        return str(exc) or "it raised an error"  # its own raise_exception(...)
    if isinstance(exc, RecursionError):
        return "it recursed too deeply"
    if isinstance(exc, MemoryError):
        return "it ran out of memory"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class ChatPrompt:
    tokens: list[int]
    text: str  # what the tokens render, but for the reply's own start (``n_reply``)
    n_dropped: int  # oldest messages left out so the prompt fits the context
    # Continue: the last tokens that many are the reply's own start, its turn
    # left open (``ChatPromptBuilder.build(reply=...)``).
    n_reply: int = 0

    @property
    def reply(self) -> list[int]:
        """The tokens of the reply's start that the prompt ends with (Continue)."""
        return self.tokens[len(self.tokens) - self.n_reply :]


class ChatPromptBuilder:
    """Builds prompt tokens for a conversation and remembers what it generated."""

    def __init__(self, runtime: ModelRuntime, template: ChatTemplate | None = None) -> None:
        self.runtime = runtime
        self.template = template or ChatTemplate.for_model(runtime)
        self._text = ""  # text of the remembered conversation tokens
        self._tokens: list[int] = []
        # The last prompt as it was tokenized (its text, its length), to be
        # resumed from: a cut reply continues from the very prompt it had.
        self._prompt_text = ""
        self._n_prompt = 0

    def build(
        self,
        messages: Sequence[Message],
        reserve: int,
        cancel: threading.Event | None = None,
        *,
        reply: Sequence[int] = (),
    ) -> ChatPrompt:
        """Prompt tokens for ``messages``, leaving at least ``reserve`` tokens for the reply.

        When the conversation is too long, the oldest turns are left out (the
        system message and the last user message always stay); if even that
        does not fit, ``ContextOverflowError`` says by how much. A set
        ``cancel`` stops the template (``RenderCancelledError``).

        ``reply``: the tokens of a reply to ``messages`` that was cut, to be
        continued (``Engine.chat(reply=...)``). They follow the generation
        prompt as they followed it when generated: the assistant's turn stays
        open, with no end-of-turn marker and no new generation prompt.
        """
        n_ctx = self.runtime.n_ctx
        reserve = max(1, min(reserve, n_ctx // 2))
        budget = n_ctx - reserve
        system = [m for m in messages[:1] if m.role == "system"]
        rest = list(messages[len(system) :])
        dropped = 0
        while True:
            text = self.template.render([*system, *rest], cancel=cancel)
            tokens = [*self._tokenize(text), *reply]
            if len(tokens) <= budget:
                return ChatPrompt(tokens, text, dropped, len(reply))
            if len(rest) <= 1:
                so_far = " (the reply so far included)" if reply else ""
                raise ContextOverflowError(
                    f"the message is too long for the context window: the prompt needs "
                    f"{len(tokens):,} tokens{so_far}, and {budget:,} are available "
                    f"({n_ctx:,} in the context, {reserve:,} kept for the reply). "
                    "Shorten the message or raise the context size (Settings → Models → "
                    "Context size; --ctx on the command line)."
                )
            # Drop the oldest exchange: a user turn and the replies that follow it.
            rest.pop(0)
            dropped += 1
            while len(rest) > 1 and rest[0].role != "user":
                rest.pop(0)
                dropped += 1

    def remember(self, prompt: ChatPrompt, context: list[int]) -> None:
        """Record the tokens a generation committed (prompt + reply), for the next turn."""
        if context[: len(prompt.tokens)] != prompt.tokens:
            self.forget()  # the generation failed before it started
            return
        n_prompt = len(prompt.tokens) - prompt.n_reply
        reply = context[n_prompt:]  # (a continued reply's start included)
        rt = self.runtime
        # Rendered by the template, the reply's end-of-turn token appears as its text.
        text = "".join(rt.token_text(t) if rt.is_eog(t) else "" for t in reply[-1:])
        self._text = prompt.text + rt.detokenize(reply) + text
        self._tokens = list(context)
        self._prompt_text, self._n_prompt = prompt.text, n_prompt

    def forget(self) -> None:
        self._text = ""
        self._tokens = []
        self._prompt_text, self._n_prompt = "", 0

    def _tokenize(self, text: str) -> list[int]:
        rt = self.runtime
        if self._tokens and text.startswith(self._text):
            suffix = text[len(self._text) :]
            return self._tokens + rt.tokenize(suffix, add_special=False, parse_special=True)
        if self._n_prompt and text == self._prompt_text:  # the last prompt again: Continue
            return self._tokens[: self._n_prompt]
        has_bos_text = rt.bos_token >= 0 and text.startswith(rt.token_text(rt.bos_token))
        add_bos = rt.add_bos and not has_bos_text
        return rt.tokenize(text, add_special=add_bos, parse_special=True)
