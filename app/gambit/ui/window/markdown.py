"""Chat Markdown through Qt's own reader, drafted characters washed green.

``QTextDocument.setMarkdown`` (GitHub dialect: tables, links, fenced code,
task lists; raw HTML off, since replies are untrusted text) renders a message
into its own document; the chat view then inserts that document as a
fragment. Qt keeps no map from source characters to rendered ones, so the
wash over characters that came from accepted draft tokens is carried over by
``draft_wash`` (rendered text aligned with the source). Each code block gets a
"Copy" link under it whose ``gambit-copy:`` address names the block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from PySide6.QtGui import (
    QColor,
    QFont,
    QGuiApplication,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

from gambit.ui.window.draft_wash import washed_runs

DRAFT_BG: Final = QColor(46, 160, 67, 41)  # a quiet green wash, readable on light and dark
CODE_BG: Final = QColor(127, 127, 127, 31)
COPY_SCHEME: Final = "gambit-copy"
COPY_TEXT: Final = "Copy"
CARET: Final = "▍"  # the streaming reply's end marker: never copied
_FEATURES: Final = (
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub
    | QTextDocument.MarkdownFeature.MarkdownNoHTML
)


@dataclass
class Rendered:
    document: QTextDocument
    code_blocks: dict[str, str] = field(default_factory=dict)  # copy address path -> code


def render(
    text: str,
    drafted: Sequence[bool] | None = None,
    highlight: bool = True,
    key: str = "0",
) -> Rendered:
    """One message as its own document. ``drafted[i]`` marks source character i as
    drafted-and-accepted; ``key`` tells this message's code blocks apart
    (their copy addresses are ``gambit-copy:<key>.<n>``)."""
    doc = QTextDocument()
    doc.setMarkdown(text, _FEATURES)
    if highlight and drafted:
        _wash(doc, text, drafted)
    return Rendered(doc, _code_blocks(doc, key))


def _wash(doc: QTextDocument, source: str, drafted: Sequence[bool]) -> None:
    wash = QTextCharFormat()
    wash.setBackground(DRAFT_BG)
    cursor = QTextCursor(doc)
    for start, end in washed_runs(source, doc.toRawText(), drafted):
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(wash)


def _is_code(block: QTextBlock) -> bool:
    fmt = block.blockFormat()
    return fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.nonBreakableLines()


def _code_runs(doc: QTextDocument) -> list[list[QTextBlock]]:
    runs: list[list[QTextBlock]] = []
    block = doc.begin()
    previous_code = False
    while block.isValid():
        code = _is_code(block)
        if code:
            if previous_code:
                runs[-1].append(block)
            else:
                runs.append([block])
        previous_code = code
        block = block.next()
    return runs


def _code_blocks(doc: QTextDocument, key: str) -> dict[str, str]:
    """Shade each code block and put a Copy link under it; returns address -> code."""
    runs = _code_runs(doc)
    codes: dict[str, str] = {}
    shade = QTextBlockFormat()
    shade.setBackground(CODE_BG)
    for n, blocks in reversed(list(enumerate(runs))):  # from the end: positions hold
        address = f"{key}.{n}"
        codes[address] = "\n".join(b.text() for b in blocks).removesuffix(CARET)
        cursor = QTextCursor(doc)
        for block in blocks:
            cursor.setPosition(block.position())
            cursor.mergeBlockFormat(shade)
        last = blocks[-1]
        cursor.setPosition(last.position() + last.length() - 1)
        below = QTextBlockFormat()
        below.setBottomMargin(6)
        cursor.insertBlock(below, QTextCharFormat())
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(f"{COPY_SCHEME}:{address}")
        link.setToolTip("Copy this code to the clipboard")
        link.setFontUnderline(True)
        link.setForeground(QGuiApplication.palette().link())
        link.setFontPointSize(max(6.0, QFont().pointSizeF() * 0.85))
        cursor.insertText(COPY_TEXT, link)
    return codes
