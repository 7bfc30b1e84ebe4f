"""A reply's text as its tokens arrive: UTF-8 split across token pieces, stop strings."""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    """Bytes of token pieces -> text, safe across split UTF-8 characters, and
    holding back a tail only while it could still become a stop string."""

    def __init__(self, stop_strings: Sequence[str]) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = [s for s in stop_strings if s]
        self._longest = max((len(s) for s in self._stops), default=0)
        self.text = ""  # all text decoded so far
        self._emitted = 0

    def feed(self, data: bytes) -> tuple[str, bool]:
        """Returns (newly visible text, hit a stop string)."""
        start = max(0, len(self.text) - self._longest + 1)  # a stop may straddle feeds
        self.text += self._utf8.decode(data)
        hits = [at for s in self._stops if (at := self.text.find(s, start)) >= 0]
        if hits:
            self.text = self.text[: min(hits)]  # the earliest stop in the text wins
            return self._release(len(self.text)), True
        return self._release(len(self.text) - self._partial_stop_length()), False

    def skip(self, data: bytes) -> None:
        """Take ``data`` as text shown already (the start of a reply being
        continued): a character it splits is completed by what follows, a stop
        string may begin in it, and none of it is released again."""
        self.text += self._utf8.decode(data)
        self._emitted = len(self.text)

    def finish(self, *, whole: bool = True) -> str:
        """The rest of the text. ``whole`` False: a reply cut short (its length,
        Stop), which may be continued: a character its last bytes began is left
        out (those bytes stay in its tokens for the continuation to complete),
        rather than shown as a replacement character."""
        self.text += self._utf8.decode(b"", final=whole)
        return self._release(len(self.text))

    def _partial_stop_length(self) -> int:
        """Length of the longest tail of the text that begins some stop string."""
        text = self.text
        for n in range(min(self._longest - 1, len(text)), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0

    def _release(self, upto: int) -> str:
        out = self.text[self._emitted : upto]
        self._emitted = max(self._emitted, upto)
        return out
