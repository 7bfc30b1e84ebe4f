"""The message when a worker that holds the target's layers is lost mid-reply.

The reply so far is saved and the broken engine is gone (``EngineWorker``'s
``engine_lost``); the message names the worker and offers to go on with every
layer on this machine, which clears the workers setting and loads the model here.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

TITLE = "A worker was lost"
CONTINUE_LOCALLY = "Continue on this machine"
CONTINUE_HELP = (
    f"{CONTINUE_LOCALLY} removes the workers from Settings and loads the whole model"
    " here (if it fits in this machine's memory). Or start the worker again and"
    " reload from Settings → Workers."
)


def offer_local(parent: QWidget, message: str, on_continue: Callable[[], None]) -> QMessageBox:
    """A window-modal warning with the lost worker's message and a button that
    calls ``on_continue``; it does not block the event loop."""
    box = QMessageBox(QMessageBox.Icon.Warning, TITLE, message, parent=parent)
    box.setObjectName("workerLostDialog")
    box.setInformativeText(CONTINUE_HELP)
    local = box.addButton(CONTINUE_LOCALLY, QMessageBox.ButtonRole.AcceptRole)
    local.setObjectName("continueLocallyButton")
    local.clicked.connect(on_continue)
    box.addButton(QMessageBox.StandardButton.Close)
    box.setDefaultButton(local)
    box.setWindowModality(Qt.WindowModality.WindowModal)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box
