"""Typed values read leniently from JSON: what a settings file holds by hand.

A value of the wrong type reads as ``MISSING`` (the caller keeps its default
and says so), never as an exception: a settings file edited by hand, or
written by another version, must never stop the app from starting.
"""

from __future__ import annotations

import json
import typing
from typing import Any, Literal

MISSING: Any = object()  # what ``coerce`` gives for a value it cannot use


def coerce(tp: Any, value: Any) -> Any:
    """``value`` from JSON as the field type ``tp`` wants it, or MISSING."""
    if typing.get_origin(tp) is Literal:
        return value if value in typing.get_args(tp) else MISSING
    if tp is bool:
        return value if isinstance(value, bool) else MISSING
    # bool is an int subclass in Python; true/false is never a number here.
    if isinstance(value, bool):
        return MISSING
    if tp is int:
        if isinstance(value, int):
            return value
        # 4.0 from a hand edit or another JSON writer means 4
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return MISSING
    if tp is float:
        if not isinstance(value, (int, float)):
            return MISSING
        try:
            return float(value)
        except OverflowError:  # an integer with hundreds of digits
            return MISSING
    if tp is str:
        return value if isinstance(value, str) else MISSING
    if tp == tuple[str, ...]:  # a JSON list of texts
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else MISSING
    raise TypeError(f"no JSON reading for settings of type {tp!r}")  # a new field type


def expected(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(json.dumps(c) for c in typing.get_args(tp))
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "text",
             tuple[str, ...]: "a list of texts"}  # fmt: skip
    return names.get(tp, str(tp))


def shown(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
