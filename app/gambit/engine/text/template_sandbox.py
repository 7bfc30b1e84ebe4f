"""A Jinja sandbox whose templates cannot run forever or fill memory.

Chat templates come from model files, so they are foreign code. Jinja's
``ImmutableSandboxedEnvironment`` stops them from reaching Python's
internals, but not from spinning (``{% for a in range(99999) %}{% for b in
range(99999) %}``), building huge strings (``'x' * 300000000``) or computing
huge numbers. ``LimitedSandbox`` adds limits a template cannot get around:

- every ``{% for %}`` iterates through a guard (the loop is rewritten at
  parse time), which counts iterations across the whole render and checks a
  wall-clock deadline and the cancel event;
- every call (functions, methods, macros, recursive ``loop()``) checks the
  deadline and the cancel event too, refuses huge integer arguments
  (``'a'.center(10**9)``, ``range(10**9)``, ``'a'|center(10**9)``) and
  results larger than the output limit;
- ``*``, ``**``, ``+`` and ``%`` are checked before they compute, and ``~``
  concatenations and filter results after;
- the output is counted as it streams.

A limit hit raises ``TemplateLimitError``; a set cancel event raises
``RenderCancelledError``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sized
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment


@dataclass(frozen=True)
class RenderLimits:
    seconds: float = 10.0  # wall clock for one render
    loop_iterations: int = 1_000_000  # all loops of one render together
    output_chars: int = 64 * 1024 * 1024  # the output, and any one value built on the way


class TemplateLimitError(Exception):
    """The template went past one of its ``RenderLimits``."""


class RenderCancelledError(Exception):
    """The render was stopped through its cancel event."""


_GUARD = "gambit_guard"  # environment attributes the rewritten templates call
_SIZED = "gambit_sized"
_ARG = "gambit_arg"
_BINOPS = frozenset({"*", "**", "+", "%"})
_POW_RESULT_BITS = 4096  # 10**1233: any number a template has a use for


class _Render(threading.local):
    deadline = float("inf")
    iterations = 0
    cancel: threading.Event | None = None


class LimitedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = _BINOPS

    def __init__(self, limits: RenderLimits | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.limits = limits or RenderLimits()
        self._render = _Render()

    # ---- rendering
    def render_limited(
        self, template: jinja2.Template, cancel: threading.Event | None, **context: Any
    ) -> str:
        state = self._render
        state.deadline = time.monotonic() + self.limits.seconds
        state.iterations = 0
        state.cancel = cancel
        try:
            parts: list[str] = []
            size = 0
            for chunk in template.generate(**context):
                size += len(chunk)
                if size > self.limits.output_chars:
                    raise TemplateLimitError(self._too_long())
                parts.append(chunk)
                self._check()
            return "".join(parts)
        finally:
            state.deadline = float("inf")
            state.cancel = None

    # ---- the hooks rewritten templates and the sandbox call
    def gambit_guard(self, iterable: Any) -> Iterator[Any]:
        """Wraps the iterable of every ``{% for %}``."""
        limit = self.limits.loop_iterations
        state = self._render
        for item in iterable:
            state.iterations += 1
            if state.iterations > limit:
                raise TemplateLimitError(f"its loops ran more than {limit:,} times")
            self._check()
            yield item

    def gambit_sized(self, value: Any) -> Any:
        """Wraps every ``~`` concatenation and filter: its result must fit the limit."""
        self._check_size(value)
        return value

    def gambit_arg(self, value: Any) -> Any:
        """Wraps every filter argument: no width or count the output limit cannot hold."""
        self._check_number(value)
        return value

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self._check()
        if getattr(__obj, "__self__", None) is __self:  # the hooks above: values pass through
            return __obj(*args)  # (kwargs: only Jinja's own _loop_vars/_block_vars)
        for arg in (*args, *kwargs.values()):
            __self._check_number(arg)
        result = super().call(__context, __obj, *args, **kwargs)
        __self._check_size(result)
        return result

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        self._check()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    self._check_length(len(seq) * n)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if abs(left) > 1 and right * abs(left).bit_length() > _POW_RESULT_BITS:
                raise TemplateLimitError("it computed a number too large to be useful")
        elif operator == "+" and isinstance(left, Sized) and isinstance(right, Sized):
            self._check_length(len(left) + len(right))
        result = super().call_binop(context, operator, left, right)
        self._check_size(result)
        return result

    # ---- checks
    def _check(self) -> None:
        state = self._render
        if state.cancel is not None and state.cancel.is_set():
            raise RenderCancelledError("stopped")
        if time.monotonic() > state.deadline:
            raise TemplateLimitError(f"it ran longer than {self.limits.seconds:g} seconds")

    def _check_number(self, value: Any) -> None:
        if type(value) is int and abs(value) > self.limits.output_chars:
            raise TemplateLimitError(f"it passed the number {value:.3g} to a function")

    def _check_size(self, value: Any) -> None:
        if isinstance(value, (str, list, tuple, dict)):
            self._check_length(len(value))

    def _check_length(self, n: int) -> None:
        if n > self.limits.output_chars:
            raise TemplateLimitError(self._too_long())

    def _too_long(self) -> str:
        return f"its output grew past {self.limits.output_chars:,} characters"

    # ---- the rewrite, at parse time
    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = _call(_GUARD, loop.iter)
        _wrap_values(tree)
        return tree


def _call(attr: str, arg: nodes.Node) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(attr), [arg], [], None, None, lineno=arg.lineno)


def _wrap_values(node: nodes.Node) -> None:
    """Route every ``~`` and filter result through ``gambit_sized`` (children first)."""
    if isinstance(node, (nodes.FilterBlock, nodes.AssignBlock)):
        # their filter field must stay a Filter node; wrap only what is inside
        for child in node.body:
            _wrap_values(child)
        return
    if isinstance(node, nodes.Filter):
        node.args = [_call(_ARG, arg) for arg in node.args]
        for kw in node.kwargs:
            kw.value = _call(_ARG, kw.value)
    for field, value in node.iter_fields():
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, nodes.Node):
                    _wrap_values(item)
                    if isinstance(item, (nodes.Concat, nodes.Filter)):
                        value[i] = _call(_SIZED, item)
        elif isinstance(value, nodes.Node):
            _wrap_values(value)
            if isinstance(value, (nodes.Concat, nodes.Filter)):
                setattr(node, field, _call(_SIZED, value))
