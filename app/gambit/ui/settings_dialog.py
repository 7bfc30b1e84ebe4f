"""The settings dialog: every :class:`~gambit.storage.settings.Settings` field, on four tabs.

The dialog edits a copy: :meth:`SettingsDialog.settings` builds a new ``Settings``
from the widgets, and OK only closes the dialog once ``Settings.validate()`` finds
no problem. Problems are listed inline, above the buttons, so the user can fix
them without losing what they typed.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.limits import THREADS_MAX
from gambit.engine.session import TREE_DRAFTERS, TREE_NODES_MAX, TREE_NODES_MIN, DrafterKind
from gambit.formats.mtp import MtpAvailability, mtp_availability, without_heads
from gambit.models.default_model import DEFAULT_MODEL_FILE, DEFAULT_MODEL_NAME, bundled_model_path
from gambit.models.settings_check import model_file_problems
from gambit.storage.paths import models_dir
from gambit.storage.settings import (
    CONTEXT_MAX,
    CONTEXT_MIN,
    GAMMA_MAX_LIMIT,
    LABELS,
    MAX_TOKENS_LIMIT,
    PolicyChoice,
    Settings,
)
from gambit.ui import theme

NO_GPU_TOOLTIP = "This llama.cpp build has no GPU backend"
EXACT_KERNELS_HELP = (
    "Same tokens with speculation on and off at temperature 0; about 8 % slower decoding"
)
LAYERSKIP_HELP = (
    "The target drafts for itself with some of its blocks skipped. The first load measures"
    " which blocks to skip (about a minute); on very small models it rarely pays, and the"
    " controller then switches it off."
)
TREE_HELP = (
    "Drafts several candidate continuations and verifies them all in one target batch."
    " Wins when batches are cheap (a GPU); on a CPU the controller measures the cost and"
    " may keep the tree narrow."
)
TREE_NEEDS_DRAFTER = "Trees need a drafter: prompt lookup, a draft model or self-speculation."
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
MTP_CHECK_DELAY_MS = 250  # after the last edit of the target path
MIN_WIDTH = 560
_INT_MAX = 2**31 - 1


def _with_help(field: QWidget | QHBoxLayout | QVBoxLayout, help_text: str) -> QWidget:
    """``field`` with a muted help line right under it, as one form-layout field."""
    box = QWidget()
    column = QVBoxLayout(box)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    if isinstance(field, QAbstractButton):
        # At its natural width: a check box only reacts to clicks on its box and text.
        column.addWidget(field, 0, Qt.AlignmentFlag.AlignLeft)
    elif isinstance(field, QWidget):
        column.addWidget(field)
    else:
        column.addLayout(field)
    help_label = theme.muted_label(help_text, box)
    help_label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
    column.addWidget(help_label)
    column.addStretch(1)  # spare height goes below the help, not between the two
    return box


def _with_error(row: QHBoxLayout, error: QLabel) -> QVBoxLayout:
    """A file row with its error line (hidden until there is one) under it."""
    column = QVBoxLayout()
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    column.addLayout(row)
    column.addWidget(error)
    return column


def _group(title: str, form: QFormLayout) -> QGroupBox:
    group = QGroupBox(title)
    group.setLayout(form)
    return group


def _page(*groups: QGroupBox) -> QWidget:
    """Group boxes stacked at the top of a tab, their form labels in one column."""
    labels: list[QWidget] = []
    for group in groups:
        form = group.layout()
        if isinstance(form, QFormLayout):
            for row in range(form.rowCount()):
                item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                widget = item.widget() if item is not None else None
                if widget is not None:
                    labels.append(widget)
    width = max((label.sizeHint().width() for label in labels), default=0)
    for label in labels:
        label.setMinimumWidth(width)
        if isinstance(label, QLabel):  # the text must stay right-aligned in the wider label
            vertical = label.alignment() & Qt.AlignmentFlag.AlignVertical_Mask
            label.setAlignment(Qt.AlignmentFlag.AlignRight | vertical)

    page = QWidget()
    column = QVBoxLayout(page)
    column.setContentsMargins(12, 12, 12, 12)
    column.setSpacing(12)
    for group in groups:
        column.addWidget(group)
    column.addStretch(1)
    return page


def _spin(name: str, low: int, high: int, *, step: int = 1, special: str = "") -> QSpinBox:
    spin = QSpinBox()
    spin.setObjectName(name)
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setSpecialValueText(special)
    spin.setAccelerated(True)
    spin.setMinimumWidth(120)
    return spin


def _double(
    name: str, low: float, high: float, step: float, *, decimals: int = 2, special: str = ""
) -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setObjectName(name)
    spin.setDecimals(decimals)
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setSpecialValueText(special)
    spin.setMinimumWidth(120)
    return spin


def _left(widget: QWidget) -> QHBoxLayout:
    """Keep a compact widget (a spin box) at its natural width, left-aligned."""
    row = QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(widget)
    row.addStretch(1)
    return row


class _PowerOfTwoSpin(QSpinBox):
    """A spin box whose arrows double and halve (context sizes); typing stays free."""

    def stepBy(self, steps: int) -> None:  # noqa: N802 - Qt override
        value = self.value()
        for _ in range(abs(steps)):
            value = value * 2 if steps > 0 else value // 2
        self.setValue(max(self.minimum(), min(self.maximum(), value)))


class _PageScroll(QScrollArea):
    """A tab page that scrolls when the dialog is too short for it, instead of
    squeezing its wrapped help texts (which would cut them mid-sentence)."""

    def __init__(self, page: QWidget) -> None:
        super().__init__()
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(page)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """The whole page (QScrollArea's own hint caps it at a few dozen lines)."""
        page = self.widget()
        hint = page.sizeHint() if page is not None else super().sizeHint()
        bar = self.verticalScrollBar().sizeHint().width()
        return QSize(hint.width() + bar, hint.height())


def _label(name: str) -> str:
    """The form label of a setting: the same name its validation messages use."""
    return LABELS[name] + ":"


class SettingsDialog(QDialog):
    """Edit a :class:`Settings`; :meth:`settings` returns the edited values."""

    def __init__(
        self, settings: Settings, parent: QWidget | None = None, gpu_offload: bool = False
    ) -> None:
        super().__init__(parent)
        self._base = settings
        self._gpu_offload = gpu_offload
        self._errors: list[str] = []
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self.setMinimumWidth(MIN_WIDTH)
        self.setSizeGripEnabled(True)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("settingsTabs")
        self.tabs.setDocumentMode(False)
        self.tabs.addTab(_PageScroll(self._models_page()), "Models")
        self.tabs.addTab(_PageScroll(self._speculation_page()), "Speculation")
        self.tabs.addTab(_PageScroll(self._sampling_page()), "Sampling")
        self.tabs.addTab(self._chat_page(), "Chat")  # its text box grows and scrolls itself

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

        self._load(settings)

    # -- pages ---------------------------------------------------------------------------

    def _field_error(self, name: str) -> QLabel:
        """A red, wrapped line under a field, for the reason its value is refused."""
        label = QLabel()
        label.setObjectName(name)
        label.setWordWrap(True)
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        palette = label.palette()
        palette.setColor(QPalette.ColorRole.WindowText, theme.pick(theme.BAD, palette))
        label.setPalette(palette)
        label.hide()
        return label

    def _file_row(
        self, edit: QLineEdit, button_name: str, caption: str
    ) -> tuple[QHBoxLayout, QPushButton]:
        browse = QPushButton("Browse…")
        browse.setObjectName(button_name)
        browse.setAutoDefault(False)
        browse.clicked.connect(lambda: self._browse(edit, caption))
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(6)
        row.addWidget(edit, 1)
        row.addWidget(browse)
        return row, browse

    def _models_page(self) -> QWidget:
        self.target_model_edit = QLineEdit()
        self.target_model_edit.setObjectName("targetModelEdit")
        self.target_model_edit.setPlaceholderText(f"Embedded {DEFAULT_MODEL_NAME}")
        self.target_model_edit.setClearButtonEnabled(True)
        target_row, self.target_browse = self._file_row(
            self.target_model_edit, "targetModelBrowse", "Choose the target model"
        )

        self.drafter_none_radio = QRadioButton("None")
        self.drafter_none_radio.setObjectName("drafterNoneRadio")
        self.drafter_lookup_radio = QRadioButton("Prompt lookup")
        self.drafter_lookup_radio.setObjectName("drafterLookupRadio")
        self.drafter_draft_radio = QRadioButton("Draft model")
        self.drafter_draft_radio.setObjectName("drafterDraftRadio")
        self.drafter_layerskip_radio = QRadioButton("Self-speculation (skip layers)")
        self.drafter_layerskip_radio.setObjectName("drafterLayerskipRadio")
        # Never selectable in this build: the help line under it says why, for this target.
        self.drafter_mtp_radio = QRadioButton("Multi-token prediction heads")
        self.drafter_mtp_radio.setObjectName("drafterMtpRadio")
        self.drafter_mtp_radio.setEnabled(False)
        self.drafter_group = QButtonGroup(self)
        drafters = QVBoxLayout()
        drafters.setContentsMargins(0, 0, 0, 0)
        drafters.setSpacing(2)
        self.drafter_help: dict[str, QLabel] = {}
        for key, radio, help_text in (
            ("none", self.drafter_none_radio, "The target model writes every token on its own."),
            (
                "lookup",
                self.drafter_lookup_radio,
                "Copies ahead from the conversation: free, strong on rewriting and code edits.",
            ),
            (
                "draft",
                self.drafter_draft_radio,
                "A smaller model with the same tokenizer guesses ahead.",
            ),
            ("layerskip", self.drafter_layerskip_radio, LAYERSKIP_HELP),
            ("mtp", self.drafter_mtp_radio, ""),
        ):
            self.drafter_group.addButton(radio)
            drafters.addWidget(radio, 0, Qt.AlignmentFlag.AlignLeft)
            help_label = theme.muted_label(help_text)
            help_label.setObjectName(f"drafterHelp_{key}")
            help_label.setContentsMargins(22, 0, 0, 4)
            drafters.addWidget(help_label)
            self.drafter_help[key] = help_label
        self.drafter_group.buttonToggled.connect(self._update_enabled)
        self._mtp: MtpAvailability | None = None
        self._mtp_timer = QTimer(self)
        self._mtp_timer.setSingleShot(True)
        self._mtp_timer.setInterval(MTP_CHECK_DELAY_MS)
        self._mtp_timer.timeout.connect(self.update_mtp)
        self.target_model_edit.textChanged.connect(self._mtp_timer.start)

        self.draft_model_edit = QLineEdit()
        self.draft_model_edit.setObjectName("draftModelEdit")
        self.draft_model_edit.setPlaceholderText("A .gguf file with the target's tokenizer")
        self.draft_model_edit.setClearButtonEnabled(True)
        draft_row, self.draft_browse = self._file_row(
            self.draft_model_edit, "draftModelBrowse", "Choose the draft model"
        )

        self.field_errors = {
            name: self._field_error(f"{key}Error")
            for name, key in (("target_model", "targetModel"), ("draft_model", "draftModel"))
        }
        models = theme.form_layout()
        models.addRow(
            _label("target_model"), _with_error(target_row, self.field_errors["target_model"])
        )
        drafter_label = QLabel(_label("drafter"))
        drafter_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        models.addRow(drafter_label, drafters)
        models.addRow(
            _label("draft_model"), _with_error(draft_row, self.field_errors["draft_model"])
        )

        self.context_size_spin = _PowerOfTwoSpin()
        self.context_size_spin.setObjectName("contextSizeSpin")
        self.context_size_spin.setRange(CONTEXT_MIN, CONTEXT_MAX)
        self.context_size_spin.setMinimumWidth(120)
        self.context_size_spin.setSuffix(" tokens")
        self.threads_spin = _spin("threadsSpin", 0, THREADS_MAX, special="Automatic")
        self.gpu_layers_target_spin = _spin("gpuLayersTargetSpin", -1, 9999, special="All")
        self.gpu_layers_draft_spin = _spin("gpuLayersDraftSpin", -1, 9999, special="All")

        runtime = theme.form_layout()
        runtime.addRow(
            _label("context_size"),
            _with_help(
                _left(self.context_size_spin), "Longest conversation the model keeps in view."
            ),
        )
        runtime.addRow(_label("threads"), _left(self.threads_spin))
        gpu_target_label = QLabel(_label("gpu_layers_target"))
        self._gpu_draft_label = gpu_draft_label = QLabel(_label("gpu_layers_draft"))
        runtime.addRow(gpu_target_label, _left(self.gpu_layers_target_spin))
        runtime.addRow(
            gpu_draft_label,
            _with_help(
                _left(self.gpu_layers_draft_spin),
                "Layers offloaded to the GPU; 0 runs on the CPU only."
                if self._gpu_offload
                else NO_GPU_TOOLTIP + ": everything runs on the CPU.",
            ),
        )
        for widget in (
            self.gpu_layers_target_spin,
            self.gpu_layers_draft_spin,
            gpu_target_label,
            gpu_draft_label,
        ):
            widget.setEnabled(self._gpu_offload)
            if not self._gpu_offload:
                widget.setToolTip(NO_GPU_TOOLTIP)

        return _page(_group("Model files", models), _group("Runtime", runtime))

    def _speculation_page(self) -> QWidget:
        self.speculation_check = QCheckBox("Use speculative decoding")
        self.speculation_check.setObjectName("speculationCheck")
        self.speculation_check.toggled.connect(self._update_enabled)

        self.policy_adaptive_radio = QRadioButton("Adaptive")
        self.policy_adaptive_radio.setObjectName("policyAdaptiveRadio")
        self.policy_fixed_radio = QRadioButton("Fixed")
        self.policy_fixed_radio.setObjectName("policyFixedRadio")
        self.policy_group = QButtonGroup(self)
        self.policy_group.addButton(self.policy_adaptive_radio)
        self.policy_group.addButton(self.policy_fixed_radio)
        self.policy_group.buttonToggled.connect(self._update_enabled)
        policies = QHBoxLayout()
        policies.setContentsMargins(0, 0, 0, 0)
        policies.setSpacing(16)
        policies.addWidget(self.policy_adaptive_radio)
        policies.addWidget(self.policy_fixed_radio)
        policies.addStretch(1)

        self.fixed_gamma_spin = _spin("fixedGammaSpin", 1, GAMMA_MAX_LIMIT)
        self.fixed_gamma_spin.setSuffix(" tokens")
        self.gamma_max_spin = _spin("gammaMaxSpin", 1, GAMMA_MAX_LIMIT)
        self.gamma_max_spin.setSuffix(" tokens")

        self.tree_drafts_check = QCheckBox("Draft a token tree")
        self.tree_drafts_check.setObjectName("treeDraftsCheck")
        self.tree_drafts_check.toggled.connect(self._update_enabled)
        self.tree_nodes_spin = _spin("treeNodesSpin", TREE_NODES_MIN, TREE_NODES_MAX)
        self.tree_nodes_spin.setSuffix(" tokens")
        self._tree_nodes_label = QLabel(_label("tree_nodes"))

        self.exact_kernels_check = QCheckBox("Exact kernels")
        self.exact_kernels_check.setObjectName("exactKernelsCheck")
        self.highlight_drafted_check = QCheckBox("Highlight drafted tokens")
        self.highlight_drafted_check.setObjectName("highlightDraftedCheck")
        self.show_stats_check = QCheckBox("Show statistics")
        self.show_stats_check.setObjectName("showStatsCheck")

        speculation = theme.form_layout()
        speculation.addRow(
            _label("speculation"),
            _with_help(
                self.speculation_check,
                "A drafter proposes tokens and the target checks them in one pass;"
                " the output is the target's either way.",
            ),
        )
        speculation.addRow(
            _label("policy"),
            _with_help(
                policies,
                "Adaptive drafts longer while guesses are accepted and shorter when they"
                " are not; Fixed always drafts γ tokens.",
            ),
        )
        speculation.addRow(_label("fixed_gamma"), _left(self.fixed_gamma_spin))
        speculation.addRow(
            _label("gamma_max"),
            _with_help(
                _left(self.gamma_max_spin),
                "The longest draft: the adaptive policy's ceiling and the limit for fixed γ.",
            ),
        )
        speculation.addRow(_label("tree_drafts"), _with_help(self.tree_drafts_check, TREE_HELP))
        speculation.addRow(
            self._tree_nodes_label,
            _with_help(
                _left(self.tree_nodes_spin),
                "The most draft tokens in one tree round; the target checks them, plus one,"
                " in a single batch.",
            ),
        )

        display = QVBoxLayout()
        display.setContentsMargins(0, 0, 0, 0)
        display.setSpacing(8)
        display.addWidget(
            _with_help(
                self.highlight_drafted_check,
                "Tints the tokens the target accepted from the drafter.",
            )
        )
        display.addWidget(
            _with_help(self.show_stats_check, "Speed and acceptance rate under the chat.")
        )
        display_label = QLabel("Display:")
        display_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)

        output = theme.form_layout()
        output.addRow("Determinism:", _with_help(self.exact_kernels_check, EXACT_KERNELS_HELP))
        output.addRow(display_label, display)
        return _page(_group("Speculative decoding", speculation), _group("Output", output))

    def _sampling_page(self) -> QWidget:
        self.temperature_spin = _double("temperatureSpin", 0.0, 5.0, 0.05, special="0 (greedy)")
        self.top_k_spin = _spin("topKSpin", 0, 100_000, special="Off")
        self.top_p_spin = _double("topPSpin", 0.01, 1.0, 0.05)
        self.min_p_spin = _double("minPSpin", 0.0, 0.99, 0.01, special="Off")
        self.repeat_penalty_spin = _double("repeatPenaltySpin", 0.05, 5.0, 0.05)
        self.seed_spin = _spin("seedSpin", -1, _INT_MAX, special="Random")
        self.max_tokens_spin = _spin("maxTokensSpin", 1, MAX_TOKENS_LIMIT, step=64)
        self.max_tokens_spin.setSuffix(" tokens")

        sampling = theme.form_layout()
        sampling.addRow(
            _label("temperature"),
            _with_help(
                _left(self.temperature_spin),
                "Higher is more varied; 0 always takes the most likely token.",
            ),
        )
        sampling.addRow(_label("top_k"), _left(self.top_k_spin))
        sampling.addRow(
            _label("top_p"),
            _with_help(
                _left(self.top_p_spin), "Keeps the likeliest tokens up to this share; 1 is off."
            ),
        )
        sampling.addRow(
            _label("min_p"),
            _with_help(
                _left(self.min_p_spin),
                "Drops tokens less likely than this fraction of the top token.",
            ),
        )
        sampling.addRow(
            _label("repeat_penalty"),
            _with_help(_left(self.repeat_penalty_spin), "1 is off; higher discourages repeats."),
        )

        reply = theme.form_layout()
        reply.addRow(
            _label("seed"),
            _with_help(_left(self.seed_spin), "Fix it to get the same reply for the same prompt."),
        )
        reply.addRow(
            _label("max_tokens"), _with_help(_left(self.max_tokens_spin), "Longest reply.")
        )
        return _page(_group("Token choice", sampling), _group("Reply", reply))

    def _chat_page(self) -> QWidget:
        self.system_prompt_edit = QPlainTextEdit()
        self.system_prompt_edit.setObjectName("systemPromptEdit")
        self.system_prompt_edit.setPlaceholderText(
            "For example: You are a concise assistant. Answer in plain English."
        )
        self.system_prompt_edit.setTabChangesFocus(True)
        self.system_prompt_edit.setMinimumHeight(140)

        chat = QVBoxLayout()
        chat.setSpacing(4)
        chat.addWidget(self.system_prompt_edit, 1)
        chat.addWidget(
            theme.muted_label(
                "Sent before every conversation to set the assistant's role and tone."
                " Leave empty to use the model's own default."
            )
        )
        group = QGroupBox(LABELS["system_prompt"])
        group.setLayout(chat)
        page = QWidget()
        column = QVBoxLayout(page)
        column.setContentsMargins(12, 12, 12, 12)
        column.addWidget(group, 1)
        return page

    # -- values ---------------------------------------------------------------------------

    def _load(self, s: Settings) -> None:
        """Show ``s`` in the widgets."""
        self.target_model_edit.setText(s.target_model)
        self._drafter_radios()[s.drafter].setChecked(True)
        self.draft_model_edit.setText(s.draft_model)
        self.context_size_spin.setValue(s.context_size)
        self.threads_spin.setValue(s.threads)
        self.gpu_layers_target_spin.setValue(s.gpu_layers_target)
        self.gpu_layers_draft_spin.setValue(s.gpu_layers_draft)

        self.speculation_check.setChecked(s.speculation)
        {"adaptive": self.policy_adaptive_radio, "fixed": self.policy_fixed_radio}[
            s.policy
        ].setChecked(True)
        self.fixed_gamma_spin.setValue(s.fixed_gamma)
        self.gamma_max_spin.setValue(s.gamma_max)
        self.tree_drafts_check.setChecked(s.tree_drafts)
        self.tree_nodes_spin.setValue(s.tree_nodes)
        self.exact_kernels_check.setChecked(s.exact_kernels)
        self.highlight_drafted_check.setChecked(s.highlight_drafted)
        self.show_stats_check.setChecked(s.show_stats)

        self.temperature_spin.setValue(s.temperature)
        self.top_k_spin.setValue(s.top_k)
        self.top_p_spin.setValue(s.top_p)
        self.min_p_spin.setValue(s.min_p)
        self.repeat_penalty_spin.setValue(s.repeat_penalty)
        self.seed_spin.setValue(s.seed)
        self.max_tokens_spin.setValue(s.max_tokens)

        self.system_prompt_edit.setPlainText(s.system_prompt)
        self._update_enabled()
        self.update_mtp()

    def _drafter_radios(self) -> dict[DrafterKind, QRadioButton]:
        return {
            "none": self.drafter_none_radio,
            "lookup": self.drafter_lookup_radio,
            "draft": self.drafter_draft_radio,
            "layerskip": self.drafter_layerskip_radio,
        }

    def _drafter(self) -> DrafterKind:
        for kind, radio in self._drafter_radios().items():
            if radio.isChecked():
                return kind
        return "none"

    def _policy(self) -> PolicyChoice:
        return "fixed" if self.policy_fixed_radio.isChecked() else "adaptive"

    def settings(self) -> Settings:
        """The settings as edited so far (not necessarily valid: see ``validate()``)."""
        return self._base.with_(
            target_model=self.target_model_edit.text().strip(),
            drafter=self._drafter(),
            draft_model=self.draft_model_edit.text().strip(),
            context_size=self.context_size_spin.value(),
            threads=self.threads_spin.value(),
            gpu_layers_target=self.gpu_layers_target_spin.value(),
            gpu_layers_draft=self.gpu_layers_draft_spin.value(),
            speculation=self.speculation_check.isChecked(),
            policy=self._policy(),
            fixed_gamma=self.fixed_gamma_spin.value(),
            gamma_max=self.gamma_max_spin.value(),
            tree_drafts=self.tree_drafts_check.isChecked(),
            tree_nodes=self.tree_nodes_spin.value(),
            exact_kernels=self.exact_kernels_check.isChecked(),
            highlight_drafted=self.highlight_drafted_check.isChecked(),
            show_stats=self.show_stats_check.isChecked(),
            temperature=self.temperature_spin.value(),
            top_k=self.top_k_spin.value(),
            top_p=self.top_p_spin.value(),
            min_p=self.min_p_spin.value(),
            repeat_penalty=self.repeat_penalty_spin.value(),
            seed=self.seed_spin.value(),
            max_tokens=self.max_tokens_spin.value(),
            system_prompt=self.system_prompt_edit.toPlainText(),
        )

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
        """The widget that edits each setting, by field name."""
        return {
            "target_model": self.target_model_edit,
            "drafter": self.drafter_none_radio,
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
            "temperature": self.temperature_spin,
            "top_k": self.top_k_spin,
            "top_p": self.top_p_spin,
            "min_p": self.min_p_spin,
            "repeat_penalty": self.repeat_penalty_spin,
            "seed": self.seed_spin,
            "max_tokens": self.max_tokens_spin,
            "system_prompt": self.system_prompt_edit,
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

    @Slot(QAbstractButton)
    def _on_button(self, button: QAbstractButton) -> None:
        role = self.buttons.buttonRole(button)
        if role == QDialogButtonBox.ButtonRole.ResetRole:
            self.restore_defaults()

    def restore_defaults(self) -> None:
        """Show the default settings in every widget (nothing is saved until OK)."""
        self._load(Settings())
        self._show_errors([])

    def _update_enabled(self) -> None:
        drafter = self._drafter()
        draft = drafter == "draft"
        self.draft_model_edit.setEnabled(draft)
        self.draft_browse.setEnabled(draft)
        # a layer-skip draft is a second (slimmer) copy of the target: it can be offloaded too
        gpu_draft_useful = self._gpu_offload and drafter in ("draft", "layerskip")
        self.gpu_layers_draft_spin.setEnabled(gpu_draft_useful)
        self._gpu_draft_label.setEnabled(gpu_draft_useful)

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
            default = _default_model_file()
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


def _default_model_file() -> Path | None:
    """The embedded default model's file, if it is on disk (it is fetched on first start)."""
    bundled = bundled_model_path()
    if bundled is not None:
        return bundled
    candidate = models_dir() / DEFAULT_MODEL_FILE
    return candidate if candidate.is_file() else None
