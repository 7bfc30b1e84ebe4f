"""Numbers that reach llama.cpp, each with one rule and one sentence.

llama.cpp trusts what it is given: a negative thread count crashes the whole
process. So a number is checked once where it comes in (a command-line
argument, the settings file, the settings dialog) by the rule here, and
``RuntimeOptions`` checks again as the last line of defence.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gambit.engine.machine import rpc
from gambit.errors import GambitError

THREADS_MAX = 512  # more than any machine Gambit runs on has cores


def threads_problem(n: int) -> str | None:
    """What is wrong with ``n`` as a thread count (0: automatic), or None.

    The sentence has no subject: callers put the setting's name in front.
    """
    if 0 <= n <= THREADS_MAX:
        return None
    return f"must be 0 (automatic) or a whole number from 1 to {THREADS_MAX}, not {n}"


def workers_problem(endpoints: Sequence[str]) -> str | None:
    """What is wrong with a list of worker addresses (``rpc.parse_endpoint``'s
    rule for each), or None. Like ``threads_problem``, without a subject."""
    for text in endpoints:
        try:
            rpc.parse_endpoint(text)
        except GambitError:
            return f"must each be host:port (e.g. 127.0.0.1:50052), not {text!r}"
    return None


# ------------------------------------------------------------- argparse types
# For ``type=``: argparse turns ArgumentTypeError into "argument --x: <message>"
# and exit status 2.


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None


def positive_int_arg(text: str) -> int:
    """A count that must be 1 or more (``--max-evals``, ``--last``); the flags that
    are settings take their rule from the declaration (``gambit.cli.setting_flags``)."""
    n = _whole_number(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of 1 or more, not {n}")
    return n
