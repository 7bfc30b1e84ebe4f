"""The settings dialog: every :class:`~gambit.storage.settings.Settings` field, on four tabs.

The dialog edits a copy: :meth:`SettingsDialog.settings` builds a new ``Settings``
from the widgets, and OK only closes the dialog once ``Settings.validate()`` finds
no problem. Problems are listed inline, above the buttons, so the user can fix
them without losing what they typed. The pages are built in ``settings_pages``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QCheckBox,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QRadioButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.drafters.registry import (
    COPYING_DRAFTERS,
    DRAFTERS,
    TREE_DRAFTERS,
    DrafterKind,
)
from gambit.formats.mtp import MtpAvailability, mtp_availability, without_heads
from gambit.models.default_model import DEFAULT_MODEL_NAME, default_model_file
from gambit.models.settings_check import model_file_problems
from gambit.qt.compat import give_to_qt_parents
from gambit.storage.paths import models_dir
from gambit.storage.settings import (
    EXACT_KERNELS_HELP,
    LABELS,
    TREE_HELP,
    PolicyChoice,
    Settings,
)
from gambit.ui import theme
from gambit.ui.settings.settings_pages import NO_GPU_TOOLTIP, SettingsPages
from gambit.ui.settings.settings_widgets import PageScroll
from gambit.ui.settings.settings_workers import WorkerList, WorkersPage

__all__ = [
    "EXACT_KERNELS_HELP",
    "GGUF_FILTER",
    "LAYERSKIP_HELP",
    "NO_GPU_TOOLTIP",
    "TREE_HELP",
    "TREE_NEEDS_DRAFTER",
    "SettingsDialog",
]

LAYERSKIP_HELP = DRAFTERS["layerskip"].help  # (the tests read it here)
TREE_NEEDS_DRAFTER = "Trees need a drafter: prompt lookup, a draft model or self-speculation."
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
MIN_WIDTH = 560


class SettingsDialog(SettingsPages):
    """Edit a :class:`Settings`; :meth:`settings` returns the edited values."""

    def __init__(
        self,
        settings: Settings,
        parent: QWidget | None = None,
        gpu_offload: bool = False,
        forget_memory: Callable[[], None] | None = None,
    ) -> None:
        """``forget_memory`` deletes prompt lookup's memory of the chats (its
        button is disabled without it)."""
        super().__init__(parent)
        self._base = settings
        self._gpu_offload = gpu_offload
        self._forget_memory = forget_memory
        self._errors: list[str] = []
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self.setMinimumWidth(MIN_WIDTH)
        self.setSizeGripEnabled(True)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("settingsTabs")
        self.tabs.setDocumentMode(False)
        self.tabs.addTab(PageScroll(self._models_page()), "Models")
        self.tabs.addTab(PageScroll(self._speculation_page()), "Speculation")
        self.tabs.addTab(PageScroll(self._sampling_page()), "Sampling")
        self.tabs.addTab(self._chat_page(), "Chat")  # its text box grows and scrolls itself
        self.workers_page = WorkersPage()
        self.tabs.addTab(PageScroll(self.workers_page), "Workers")
        self.tabs.addTab(PageScroll(self._server_page()), "Server")
        self.forget_memory_button.setEnabled(forget_memory is not None)

        self.error_label = QLabel()
        self.error_label.setObjectName("errorLabel")
        self.error_label.setWordWrap(True)
        self.error_label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        palette = self.palette()
        red = theme.pick(theme.BAD, palette)
        window = palette.color(QPalette.ColorRole.Window)
        self.error_label.setStyleSheet(
            f"QLabel#errorLabel {{ color: {red.name()};"
            f" background: {theme.blend(red, window, 0.9).name()};"
            f" border: 1px solid {theme.blend(red, window, 0.6).name()};"
            " border-radius: 4px; padding: 6px 8px; }"
        )
        self.error_label.hide()

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults
        )
        self.buttons.setObjectName("settingsButtons")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.buttons.clicked.connect(self._on_button)

        self._layout = layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 14, 14, 14)
        layout.setSpacing(10)
        layout.addWidget(self.tabs)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)
        give_to_qt_parents(self)  # one owner per widget (see there)

        self._load(settings)

    # -- values ---------------------------------------------------------------------------

    def _load(self, s: Settings) -> None:
        """Show ``s`` in the widgets."""
        for name, widget in self._field_widgets().items():
            if not isinstance(widget, QRadioButton):  # (the choices, set below)
                show_value(widget, getattr(s, name))
        self.drafter_radios[s.drafter].setChecked(True)
        policies = {"adaptive": self.policy_adaptive_radio, "fixed": self.policy_fixed_radio}
        policies[s.policy].setChecked(True)
        self._update_enabled()
        self.update_mtp()

    def _drafter(self) -> DrafterKind:
        for kind, radio in self.drafter_radios.items():
            if radio.isChecked():
                return kind
        return "none"

    def _policy(self) -> PolicyChoice:
        return "fixed" if self.policy_fixed_radio.isChecked() else "adaptive"

    def settings(self) -> Settings:
        """The settings as edited so far (not necessarily valid: see ``validate()``)."""
        values = {
            name: widget_value(widget)
            for name, widget in self._field_widgets().items()
            if not isinstance(widget, QRadioButton)
        }
        return self._base.with_(drafter=self._drafter(), policy=self._policy(), **values)

    def errors(self) -> list[str]:
        """The problems currently listed under the tabs (empty when none are shown)."""
        return list(self._errors)

    # -- behaviour ------------------------------------------------------------------------

    def accept(self) -> None:
        """Close with Accepted only if the edited settings are valid and their model
        files are GGUF models that can be loaded; else list the problems."""
        settings = self.settings()
        problems = settings.validate()
        problems += model_file_problems(settings, missing=False).values()
        if problems:
            self._show_errors(problems)
            return
        self._show_errors([])
        super().accept()

    def _show_errors(self, problems: list[str]) -> None:
        self._errors = list(problems)
        for name, label in self.field_errors.items():  # each file's reason next to its field
            mine = [p for p in problems if p.startswith(LABELS[name])]
            label.setText("\n".join(mine))
            label.setVisible(bool(mine))
        if not problems:
            self.error_label.clear()
            self.error_label.hide()
            return
        if len(problems) == 1:
            text = problems[0]
        else:
            text = "Please fix these problems:\n" + "\n".join(f"•  {p}" for p in problems)
        self.error_label.setText(text)
        self.error_label.show()
        self._fit_height()
        self._reveal(problems)

    def _field_widgets(self) -> dict[str, QWidget]:
        """The widget that edits each setting, by field name: what the dialog shows
        (``_load``), reads back (``settings``) and points at (``_reveal``).
        A choice is edited by radio buttons; the first one stands for it."""
        return {
            "target_model": self.target_model_edit,
            "drafter": self.drafter_radios["none"],
            "draft_model": self.draft_model_edit,
            "context_size": self.context_size_spin,
            "threads": self.threads_spin,
            "gpu_layers_target": self.gpu_layers_target_spin,
            "gpu_layers_draft": self.gpu_layers_draft_spin,
            "speculation": self.speculation_check,
            "policy": self.policy_adaptive_radio,
            "fixed_gamma": self.fixed_gamma_spin,
            "gamma_max": self.gamma_max_spin,
            "tree_drafts": self.tree_drafts_check,
            "tree_nodes": self.tree_nodes_spin,
            "exact_kernels": self.exact_kernels_check,
            "highlight_drafted": self.highlight_drafted_check,
            "show_stats": self.show_stats_check,
            "even_streaming": self.even_streaming_check,
            "lookup_memory": self.lookup_memory_check,
            "temperature": self.temperature_spin,
            "top_k": self.top_k_spin,
            "top_p": self.top_p_spin,
            "min_p": self.min_p_spin,
            "repeat_penalty": self.repeat_penalty_spin,
            "seed": self.seed_spin,
            "max_tokens": self.max_tokens_spin,
            "system_prompt": self.system_prompt_edit,
            "rpc_workers": self.workers_page.list,
            "worker_layers": self.workers_page.layers_spin,
            "server_host": self.server_host_edit,
            "server_port": self.server_port_spin,
            "server_api_key": self.server_api_key_edit,
        }

    def _reveal(self, problems: list[str]) -> None:
        """Show the tab of the first problem (unless the current tab has one) and focus it.

        Validation messages start with the setting's label (``LABELS``), which is
        how a message finds its widget.
        """
        widgets = self._field_widgets()
        by_label = sorted(LABELS.items(), key=lambda item: -len(item[1]))  # longest first
        culprits: list[QWidget] = []
        for problem in problems:
            name = next((n for n, label in by_label if problem.startswith(label)), None)
            if name is not None and name in widgets:
                culprits.append(widgets[name])
        if not culprits:
            return
        current = self.tabs.currentWidget()
        here = [w for w in culprits if current is not None and current.isAncestorOf(w)]
        target = here[0] if here else culprits[0]
        for index in range(self.tabs.count()):
            page = self.tabs.widget(index)
            if page is not None and page.isAncestorOf(target):
                self.tabs.setCurrentIndex(index)
        if target.isEnabled():
            target.setFocus(Qt.FocusReason.OtherFocusReason)

    def _fit_height(self) -> None:
        """Grow (never shrink) the dialog so that the error list squeezes nothing."""
        layout = self._layout
        layout.activate()
        width = self.width()
        needed = (
            layout.totalHeightForWidth(width)
            if layout.hasHeightForWidth()
            else layout.totalSizeHint().height()
        )
        if self.height() < needed:
            self.resize(width, needed)

    def done(self, result: int) -> None:
        self.workers_page.stop()  # a running Test's thread must end before the dialog
        super().done(result)

    @Slot(QAbstractButton)
    def _on_button(self, button: QAbstractButton) -> None:
        role = self.buttons.buttonRole(button)
        if role == QDialogButtonBox.ButtonRole.ResetRole:
            self.restore_defaults()

    def restore_defaults(self) -> None:
        """Show the default settings in every widget (nothing is saved until OK)."""
        self._load(Settings())
        self._show_errors([])

    def _forget(self) -> None:
        """Delete the memory now (asked again first: it cannot be undone)."""
        if self._forget_memory is None:
            return
        answer = QMessageBox.question(
            self,
            "Forget earlier chats?",
            "Prompt lookup's index of your conversations is deleted. The conversations"
            " stay; with “Copy from earlier chats” on, the index is built again from them"
            " before the next reply.",
        )
        if answer == QMessageBox.StandardButton.Yes:
            self._forget_memory()
            self.forget_memory_button.setEnabled(False)
            self.forget_memory_button.setText("Forgotten")

    def _update_enabled(self) -> None:
        drafter = self._drafter()
        draft = DRAFTERS[drafter].file == "chosen"
        self.draft_model_edit.setEnabled(draft)
        self.draft_browse.setEnabled(draft)
        # a layer-skip draft is a second (slimmer) copy of the target: it can be offloaded too
        gpu_draft_useful = self._gpu_offload and DRAFTERS[drafter].loads_model
        self.gpu_layers_draft_spin.setEnabled(gpu_draft_useful)
        self._gpu_draft_label.setEnabled(gpu_draft_useful)

        self.lookup_memory_check.setEnabled(drafter in COPYING_DRAFTERS)
        speculating = self.speculation_check.isChecked()
        for widget in (self.policy_adaptive_radio, self.policy_fixed_radio, self.gamma_max_spin):
            widget.setEnabled(speculating)
        self.fixed_gamma_spin.setEnabled(speculating and self.policy_fixed_radio.isChecked())

        tree_possible = speculating and drafter in TREE_DRAFTERS
        self.tree_drafts_check.setEnabled(tree_possible)
        self.tree_drafts_check.setToolTip("" if drafter in TREE_DRAFTERS else TREE_NEEDS_DRAFTER)
        tree_on = tree_possible and self.tree_drafts_check.isChecked()
        self.tree_nodes_spin.setEnabled(tree_on)
        self._tree_nodes_label.setEnabled(tree_on)

    def mtp(self) -> MtpAvailability:
        """Whether the chosen target's multi-token-prediction heads can draft, and why not."""
        if self._mtp is None:
            self.update_mtp()
        assert self._mtp is not None
        return self._mtp

    @Slot()
    def update_mtp(self) -> None:
        """Read the chosen target's header and say on the MTP item why it is not offered."""
        self._mtp_timer.stop()
        text = self.target_model_edit.text().strip()
        if text:
            self._mtp = mtp_availability(Path(text).expanduser())
        else:
            default = default_model_file()
            self._mtp = (
                mtp_availability(default)
                if default is not None
                else without_heads(DEFAULT_MODEL_NAME)
            )
        self.drafter_mtp_radio.setEnabled(False)  # no MTP drafter in Gambit yet, whatever the file
        self.drafter_mtp_radio.setToolTip(self._mtp.reason)
        self.drafter_help["mtp"].setText(self._mtp.reason)

    def _browse(self, edit: QLineEdit, caption: str) -> None:
        """Open a non-blocking file dialog for a .gguf file; the choice goes into ``edit``."""
        current = Path(edit.text().strip()).expanduser() if edit.text().strip() else None
        if current is not None and current.parent.is_dir():
            start = str(current.parent)
        elif models_dir().is_dir():
            start = str(models_dir())
        else:
            start = str(Path.home())
        dialog = QFileDialog(self, caption, start, GGUF_FILTER)
        dialog.setObjectName("modelFileDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptOpen)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(edit.setText)
        dialog.open()


def show_value(widget: QWidget, value: object) -> None:
    """Put a setting's ``value`` into the ``widget`` that edits it."""
    if isinstance(widget, QLineEdit):
        widget.setText(str(value))
    elif isinstance(widget, QPlainTextEdit):
        widget.setPlainText(str(value))
    elif isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, QSpinBox):
        widget.setValue(int(value))  # type: ignore[call-overload]
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(float(value))  # type: ignore[arg-type]
    elif isinstance(widget, WorkerList):
        widget.set_addresses(tuple(value))  # type: ignore[arg-type]
    else:
        raise TypeError(f"no way to show a setting in {type(widget).__name__}")


def widget_value(widget: QWidget) -> object:
    """The value a setting's ``widget`` holds (a file path without its spaces)."""
    if isinstance(widget, QLineEdit):
        return widget.text().strip()
    if isinstance(widget, QPlainTextEdit):
        return widget.toPlainText()
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.value()
    if isinstance(widget, WorkerList):
        return widget.addresses()
    raise TypeError(f"no way to read a setting from {type(widget).__name__}")
