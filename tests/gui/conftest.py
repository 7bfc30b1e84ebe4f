"""GUI tests run on Qt's offscreen platform: no display needed."""

from __future__ import annotations

import os

# Must happen before anything imports Qt.
os.environ["QT_QPA_PLATFORM"] = "offscreen"

from gambit.qt import compat

# As the app does at start-up (gambit.ui.app): before any test calls Qt.
compat.install()
