"""Chat files: conversations exported and imported (docs/export.md). Gambit's
JSON export and the Markdown to read (``chat_export``), the limits and checks
a file being imported must pass (``chat_file``), and the readers of Gambit's
own format (``chat_import``) and of the OpenAI-style messages other tools
write (``chat_openai``). Of ``storage`` it may import ``chat_store`` (the
store an import adds to, an export reads), ``json_values`` and
``reply_stats`` (the figures stored with a reply); nothing of ``prompts``.
The command line's ``chats`` and the window's chat files import it.
"""
