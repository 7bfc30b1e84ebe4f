"""Stored messages read back as prompts: the messages a reply is generated
from, in turns that alternate as strict templates demand (``history``);
what Continue reads of a cut reply, its kept tokens (``continuing``); and the
user's own turns with the prompt each had, for Measure on my chats to replay
(``history_turns``, read-only). Of ``storage`` it may import only
``chat_store`` (its rows); of the engine, ``text`` (the messages and kept
tokens it hands over). The window and Measure on my chats (its dialog, the
bench's replay) import it.
"""
