"""Command-line flags made from the settings' declarations.

A setting the command line also takes says so where it is declared
(``Setting.flag`` in ``gambit.storage.settings``); this module turns that
declaration into the argparse argument (its type, default, check and help) and
reads the parsed flags back as ``Settings``, so a default, a range or a help
line is written once for the window, the settings file and every command.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable
from typing import Any

from gambit.storage.setting import Setting
from gambit.storage.settings import SETTINGS, Settings

_TYPES: dict[str, Any] = typing.get_type_hints(Settings)
_DEFAULTS = Settings()


def dest(name: str) -> str:
    """The attribute a parsed flag lands on: argparse's (``--top-k`` -> ``top_k``),
    but the setting's own name for a flag that turns it off (``exact_kernels``,
    not ``fast_kernels``, holds whether the kernels are exact)."""
    declared = SETTINGS[name]
    assert declared.flag is not None, f"{name} has no flag"
    if not declared.flag_sets:
        return name
    return declared.flag.removeprefix("--").replace("-", "_")


def _parser(name: str) -> Callable[[str], Any]:
    """Text -> the setting's type, refused (with its rule) where the window refuses it."""
    declared = SETTINGS[name]
    tp = _TYPES[name]
    convert: Callable[[str], Any]
    if tp is int:
        convert = int
    elif tp is float:
        convert = float
    elif tp == tuple[str, ...]:  # a comma-separated list

        def convert(text: str) -> tuple[str, ...]:
            return tuple(part.strip() for part in text.split(",") if part.strip())

    else:
        convert = str

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            what = "a whole number" if tp is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}") from None
        # (a list of workers is checked where they are reached, each address
        # named in a one-line error: gambit.cli.main.rpc_workers)
        problem = None if isinstance(value, tuple) else declared.problem_with(value)
        if problem is not None:
            # ("argument --temp: must be 0 or more, not -1": the flag names the
            # setting; a shared rule of engine.machine.limits names the value itself)
            shown_value = "" if declared.problem is not None else f", not {text}"
            raise argparse.ArgumentTypeError(f"{problem}{shown_value}")
        return value

    parse.__name__ = declared.label  # argparse names the type in some messages
    return parse


def _help(declared: Setting, default: Any) -> str:
    text = declared.flag_help or declared.help
    if not declared.flag_help:  # the dialog's sentence, as a terminal's help line
        text = text[:1].lower() + text[1:]
    text = text.rstrip(".").replace("%", "%%")
    if isinstance(default, bool) or default in ("", ()):
        return text
    # argparse fills in the default, a command's own (set_defaults) included
    return f"{text} (default %(default)s)"


def add_setting_flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    name: str,
    *,
    help: str | None = None,
) -> None:
    """The flag ``Settings`` declares for the field ``name``, defaulting to the
    setting's default (``parser.set_defaults(...)`` may give a command its own;
    the help shows whichever applies); ``help`` replaces the declared line."""
    declared = SETTINGS[name]
    default = getattr(_DEFAULTS, name)
    assert declared.flag is not None, f"{name} has no flag"
    text = _help(declared, default) if help is None else help
    if isinstance(default, bool):
        # A flag turns the setting on (or, with flag_sets False, off).
        action = "store_true" if declared.flag_sets else "store_false"
        parser.add_argument(declared.flag, dest=dest(name), action=action, help=text)
        return
    metavar = "HOST:PORT[,HOST:PORT]" if _TYPES[name] == tuple[str, ...] else None
    parser.add_argument(
        declared.flag, dest=dest(name), type=_parser(name), default=default, help=text,
        metavar=metavar,
    )  # fmt: skip


def add_setting_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str
) -> None:
    for name in names:
        add_setting_flag(parser, name)


def settings_from_args(args: argparse.Namespace, base: Settings = _DEFAULTS) -> Settings:
    """``base`` with every declared flag the parser had replaced by its value."""
    changes = {
        name: getattr(args, dest(name))
        for name, declared in SETTINGS.items()
        if declared.flag is not None and hasattr(args, dest(name))
    }
    return dataclasses.replace(base, **changes)
