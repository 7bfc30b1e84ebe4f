"""The chat history's file: conversations and their messages in one SQLite
file (``conversations``, the store), the immutable rows it hands out
(``rows``), and opening it so that the app always starts (``recovery``, with
``salvage`` reading back what a damaged file still holds). Of ``storage`` it
may import only ``paths`` and ``files``; below storage, ``errors``,
``fsutil`` and ``words``. What writes or reads the history imports it: export
and import, the prompts made from stored messages, the self-test's check and
the window.
"""
