"""A cut reply's text ends at its last whole character, and a continued
reply's text picks up where it ended (``TextStream.finish(whole=False)``,
``TextStream.skip``): no replacement character at the cut, none after it."""

from __future__ import annotations

from gambit.engine.text.text_stream import TextStream

EMOJI = "🌞".encode()  # four bytes


def test_a_cut_inside_a_character_leaves_it_out_and_an_end_shows_it_replaced() -> None:
    cut = TextStream(())
    shown = cut.feed(b"sun " + EMOJI[:2])[0] + cut.finish(whole=False)
    assert shown == "sun "
    ended = TextStream(())
    assert ended.feed(b"sun " + EMOJI[:2])[0] + ended.finish() == "sun \ufffd"


def test_a_continued_stream_completes_the_character_its_start_split() -> None:
    stream = TextStream(())
    stream.skip(b"sun " + EMOJI[:2])  # shown already: "sun "
    text, hit = stream.feed(EMOJI[2:] + b" and sea")
    assert (text, hit) == ("🌞 and sea", False)
    assert stream.finish() == ""


def test_a_stop_string_begun_before_the_cut_is_found_after_it() -> None:
    stream = TextStream(("User:",))
    stream.skip(b"Done. Us")
    text, hit = stream.feed(b"er: next")
    assert hit and text == ""
    assert stream.text == "Done. "
