"""The settings dialog's Workers page: other machines that hold the target's layers.

Each address is a ``gambit-worker`` (llama.cpp's RPC backend, ``gambit.engine.machine.rpc``).
Test asks the selected workers (or all) for their memory in a task thread, so
that a worker that does not answer costs the dialog nothing while it waits.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.machine import rpc
from gambit.errors import GambitError
from gambit.fsutil import Progress
from gambit.qt.tasks import Job, TaskThread
from gambit.storage.settings import SETTINGS
from gambit.ui import theme
from gambit.ui.settings.settings_widgets import field_error, group, label, left, page, spin

SECURITY_NOTE = (
    "The workers' protocol has no authentication or encryption: bind a worker to a"
    " LAN address only on a trusted network; an SSH tunnel is the safe way."
)
TESTING = "Testing…"
# A worker that accepts and never answers is busy (or not a worker): say so soon.
TEST_TIMEOUT_S = 3.0

Probed = list[tuple[str, bool, str]]  # address, reachable, its summary or the error


class WorkerList(QTreeWidget):
    """The worker addresses, each with what the last Test found out about it."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("workersList")
        self.setColumnCount(2)
        self.setHeaderLabels(["Address", "Status"])
        self.setRootIsDecorated(False)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        header = self.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.setMinimumHeight(90)

    def addresses(self) -> tuple[str, ...]:
        return tuple(self._item(i).text(0) for i in range(self.topLevelItemCount()))

    def set_addresses(self, addresses: Sequence[str]) -> None:
        self.clear()
        for address in addresses:
            self.add(address)

    def add(self, address: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem([address, ""])
        self.addTopLevelItem(item)
        return item

    def status(self, address: str) -> str:
        """What the last Test said about ``address`` ("" before one)."""
        item = self.item_for(address)
        found = item.data(1, Qt.ItemDataRole.UserRole) if item is not None else None
        return str(found or (item.text(1) if item is not None else ""))

    def item_for(self, address: str) -> QTreeWidgetItem | None:
        for i in range(self.topLevelItemCount()):
            if self._item(i).text(0) == address:
                return self._item(i)
        return None

    def _item(self, index: int) -> QTreeWidgetItem:
        item = self.topLevelItem(index)
        assert item is not None
        return item


def probe_all(addresses: Sequence[str], timeout: float) -> Job:
    """The Test button's job: each worker's memory summary, or why it cannot be used."""

    def job(progress: Progress, cancel: threading.Event) -> Probed:
        found: Probed = []
        for done, address in enumerate(addresses):
            progress("probing", done, len(addresses))  # (raises once cancelled)
            try:
                found.append((address, True, rpc.probe(address, timeout).summary))
            except rpc.RpcWorkerError as exc:
                found.append((address, False, str(exc)))
        return found

    return job


class WorkersPage(QWidget):
    """Addresses with Add / Remove / Test, the layer count, and the security note."""

    def __init__(self) -> None:
        super().__init__()
        self.task: TaskThread | None = None
        self._supported = False
        self.list = WorkerList()
        self.address_edit = QLineEdit()
        self.address_edit.setObjectName("workerAddressEdit")
        self.address_edit.setPlaceholderText("host:port, e.g. 127.0.0.1:50052")
        self.address_edit.returnPressed.connect(self.add_address)
        self.address_error = field_error("workerAddressError")
        self.add_button = _button("Add", "workerAddButton", self.add_address)
        self.remove_button = _button("Remove", "workerRemoveButton", self.remove_selected)
        self.test_button = _button("Test", "workersTestButton", self.test)
        self.layers_spin = spin("workerLayersSpin", "worker_layers", special="All")
        self.unsupported = QLabel(rpc.NO_RPC_MESSAGE)
        self.unsupported.setObjectName("workersUnsupported")
        self.unsupported.setWordWrap(True)
        self.results = QLabel()  # the statuses in full: the column cuts a long one
        self.results.setObjectName("workersTestResults")
        self.results.setWordWrap(True)
        self.results.setTextFormat(Qt.TextFormat.PlainText)
        self.results.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.results.hide()
        self.note = theme.muted_label(SECURITY_NOTE)
        self.note.setObjectName("workersSecurityNote")
        self.list.itemSelectionChanged.connect(self._update_buttons)
        model = self.list.model()  # (the dialog fills the list after the page is built)
        model.rowsInserted.connect(self._update_buttons)
        model.rowsRemoved.connect(self._update_buttons)
        self.page = page(self._group())
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.page)
        self.set_supported(rpc.supported())

    def _group(self) -> QGroupBox:
        add_row = QHBoxLayout()
        add_row.setContentsMargins(0, 0, 0, 0)
        add_row.addWidget(self.address_edit, 1)
        add_row.addWidget(self.add_button)
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.test_button)
        buttons.addStretch(1)
        column = QVBoxLayout()
        column.setContentsMargins(0, 0, 0, 0)
        for widget in (self.unsupported, self.list, self.results):
            column.addWidget(widget)
        column.addLayout(add_row)
        column.addWidget(self.address_error)
        column.addLayout(buttons)
        column.addWidget(self.note)
        form = theme.form_layout(labels_on_top_row=True)
        list_label = QLabel(label("rpc_workers"))
        list_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        form.addRow(list_label, column)
        layers = QVBoxLayout()
        layers.addLayout(left(self.layers_spin))
        layers.addWidget(theme.muted_label(SETTINGS["worker_layers"].help))
        form.addRow(label("worker_layers"), layers)
        return group("Workers on other machines", form)

    def set_supported(self, supported: bool) -> None:
        """Without llama.cpp's RPC backend the page says so and edits nothing."""
        self.unsupported.setVisible(not supported)
        self._supported = supported
        for widget in (self.list, self.address_edit, self.add_button, self.layers_spin):
            widget.setEnabled(supported)
        self._update_buttons()

    @Slot()
    def add_address(self) -> None:
        """Add the typed address (checked and written as host:port) to the list."""
        try:
            address = rpc.parse_endpoint(self.address_edit.text())
        except GambitError as exc:
            self.address_error.setText(str(exc))
            self.address_error.show()
            return
        self.address_error.hide()
        self.address_edit.clear()
        item = self.list.item_for(address) or self.list.add(address)
        self.list.setCurrentItem(item)
        self._update_buttons()

    @Slot()
    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            index = self.list.indexOfTopLevelItem(item)
            self.list.takeTopLevelItem(index)
        self._show_results()
        self._update_buttons()

    @Slot()
    def test(self) -> None:
        """Probe the selected workers (all, when none is selected) off the UI thread."""
        if self.task is not None:
            return
        chosen = [item.text(0) for item in self.list.selectedItems()] or list(self.list.addresses())
        if not chosen:
            return
        for address in chosen:
            item = self.list.item_for(address)
            if item is not None:
                item.setText(1, TESTING)
        task = TaskThread("probe", "Testing the workers", probe_all(chosen, TEST_TIMEOUT_S), self)
        task.finished.connect(self._on_tested)
        self.task = task
        self._update_buttons()
        task.start()

    @Slot()
    def _on_tested(self) -> None:
        task, self.task = self.task, None
        if task is None:
            return
        outcome = task.outcome
        task.deleteLater()
        if outcome is not None and outcome.status == "done" and isinstance(outcome.value, list):
            for address, ok, text in outcome.value:
                self._show_status(address, ok, text)
        self._show_results()
        self._update_buttons()

    def _show_results(self) -> None:
        lines = [self.list.status(a) for a in self.list.addresses()]
        lines = [line for line in lines if line and line != TESTING]
        self.results.setText("\n".join(lines))
        self.results.setVisible(bool(lines))

    def _show_status(self, address: str, ok: bool, text: str) -> None:
        item = self.list.item_for(address)
        if item is None:  # removed while it was tested
            return
        # (the summary starts with the address, which the first column shows)
        item.setText(1, text.removeprefix(f"{address}: "))
        item.setToolTip(1, text)
        item.setData(1, Qt.ItemDataRole.UserRole, text)
        colour = theme.pick(theme.GOOD if ok else theme.BAD, self.palette())
        item.setForeground(1, colour)

    def stop(self) -> None:
        """Wait for a running Test (the dialog is closing; a probe times out soon)."""
        task = self.task
        if task is not None:
            task.cancel_event.set()
            task.wait()

    def _update_buttons(self) -> None:
        on = self._supported
        self.remove_button.setEnabled(on and bool(self.list.selectedItems()))
        self.test_button.setEnabled(on and self.task is None and self.list.topLevelItemCount() > 0)


def _button(text: str, name: str, slot: object) -> QPushButton:
    button = QPushButton(text)
    button.setObjectName(name)
    button.setAutoDefault(False)
    button.clicked.connect(slot)
    return button
