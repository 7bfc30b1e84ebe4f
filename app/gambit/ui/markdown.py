"""Chat Markdown -> HTML for QTextBrowser, with drafted tokens highlighted.

Why not ``QTextDocument.setMarkdown``: it drops the mapping from source
characters to rendered ones, and Gambit must mark which characters came from
accepted draft tokens. This renderer covers what chat replies use (fenced code
blocks, inline code, bold, italic, headings, lists, paragraphs) and keeps a
per-character flag through to the HTML.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

DRAFT_BG = "rgba(46, 160, 67, 0.16)"  # a quiet green wash, readable on light and dark
CODE_BG = "rgba(127, 127, 127, 0.12)"

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,4})\s+")
_BULLET = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+")
# inline markers: `code`, **bold**, *italic* / _italic_
_INLINE = re.compile(
    r"`[^`\n]+`|\*\*[^*\n]+\*\*|(?<![\w*])\*[^*\n]+\*(?!\w)|(?<!\w)_[^_\n]+_(?!\w)"
)


def render(text: str, drafted: Sequence[bool] | None = None, highlight: bool = True) -> str:
    """HTML for one message. ``drafted[i]`` marks character i as drafted-and-accepted."""
    flags = list(drafted) if (drafted is not None and highlight) else []
    if len(flags) < len(text):
        flags += [False] * (len(text) - len(flags))
    out: list[str] = []
    lines = text.split("\n")
    pos = 0
    i = 0
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            out.append("<p style='margin:0 0 8px 0'>" + "<br>".join(paragraph) + "</p>")
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            flush_paragraph()
            pos += len(line) + 1
            i += 1
            code: list[str] = []
            while i < len(lines) and not _FENCE.match(lines[i]):
                code.append(_spans(lines[i], flags, pos))
                pos += len(lines[i]) + 1
                i += 1
            if i < len(lines):  # the closing fence (absent while a reply streams)
                pos += len(lines[i]) + 1
                i += 1
            out.append(
                f"<pre style='background:{CODE_BG}; padding:8px; margin:4px 0 8px 0; "
                "font-family:monospace; white-space:pre-wrap'>" + "\n".join(code) + "</pre>"
            )
            continue
        heading = _HEADING.match(line)
        bullet = _BULLET.match(line)
        if not line.strip():
            flush_paragraph()
        elif heading:
            flush_paragraph()
            level = len(heading.group(1))
            size = {1: "150%", 2: "130%", 3: "115%"}.get(level, "105%")
            body = _inline(line[heading.end() :], flags, pos + heading.end())
            out.append(
                f"<p style='font-size:{size}; font-weight:600; margin:6px 0 4px 0'>{body}</p>"
            )
        elif bullet:
            flush_paragraph()
            indent = 12 + 14 * (len(bullet.group(1)) // 2)
            marker = bullet.group(2)
            mark = "•" if marker in "-*+" else html.escape(marker)
            body = _inline(line[bullet.end() :], flags, pos + bullet.end())
            out.append(f"<p style='margin:0 0 3px {indent}px'>{mark}&nbsp;{body}</p>")
        else:
            paragraph.append(_inline(line, flags, pos))
        pos += len(line) + 1
        i += 1
    flush_paragraph()
    return "".join(out)


def _inline(line: str, flags: list[bool], offset: int) -> str:
    parts: list[str] = []
    last = 0
    for m in _INLINE.finditer(line):
        parts.append(_spans(line[last : m.start()], flags, offset + last))
        token = m.group(0)
        start = offset + m.start()
        if token.startswith("`"):
            inner = _spans(token[1:-1], flags, start + 1)
            parts.append(
                f"<code style='background:{CODE_BG}; font-family:monospace'>{inner}</code>"
            )
        elif token.startswith("**"):
            parts.append("<b>" + _spans(token[2:-2], flags, start + 2) + "</b>")
        else:
            parts.append("<i>" + _spans(token[1:-1], flags, start + 1) + "</i>")
        last = m.end()
    parts.append(_spans(line[last:], flags, offset + last))
    return "".join(parts)


def _spans(segment: str, flags: list[bool], offset: int) -> str:
    """Escape ``segment``, wrapping runs of drafted characters in a highlight span."""
    if not segment:
        return ""
    out: list[str] = []
    run_start = 0
    current = flags[offset] if offset < len(flags) else False
    for j in range(1, len(segment) + 1):
        flag = flags[offset + j] if j < len(segment) and offset + j < len(flags) else None
        if j == len(segment) or flag != current:
            chunk = html.escape(segment[run_start:j]).replace("  ", "&nbsp; ")
            out.append(f"<span style='background:{DRAFT_BG}'>{chunk}</span>" if current else chunk)
            run_start = j
            current = bool(flag)
    return "".join(out)
