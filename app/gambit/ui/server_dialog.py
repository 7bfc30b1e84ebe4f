"""Tools → Local server: the loaded models behind an OpenAI-compatible API.

Start and stop it, choose the address and port (this machine only unless
another address is named) and an optional API key, copy the base URL for an
editor or a script. Requests run on the window's engine thread, in turn with
its own replies; their figures show in the statistics panel. The server
outlives the dialog: it runs until stopped or the window closes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gambit.errors import GambitError
from gambit.qt.compat import give_to_qt_parents
from gambit.qt.served import LocalService
from gambit.qt.worker import EngineInfo
from gambit.serve.openai_api import ServeOptions
from gambit.storage.settings import SETTINGS, Settings
from gambit.ui import theme
from gambit.ui.settings.settings_widgets import help_line, spin


@dataclass(frozen=True)
class ServerHost:
    """What the dialog needs of the window."""

    service: LocalService
    settings: Callable[[], Settings]
    apply: Callable[[Settings], bool]  # save (MainWindow.apply_settings)
    engine_info: Callable[[], EngineInfo | None]


class ServerDialog(QDialog):
    def __init__(self, host: ServerHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("serverDialog")
        self.setWindowTitle("Local server")
        self.host = host
        s = host.settings()
        self.address = QLineEdit(s.server_host)
        self.address.setObjectName("serverAddressEdit")
        self.port = spin("serverPortSpin", "server_port", special="Any free port")
        self.port.setValue(s.server_port)
        self.api_key = QLineEdit(s.server_api_key)
        self.api_key.setObjectName("serverApiKeyEdit")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.start_button = QPushButton("Start")
        self.start_button.setObjectName("serverStartButton")
        self.start_button.clicked.connect(self.toggle)
        self.copy_button = QPushButton("Copy base URL")
        self.copy_button.setObjectName("serverCopyButton")
        self.copy_button.clicked.connect(self.copy_url)
        self.status = QLabel()
        self.status.setObjectName("serverStatus")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        form = theme.form_layout()
        form.addRow(f"{SETTINGS['server_host'].label}:", help_line(self.address, "server_host"))
        form.addRow(f"{SETTINGS['server_port'].label}:", self.port)
        form.addRow(
            f"{SETTINGS['server_api_key'].label}:", help_line(self.api_key, "server_api_key")
        )
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.copy_button)
        buttons.addStretch(1)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(
            theme.muted_label(
                "Editors, note apps and scripts that speak OpenAI's API use the models loaded "
                "here, with speculative decoding: point them at the base URL. The API has no "
                "encryption; across a network use an SSH tunnel or a TLS proxy."
            )
        )
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        layout.addWidget(close)
        give_to_qt_parents(self)  # one owner per widget (see there)
        self._timer = QTimer(self)  # the request count, while it runs
        self._timer.setInterval(1000)
        self._timer.timeout.connect(self._show_state)
        self._show_state()

    @Slot()
    def toggle(self) -> None:
        service = self.host.service
        if service.running:
            service.stop()
            self._show_state()
            return
        new = self.host.settings().with_(
            server_host=self.address.text().strip(),
            server_port=self.port.value(),
            server_api_key=self.api_key.text().strip(),
        )
        problems = [p for p in new.validate() if p.startswith(("Server", "API key"))]
        if problems or not self.host.apply(new):
            self.status.setText(" ".join(problems) or "The settings could not be saved.")
            return
        generation = new.generation_config()
        options = ServeOptions(
            api_key=new.server_api_key or None,
            defaults=generation.sampling,
            max_tokens=generation.max_tokens,
        )
        try:
            service.start(new.server_host, new.server_port, options)
        except GambitError as exc:
            self.status.setText(f"The server could not start: {exc}.")
            return
        self._show_state()

    @Slot()
    def copy_url(self) -> None:
        url = self.host.service.base_url
        if url:
            QGuiApplication.clipboard().setText(url)
            self.status.setText(f"Copied {url}")

    @Slot()
    def _show_state(self) -> None:
        service = self.host.service
        running = service.running
        self.start_button.setText("Stop" if running else "Start")
        self.copy_button.setEnabled(running)
        for widget in (self.address, self.port, self.api_key):
            widget.setEnabled(not running)
        if not running:
            self._timer.stop()
            self.status.setText("Not serving.")
            return
        self._timer.start()
        info = self.host.engine_info()
        model = info.target_name if info is not None else "no model loaded yet"
        served = sum(service.metrics.requests.values())
        self.status.setText(
            f"Serving {model} at {service.base_url} · {served} request"
            f"{'' if served == 1 else 's'} so far"
            + (" · API key required" if self.api_key.text().strip() else "")
        )
