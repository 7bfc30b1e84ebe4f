"""The settings dialog's Workers page, with a real ``gambit-worker`` process on
127.0.0.1 (offscreen Qt, real widgets, no mocks)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QLabel, QTabWidget
from pytestqt.qtbot import QtBot

from gambit.engine.machine import rpc
from gambit.storage.settings import Settings
from gambit.ui.settings.settings_dialog import SettingsDialog
from gambit.ui.settings.settings_workers import SECURITY_NOTE, TESTING
from worker_process import WorkerProcess, free_port, workers


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[WorkerProcess]:
    with workers(tmp_path, 1) as started:
        yield started[0]


def _dialog(qtbot: QtBot, settings: Settings) -> SettingsDialog:
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    tabs = dialog.findChild(QTabWidget)
    assert isinstance(tabs, QTabWidget)
    tabs.setCurrentIndex(next(i for i in range(tabs.count()) if tabs.tabText(i) == "Workers"))
    return dialog


def _tested(qtbot: QtBot, dialog: SettingsDialog, *addresses: str) -> None:
    page = dialog.workers_page
    qtbot.waitUntil(
        lambda: page.task is None and all(page.list.status(a) != TESTING for a in addresses),
        timeout=30_000,
    )


def test_test_shows_each_workers_memory_or_its_refusal(qtbot: QtBot, worker: WorkerProcess) -> None:
    refused = f"127.0.0.1:{free_port()}"  # nothing listens there
    dialog = _dialog(qtbot, Settings(rpc_workers=(worker.endpoint, refused)))
    page = dialog.workers_page
    assert page.list.addresses() == (worker.endpoint, refused)
    qtbot.mouseClick(page.test_button, Qt.MouseButton.LeftButton)
    # the probes run in a thread: the window is back before they answer
    assert page.task is not None and not page.test_button.isEnabled()
    assert page.list.status(worker.endpoint) == TESTING
    _tested(qtbot, dialog, worker.endpoint, refused)

    live = page.list.status(worker.endpoint)
    assert live.startswith(f"{worker.endpoint}: ") and " GiB free on 1 device " in live
    assert live.endswith(f"(protocol {rpc.PROTO_MAJOR}.{rpc.PROTO_MINOR}.0)")
    assert page.list.status(refused) == (
        f"No worker answers at {refused} (connection refused): start `gambit-worker` on "
        "that machine, or check the address and port."
    )
    assert page.test_button.isEnabled()
    # the column may cut them short; the lines under the list never do
    assert page.results.isVisible()
    assert page.results.text() == f"{live}\n{page.list.status(refused)}"


def test_test_probes_only_the_selected_worker(qtbot: QtBot, worker: WorkerProcess) -> None:
    other = f"127.0.0.1:{free_port()}"
    dialog = _dialog(qtbot, Settings(rpc_workers=(other, worker.endpoint)))
    page = dialog.workers_page
    item = page.list.item_for(worker.endpoint)
    assert item is not None
    page.list.setCurrentItem(item)
    qtbot.mouseClick(page.test_button, Qt.MouseButton.LeftButton)
    _tested(qtbot, dialog, worker.endpoint)
    assert "GiB free" in page.list.status(worker.endpoint)
    assert page.list.status(other) == ""  # not asked


def test_add_checks_the_address_and_remove_takes_it_out(qtbot: QtBot) -> None:
    dialog = _dialog(qtbot, Settings())
    page = dialog.workers_page
    assert not page.test_button.isEnabled()  # nothing to test yet
    page.address_edit.setText("lan box:1")
    qtbot.mouseClick(page.add_button, Qt.MouseButton.LeftButton)
    assert page.list.addresses() == ()
    assert page.address_error.isVisible()
    assert page.address_error.text() == (
        "'lan box:1' is not a worker address: write host:port, e.g. 127.0.0.1:50052."
    )
    assert page.address_edit.text() == "lan box:1"  # kept, to be corrected

    page.address_edit.setText("lan-box")
    qtbot.keyClick(page.address_edit, Qt.Key.Key_Return)
    page.address_edit.setText("127.0.0.1:6000")
    qtbot.mouseClick(page.add_button, Qt.MouseButton.LeftButton)
    assert not page.address_error.isVisible()
    assert page.list.addresses() == ("lan-box:50052", "127.0.0.1:6000")
    assert dialog.settings().rpc_workers == ("lan-box:50052", "127.0.0.1:6000")

    first = page.list.item_for("lan-box:50052")
    assert first is not None
    page.list.setCurrentItem(first)
    qtbot.mouseClick(page.remove_button, Qt.MouseButton.LeftButton)
    assert dialog.settings().rpc_workers == ("127.0.0.1:6000",)


def test_layer_count_and_security_note(qtbot: QtBot) -> None:
    dialog = _dialog(qtbot, Settings(rpc_workers=("127.0.0.1:50052",), worker_layers=0))
    page = dialog.workers_page
    assert page.layers_spin.text() == "All"
    page.layers_spin.setValue(14)
    assert dialog.settings().worker_layers == 14
    note = dialog.findChild(QLabel, "workersSecurityNote")
    assert isinstance(note, QLabel) and note.isVisible() and note.text() == SECURITY_NOTE
    assert "no authentication or encryption" in note.text() and "SSH tunnel" in note.text()
    assert not page.unsupported.isVisible()


def test_without_rpc_support_the_page_says_so_and_is_disabled(qtbot: QtBot) -> None:
    dialog = _dialog(qtbot, Settings(rpc_workers=("127.0.0.1:50052",)))
    page = dialog.workers_page
    page.set_supported(False)  # what a llama.cpp built without GGML_RPC gets
    assert page.unsupported.isVisible() and page.unsupported.text() == rpc.NO_RPC_MESSAGE
    for widget in (page.list, page.address_edit, page.add_button, page.layers_spin):
        assert not widget.isEnabled()
    assert not page.test_button.isEnabled() and not page.remove_button.isEnabled()


def test_a_bad_address_from_the_file_keeps_the_dialog_open(qtbot: QtBot) -> None:
    dialog = _dialog(qtbot, Settings(rpc_workers=("no port:x",)))
    tabs = dialog.findChild(QTabWidget)
    assert isinstance(tabs, QTabWidget)
    tabs.setCurrentIndex(0)
    box = dialog.findChild(QDialogButtonBox)
    assert isinstance(box, QDialogButtonBox)
    ok = box.button(QDialogButtonBox.StandardButton.Ok)
    assert ok is not None
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
    assert dialog.isVisible()
    assert dialog.errors() == [
        "Workers must each be host:port (e.g. 127.0.0.1:50052), not 'no port:x'."
    ]
    assert tabs.tabText(tabs.currentIndex()) == "Workers"  # brought forward
