"""Deriving a draft: the quantizations worth offering for the selected model,
what each may gain, and why the others are not offered."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from gambit.engine.machine.threads import default_threads
from gambit.engine.session import most_draft_tokens
from gambit.models.derive_advice import CostCurve, DeriveAdvice, cached_curve
from gambit.storage import paths
from gambit.storage.settings import Settings
from gambit.ui import theme
from gambit.ui.models_dialog.widgets import button

NOTHING_CHEAPER = (
    "No quantization is meaningfully cheaper than this model, so none is offered: "
    "import a smaller model of the same family, or use prompt lookup. "
)


def settings_curve(target: Path, settings: Settings) -> CostCurve | None:
    """The target's verification cost if a kernel probe measured it here, with
    the threads, GPU layers, batch sizes and kernels these settings load it with."""
    s = settings
    nodes = most_draft_tokens(gamma_max=s.gamma_max, tree_nodes=s.tree_nodes, tree=s.tree_drafts)
    return cached_curve(
        target,
        n_threads=s.threads or default_threads(),
        n_gpu_layers=s.gpu_layers_target,
        k_max=nodes + 1,
        exact=s.exact_kernels,
        cache_dir=paths.cache_dir(),
    )


class DerivePanel(QGroupBox):
    """ "Derive a draft…" opens the choice of quantization; "Derive" asks for it
    (``derive_requested`` with the ftype). ``toggle_requested``: the button
    was pressed (the dialog opens the panel with advice, or closes it)."""

    derive_requested = Signal(str)
    toggle_requested = Signal()

    def __init__(self) -> None:
        super().__init__("Derive a draft")
        self.advice: DeriveAdvice | None = None
        self.derive_button = button("Derive a draft…", "deriveButton")
        self.derive_button.setToolTip(
            "Re-quantize this model to fewer bits with llama.cpp's quantizer"
        )
        self.derive_button.clicked.connect(lambda: self.toggle_requested.emit())
        self.combo = QComboBox()
        self.combo.setObjectName("deriveQuantCombo")
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.start_button = button("Derive", "deriveStartButton")
        self.start_button.clicked.connect(self._on_start)
        self.panel = QWidget()
        self.panel.setObjectName("derivePanel")
        panel_row = QHBoxLayout(self.panel)
        panel_row.setContentsMargins(0, 0, 0, 0)
        panel_row.setSpacing(6)
        panel_row.addWidget(QLabel("Quantization:"))
        panel_row.addWidget(self.combo)
        panel_row.addWidget(self.start_button)
        panel_row.addStretch(1)
        self.combo.currentIndexChanged.connect(self._show_estimate)
        # What the chosen quantization may gain, and why others are not offered.
        self.estimate_label = theme.muted_label()
        self.estimate_label.setObjectName("deriveEstimateLabel")
        self.missing_label = theme.muted_label()
        self.missing_label.setObjectName("deriveMissingLabel")
        self.panel.hide()
        derive_row = QHBoxLayout()
        derive_row.addWidget(self.derive_button)
        derive_row.addStretch(1)
        derive = QVBoxLayout()
        derive.setSpacing(6)
        derive.addWidget(
            theme.muted_label(
                "A copy of this model with fewer bits per weight: the very same tokenizer, "
                "so it always pairs. Only quantizations that read clearly fewer bytes per "
                "token than this model are offered, with what they may gain. Written to "
                "Gambit's models folder and registered as this model's draft."
            )
        )
        derive.addLayout(derive_row)
        derive.addWidget(self.panel)
        derive.addWidget(self.estimate_label)
        derive.addWidget(self.missing_label)
        self.setLayout(derive)

    @property
    def is_open(self) -> bool:
        return self.panel.isVisible() or self.missing_label.isVisible()

    def open_with(self, advice: DeriveAdvice) -> None:
        """Offer ``advice``'s quantizations and say why the others are not offered."""
        self.advice = advice
        self.combo.blockSignals(True)
        self.combo.clear()
        for option in advice.offered:
            self.combo.addItem(option.label(), option.ftype)
        self.combo.blockSignals(False)
        missing = advice.missing()
        if not advice.offered:
            missing = NOTHING_CHEAPER + missing
        self.missing_label.setText(missing)
        self.missing_label.setVisible(bool(missing))
        self.panel.setVisible(bool(advice.offered))
        self._show_estimate()

    def close_panel(self) -> None:
        for widget in (self.panel, self.estimate_label, self.missing_label):
            widget.hide()

    def _show_estimate(self) -> None:
        advice = self.advice
        option = advice.option(self.combo.currentData()) if advice else None
        text = ""
        if option and advice:
            text = f"{option.estimate()} {advice.curve.source} {advice.small_model()}"
        self.estimate_label.setText(text)
        self.estimate_label.setVisible(bool(text))

    def _on_start(self) -> None:
        ftype = self.combo.currentData()
        if isinstance(ftype, str):
            self.derive_requested.emit(ftype)
