"""Which rendered characters came from accepted draft tokens.

A Markdown renderer keeps no map from source characters to rendered ones, but
the rendered text is the source with its syntax taken out (``**``, ``#``,
fences, pipes, link targets), in order. So each rendered character is matched
to the next equal source character, whitespace to the next whitespace (a soft
line break renders as a space). A character with no match (an entity, a list
number) is left unwashed and the match goes on from where it was. Pure Python:
no Qt, unit-tested.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

LOOKAHEAD: Final = 2048  # source characters searched for one rendered character
# Qt's structural characters in a document's raw text: paragraph and line
# separators, frame (table) boundaries, object replacement.
STRUCTURE: Final = frozenset("\u2029\u2028\ufdd0\ufdd1\ufffc")
_SPACE: Final = frozenset(" \t\n\r\u00a0")


def align(source: str, rendered: str) -> list[int]:
    """``result[i]``: the index in ``source`` of rendered character i, or -1."""
    out: list[int] = []
    at = 0
    n = len(source)
    for ch in rendered:
        if ch in STRUCTURE:
            out.append(-1)
            continue
        if ch in _SPACE:
            j = next((k for k in range(at, min(n, at + LOOKAHEAD)) if source[k] in _SPACE), -1)
        else:
            j = source.find(ch, at, at + LOOKAHEAD)
        out.append(j)
        if j >= 0:
            at = j + 1
    return out


def washed_runs(source: str, rendered: str, drafted: Sequence[bool]) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of rendered characters whose source characters were
    drafted (``drafted[i]`` for source character i), merged where they touch."""
    runs: list[tuple[int, int]] = []
    limit = len(drafted)
    start = -1
    for i, j in enumerate(align(source, rendered)):
        washed = 0 <= j < limit and drafted[j]
        if washed and start < 0:
            start = i
        elif not washed and start >= 0:
            runs.append((start, i))
            start = -1
    if start >= 0:
        runs.append((start, len(rendered)))
    return runs
