"""The ``gambit`` entry point: icon, crash message, and the GUI starting for real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QIcon, QImage
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from gambit.models.default_model import DEFAULT_MODEL_FILE
from gambit.ui import app as entry


def test_icon_files_cover_every_size(qapp: QApplication) -> None:
    files = entry.icon_files()
    assert [int(p.stem.rsplit("-", 1)[1]) for p in files] == list(entry.ICON_SIZES)
    for path in files:
        size = int(path.stem.rsplit("-", 1)[1])
        image = QImage(str(path))
        assert (image.width(), image.height()) == (size, size)
        assert image.hasAlphaChannel()
    icons = files[0].parent
    assert (icons / "gambit.svg").read_text().lstrip().startswith("<?xml")
    assert (icons / "gambit.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"
    assert (icons / "gambit.icns").read_bytes()[:4] == b"icns"
    icon = QIcon()
    for path in files:
        icon.addFile(str(path))
    assert not icon.isNull()
    assert icon.availableSizes()[-1].width() == 512


def test_crash_box_is_not_shown_offscreen(qtbot: QtBot, tmp_path: Path) -> None:
    # On the offscreen platform nobody could dismiss a modal box: it must not block.
    assert QApplication.platformName() == "offscreen"
    entry._show_crash_box(tmp_path / "crash.txt", "RuntimeError: boom")


GUI_DRIVER = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import gambit.ui.app as entry

real_exec = QApplication.exec  # static in PySide6

def exec_briefly(*_args):
    # Close the window as a user would: the engine thread stops, then the app quits.
    QTimer.singleShot(int(sys.argv[1]), QApplication.closeAllWindows)
    return real_exec()

QApplication.exec = exec_briefly
code = entry.main([])
app = QApplication.instance()
print("icon:", not app.windowIcon().isNull(), "name:", app.applicationName())
sys.exit(code)
"""


@pytest.mark.parametrize("close_ms", [2500, 300])
def test_gui_starts_with_icon_logging_and_crash_handler(
    smol_q4_1: Path, tmp_path: Path, close_ms: int
) -> None:
    """Started and closed as a user would; closed at 300 ms, the models are
    still loading (a fresh home: the kernels are probed first), and the load
    stops there without a message box nobody would answer."""
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    (models / DEFAULT_MODEL_FILE).symlink_to(smol_q4_1)  # no download
    env = {**os.environ, "GAMBIT_HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    if close_ms < 1000:
        env.pop("GAMBIT_CACHE", None)  # its own cache: the kernels are probed during the load
    proc = subprocess.run(
        [sys.executable, "-c", GUI_DRIVER, str(close_ms)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "icon: True name: Gambit" in proc.stdout
    log_text = (tmp_path / "logs" / "gambit.log").read_text()
    assert "Gambit 0.1.0 starting" in log_text
    assert (tmp_path / "logs" / "crashes" / "native.log").is_file()
    assert not list((tmp_path / "logs" / "crashes").glob("crash-*.txt"))
