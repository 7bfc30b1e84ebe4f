"""The chat renderer: Markdown subset to HTML, drafted characters highlighted."""

from __future__ import annotations

import re

from gambit.ui.markdown import DRAFT_BG, render


def visible_text(html_text: str) -> str:
    text = re.sub(r"<br>", "\n", html_text)
    text = re.sub(r"<[^>]+>", "", text)
    return (
        text.replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .replace("&#x27;", "'")
        .replace("&quot;", '"')
    )


def test_plain_text_is_escaped() -> None:
    out = render("a < b & c > d", None)
    assert "&lt;" in out and "&amp;" in out and "<b>" not in out


def test_fenced_code_block_keeps_lines_and_escapes() -> None:
    out = render("Here:\n```python\nif a < b:\n    print('x')\n```\nDone.")
    pre = re.search(r"<pre[^>]*>(.*?)</pre>", out, re.S)
    assert pre is not None
    assert "if a &lt; b:" in pre.group(1)
    assert pre.group(1).count("\n") == 1  # two code lines
    assert "Done." in out.split("</pre>")[1]


def test_unclosed_fence_while_streaming_is_still_code() -> None:
    out = render("```\npartial code")
    assert "<pre" in out and "partial code" in out


def test_inline_formatting() -> None:
    out = render("Use `x = 1`, **bold** and *italic*.")
    assert re.search(r"<code[^>]*>x = 1</code>", out)
    assert "<b>bold</b>" in out and "<i>italic</i>" in out


def test_headings_and_lists() -> None:
    out = render("# Title\n- one\n- two\n1. first")
    assert "Title" in out and "font-weight:600" in out
    assert out.count("•") == 2 and "1." in out


def test_drafted_characters_are_highlighted_exactly() -> None:
    text = "hello world"
    flags = [False] * 6 + [True] * 5  # "world" came from the draft
    out = render(text, flags, highlight=True)
    spans = re.findall(rf"<span style='background:{re.escape(DRAFT_BG)}'>(.*?)</span>", out)
    assert spans == ["world"]
    assert render(text, flags, highlight=False).count("<span") == 0


def test_highlight_survives_formatting_boundaries() -> None:
    text = "a `code` b"
    flags = [True] * len(text)
    out = render(text, flags)
    spans = re.findall(r"<span style='background:[^']*'>(.*?)</span>", out)
    assert "".join(spans) == "a code b"  # the backticks are markup, not text


def test_visible_text_round_trips_for_prose() -> None:
    text = "First line\nsecond line\n\nNew paragraph with 2 < 3."
    assert visible_text(render(text)) == "First line\nsecond line" + "New paragraph with 2 < 3."
