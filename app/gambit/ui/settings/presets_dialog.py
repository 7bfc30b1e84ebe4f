"""Tools → Presets…: named system prompts with their sampling.

The presets on the left ("Default" first: the settings' own, edited in
Settings); the chosen one's name, system prompt and values on the right, in
the same spin boxes, ranges and words as Settings (``settings_widgets``).
New starts from Default's values; OK checks every preset as Settings checks
its own values, and saves them all, or says what to correct.
"""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from gambit.storage.presets import (
    DEFAULT_PRESET,
    PRESET_FIELDS,
    Preset,
    name_problem,
    preset_problems,
)
from gambit.storage.settings import SETTINGS, Settings
from gambit.ui import theme
from gambit.ui.settings.settings_dialog import show_value, widget_value
from gambit.ui.settings.settings_widgets import double, field_error, label, left, spin

DEFAULT_NOTE = (
    "Default is the settings' own system prompt and sampling: change them in Settings. "
    "New starts a preset from them."
)


class PresetsDialog(QDialog):
    """Edits a copy of ``presets``; ``presets()`` is the result once accepted."""

    def __init__(self, presets: list[Preset], settings: Settings, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("presetsDialog")
        self.setWindowTitle("Presets")
        self.resize(860, 560)
        self._settings = settings
        self._presets = list(presets)
        self._shown: int | None = None  # the index in _presets on the right (None: Default)
        self.list = QListWidget()
        self.list.setObjectName("presetList")
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("presetNameEdit")
        self.prompt_edit = QPlainTextEdit()
        self.prompt_edit.setObjectName("presetPromptEdit")
        self.prompt_edit.setTabChangesFocus(True)
        self.prompt_edit.setPlaceholderText("None: the model's own behaviour")
        self.fields: dict[str, QWidget] = {
            "temperature": double("presetTemperature", "temperature", 0.05, special="0 (greedy)"),
            "top_k": spin("presetTopK", "top_k", special="Off"),
            "top_p": double("presetTopP", "top_p", 0.05),
            "min_p": double("presetMinP", "min_p", 0.01, special="Off"),
            "repeat_penalty": double("presetRepeatPenalty", "repeat_penalty", 0.05),
            "seed": spin("presetSeed", "seed", special="Random"),
            "max_tokens": spin("presetMaxTokens", "max_tokens", step=64),
            "speculation": QCheckBox(SETTINGS["speculation"].label),
        }
        self.fields["speculation"].setObjectName("presetSpeculation")
        self.note = theme.muted_label(DEFAULT_NOTE)
        self.note.setObjectName("presetNote")
        self.error = field_error("presetError")
        self._build()
        self._fill_list(0)

    def _build(self) -> None:
        form = theme.form_layout()
        form.addRow("Name:", self.name_edit)
        form.addRow(label("system_prompt"), self.prompt_edit)
        for name, widget in self.fields.items():
            form.addRow(label(name) if name != "speculation" else "", left(widget))
        self.form_box = QWidget()
        self.form_box.setLayout(form)
        self.new_button = QPushButton("New")
        self.new_button.setObjectName("newPresetButton")
        self.new_button.clicked.connect(self.new_preset)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setObjectName("deletePresetButton")
        self.delete_button.clicked.connect(self.delete_preset)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_button)
        buttons.addWidget(self.delete_button)
        side = QVBoxLayout()
        side.addWidget(self.list, 1)
        side.addLayout(buttons)
        right = QVBoxLayout()
        right.addWidget(self.note)
        right.addWidget(self.form_box, 1)
        right.addWidget(self.error)
        row = QHBoxLayout()
        row.addLayout(side, 1)
        row.addLayout(right, 3)
        box = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        box.accepted.connect(self.accept)
        box.rejected.connect(self.reject)
        column = QVBoxLayout(self)
        column.addLayout(row, 1)
        column.addWidget(box)
        self.list.currentRowChanged.connect(self._on_row)

    # ------------------------------------------------------------------ list
    def _fill_list(self, row: int) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        self.list.addItem(QListWidgetItem(f"{DEFAULT_PRESET} (the settings)"))
        for preset in self._presets:
            self.list.addItem(QListWidgetItem(preset.name))
        self.list.blockSignals(False)
        self._shown = None
        self.list.setCurrentRow(row)
        self._on_row(row)

    @Slot(int)
    def _on_row(self, row: int) -> None:
        self._keep_shown()
        index = row - 1 if row > 0 else None
        preset = self._presets[index] if index is not None else Preset.of("", self._settings)
        values = preset.applied_to(self._settings)  # (a value it lacks: the settings')
        self.name_edit.setText(DEFAULT_PRESET if index is None else preset.name)
        self.prompt_edit.setPlainText(values.system_prompt)
        for name, widget in self.fields.items():
            show_value(widget, getattr(values, name))
        self.form_box.setEnabled(index is not None)
        self.note.setVisible(index is None)
        self.delete_button.setEnabled(index is not None)
        self._shown = index

    def _keep_shown(self) -> None:
        """The form's values back into the preset shown, before another is."""
        if self._shown is None or self._shown >= len(self._presets):
            return
        values = {name: widget_value(widget) for name, widget in self.fields.items()}
        values["system_prompt"] = self.prompt_edit.toPlainText().strip()
        name = " ".join(self.name_edit.text().split())
        self._presets[self._shown] = Preset(name, {k: values[k] for k in PRESET_FIELDS})
        item = self.list.item(self._shown + 1)
        if item is not None:
            item.setText(name or "(no name)")

    @Slot()
    def new_preset(self) -> None:
        self._keep_shown()
        names = [p.name for p in self._presets]
        n = 1
        while name_problem(f"Preset {n}", names):
            n += 1
        self._presets.append(Preset.of(f"Preset {n}", self._settings))
        self._fill_list(len(self._presets))
        self.name_edit.setFocus()
        self.name_edit.selectAll()

    @Slot()
    def delete_preset(self) -> None:
        if self._shown is None:
            return
        del self._presets[self._shown]
        self._shown = None
        self._fill_list(min(self.list.currentRow(), len(self._presets)))

    # -------------------------------------------------------------- results
    def problems(self) -> list[str]:
        """Every preset's problems, each named ("Writer: Temperature must be …")."""
        self._keep_shown()
        found: list[str] = []
        for n, preset in enumerate(self._presets):
            others = [p.name for i, p in enumerate(self._presets) if i != n]
            why = name_problem(preset.name, others)
            found += [f"Preset {n + 1}: {why}"] if why else []
            found += [f"{preset.name}: {p}" for p in preset_problems(preset, self._settings)]
        return found

    def presets(self) -> list[Preset]:
        self._keep_shown()
        return list(self._presets)

    def accept(self) -> None:
        problems = self.problems()
        if problems:
            self.error.setText("\n".join(problems))
            self.error.show()
            return
        super().accept()
