"""GUI tests run on Qt's offscreen platform: no display needed."""

from __future__ import annotations

import os

# Must happen before anything imports Qt.
os.environ["QT_QPA_PLATFORM"] = "offscreen"
