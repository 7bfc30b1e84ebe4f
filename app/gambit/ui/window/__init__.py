"""The main window: its panes and widgets (``main_window``, ``window_layout``,
``window_widgets``), the menus, the chat view with its Markdown and the wash
of drafted characters, attachments, chat files (import, export), the actions
on a message, a reply's flow from request to stored record, and what the
window says when the worker is lost. The top room of the UI: it may import
the other rooms (``stats``, ``settings``, ``measure``, ``models_dialog``,
``server_dialog``, ``theme``) and every layer below the UI; of ``ui`` only
``app`` imports it.
"""
