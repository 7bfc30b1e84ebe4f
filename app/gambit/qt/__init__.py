"""Qt plumbing under the widgets: fixes to the binding, installed explicitly
at start-up (``compat.install()``), and the self-test's window probe.

Above the model library and the engine, below ``ui/`` and ``cli/``; nothing
here draws a widget of the app.
"""
