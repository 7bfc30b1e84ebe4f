"""How a count reads in a message: "1 usable model", "2 usable models".

Below every layer (like ``gambit.errors``), so that every message that counts
something says it the same way.
"""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``noun + "s"``, or ``plural``
    where the word does not take an s): ``counted(3, "usable model")``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
