"""Attached documents: read from real files, judged text or not by their
content, kept inside the message's text and found there again."""

from __future__ import annotations

from pathlib import Path

import pytest

from gambit.storage.documents import (
    MAX_BYTES,
    Document,
    DocumentError,
    compose,
    documents_in,
    format_size,
    read_document,
    split,
    typed_text,
)

NOTES = "# Notes\n\nSome `code` and a fence:\n```python\nprint('hi')\n```\n"


def test_a_message_with_documents_splits_back_into_them(tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text(NOTES, encoding="utf-8")
    notes = read_document(path)
    data = Document("data.csv", "a,b\n1,2")
    content = compose("Summarise both, please.", [notes, data])
    assert content.startswith("````document: notes.md\n")  # longer than the ``` inside
    assert split(content) == [Document("notes.md", NOTES), data,
                              "Summarise both, please."]  # fmt: skip
    assert typed_text(content) == "Summarise both, please."
    assert [d.name for d in documents_in(content)] == ["notes.md", "data.csv"]
    assert compose("", [data]) == "```document: data.csv\na,b\n1,2\n```"


def test_text_that_only_looks_like_a_document_stays_text() -> None:
    typed = "```document: nope\nnever closed\n\n````\nx = 1"  # (no line of 3 backticks)
    assert split(typed) == [typed]
    odd = Document("a`b\nc.txt", "x")  # a name that cannot sit in a fence's info string
    assert split(compose("", [odd])) == [Document("a_b_c.txt", "x")]


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ("naïve café\r\nline 2\r".encode(), "naïve café\nline 2\n"),
        (b"\xef\xbb\xbfwith a BOM", "with a BOM"),
        ("UTF-16 text".encode("utf-16"), "UTF-16 text"),
        (b'{"key": [1, 2, 3]}', '{"key": [1, 2, 3]}'),
    ],
)
def test_text_files_are_read_whatever_their_name(tmp_path: Path, data: bytes, text: str) -> None:
    path = tmp_path / "file.bin"  # the name says binary, the content says text
    path.write_bytes(data)
    assert read_document(path) == Document("file.bin", text)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "NUL bytes"),
        ("café".encode("latin-1"), "not UTF-8 text"),
        (bytes(range(1, 32)) * 4, "mostly control characters"),
        (b"  \n\n", "empty"),
    ],
)
def test_other_files_are_refused_with_the_reason(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "notes.txt"  # the name says text, the content does not
    path.write_bytes(data)
    with pytest.raises(DocumentError, match=why):
        read_document(path)


def test_files_too_large_missing_or_folders_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * (MAX_BYTES + 1))
    with pytest.raises(DocumentError, match=r"larger than 4\.2 MB"):
        read_document(big)
    with pytest.raises(DocumentError, match="not a file"):
        read_document(tmp_path)
    with pytest.raises(DocumentError, match="not a file"):
        read_document(tmp_path / "gone.txt")


def test_sizes_read_as_people_write_them() -> None:
    assert [format_size(n) for n in (812, 8123, 1_234_567)] == ["812 B", "8.1 kB", "1.2 MB"]
