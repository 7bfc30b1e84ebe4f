"""Documents attached to a message: read from a text file, kept in the message.

A document travels inside the user's message text, so that the model reads
it, and the history keeps it as it keeps any message (search, export,
prompt lookup's memory of earlier chats) with no change to the file's
schema. Each is a fenced block whose info string names it, before the typed
text::

    ````document: notes.md
    <the document's text>
    ````

    Summarise this.

The fence is one backtick longer than the longest run of backticks in the
text (three at least), so nothing in the text can close it, and any Markdown
reader shows the block as code. The chat view finds these blocks (``split``)
and shows each collapsed, with its name and size (docs/adr/0024).

A file is a text file by its content, not its name: UTF-8 (a byte-order mark
is dropped; UTF-16 with one is read too) with no NUL bytes and few control
characters. Anything else is refused with a ``DocumentError`` saying why.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gambit.errors import GambitError

MARKER = "document: "
# Longer than any context Gambit loads holds (131,072 tokens of a few bytes
# each); between the context and this, sending says how many tokens it needs.
MAX_BYTES = 4 * 1024 * 1024
CONTROL_SHARE_MAX = 0.05  # of the characters, tabs and line ends aside
_OPENING = re.compile(rf"^(`{{3,}}){re.escape(MARKER)}(.*)$")
_BACKTICKS = re.compile(r"`+")
_KINDS = ".txt, .md, source code, .csv, .json and other text files"


class DocumentError(GambitError):
    """A file cannot be attached (not text, too large, unreadable)."""


@dataclass(frozen=True)
class Document:
    name: str
    text: str

    @property
    def size(self) -> int:
        """Its length in bytes (UTF-8)."""
        return len(self.text.encode("utf-8"))


def format_size(n_bytes: int) -> str:
    """``812 B``, ``8.1 kB``, ``1.2 MB``."""
    if n_bytes < 1000:
        return f"{n_bytes} B"
    if n_bytes < 1_000_000:
        return f"{n_bytes / 1000:.1f} kB"
    return f"{n_bytes / 1_000_000:.1f} MB"


def _clean_name(name: str) -> str:
    """A name that fits an info string: one line, no backticks."""
    kept = "".join("_" if c == "`" or unicodedata.category(c)[0] == "C" else c for c in name)
    return kept.strip() or "document"


def block(document: Document) -> str:
    """``document`` as the fenced block it is stored as."""
    longest = max((len(run) for run in _BACKTICKS.findall(document.text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{MARKER}{_clean_name(document.name)}\n{document.text}\n{fence}"


def compose(text: str, documents: Sequence[Document]) -> str:
    """A message's text: the ``documents``' blocks, then the typed ``text``."""
    return "\n\n".join([*(block(d) for d in documents), *([text] if text else [])])


def split(content: str) -> list[str | Document]:
    """A message's text as its parts in order: typed text (str, without the
    blank lines around it; none empty) and attached documents."""
    lines = content.split("\n")
    parts: list[str | Document] = []
    text: list[str] = []
    i = 0
    while i < len(lines):
        opening = _OPENING.match(lines[i])
        end = _closing(lines, i, opening.group(1)) if opening is not None else None
        if opening is None or end is None:  # (an opening never closed is text)
            text.append(lines[i])
            i += 1
            continue
        _add_text(parts, text)
        parts.append(Document(opening.group(2), "\n".join(lines[i + 1 : end])))
        i = end + 1
    _add_text(parts, text)
    return parts


def _closing(lines: list[str], opening: int, fence: str) -> int | None:
    """The index of the line that closes the block opened at ``opening``."""
    try:
        return lines.index(fence, opening + 1)
    except ValueError:
        return None


def _add_text(parts: list[str | Document], lines: list[str]) -> None:
    text = "\n".join(lines).strip("\n")
    if text:
        parts.append(text)
    lines.clear()


def typed_text(content: str) -> str:
    """A message's text without its documents."""
    return "\n\n".join(p for p in split(content) if isinstance(p, str))


def documents_in(content: str) -> list[Document]:
    return [p for p in split(content) if isinstance(p, Document)]


def read_document(path: Path) -> Document:
    """The text file at ``path`` as a document named after it; a
    ``DocumentError`` says why a file cannot be one."""
    name = path.name
    try:
        if not path.is_file():
            raise DocumentError(f"{name} is not a file, so it cannot be attached.")
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise DocumentError(f"{name} cannot be read: {exc.strerror or exc}.") from exc
    if len(data) > MAX_BYTES:
        raise DocumentError(
            f"{name} is larger than {format_size(MAX_BYTES)}, more text than any context "
            "holds: attach a part of it."
        )
    return Document(name, decode_text(data, name))


def decode_text(data: bytes, name: str) -> str:
    """``data`` as text (line ends made "\\n"), or a ``DocumentError`` when it
    is not text: NUL bytes, not UTF-8, or mostly control characters."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16, marked as such
        text = _decoded(data, "utf-16", name)
    else:
        if b"\0" in data:
            raise DocumentError(_not_text(name, "it holds NUL bytes"))
        text = _decoded(data, "utf-8-sig", name)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise DocumentError(f"{name} is empty: there is nothing to attach.")
    controls = sum(1 for c in text if c not in "\t\n\f" and unicodedata.category(c) == "Cc")
    if controls > CONTROL_SHARE_MAX * len(text):
        raise DocumentError(_not_text(name, "it is mostly control characters"))
    return text


def _decoded(data: bytes, encoding: str, name: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        raise DocumentError(
            _not_text(name, "it is not UTF-8 text (saved in another encoding, or binary)")
        ) from None


def _not_text(name: str, why: str) -> str:
    return f"{name} was not attached: {why}. Gambit attaches {_KINDS}."
