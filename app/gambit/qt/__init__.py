"""Qt plumbing under the widgets: fixes to the binding, installed explicitly
at start-up (``compat.install()``), the self-test's window probe, and the
worker: ``EngineWorker`` on one ``QThread``, the only bridge between the window
and the engine.

Above the model library and the engine, below ``ui/`` and ``cli/``; nothing
here draws a widget of the app.
"""
