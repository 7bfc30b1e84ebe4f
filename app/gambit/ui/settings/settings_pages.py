"""The settings dialog's four pages: Models, Speculation, Sampling and Chat.

``SettingsPages`` builds the widgets (one per ``Settings`` field, named as the
tests and ``SettingsDialog`` find them); the dialog itself reads and writes
their values. Labels, ranges and help lines come from the fields' declarations
in ``gambit.storage.settings``; the drafters from the drafter registry.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.drafters.registry import DRAFTERS, DrafterKind
from gambit.formats.mtp import MtpAvailability
from gambit.models.default_model import DEFAULT_MODEL_NAME
from gambit.storage.settings import SETTINGS
from gambit.ui import theme
from gambit.ui.settings.settings_widgets import (
    PowerOfTwoSpin,
    double,
    field_error,
    group,
    help_line,
    label,
    left,
    page,
    spin,
    with_error,
    with_help,
)

NO_GPU_TOOLTIP = "This llama.cpp build has no GPU backend"
MTP_CHECK_DELAY_MS = 250  # after the last edit of the target path


class SettingsPages(QDialog):
    """The pages' widgets; ``SettingsDialog`` adds the values and the behaviour."""

    _gpu_offload: bool

    # Defined by SettingsDialog (the pages connect their widgets to them).
    def _update_enabled(self) -> None:
        raise NotImplementedError

    def update_mtp(self) -> None:
        raise NotImplementedError

    def _forget(self) -> None:
        raise NotImplementedError

    def _browse(self, edit: QLineEdit, caption: str) -> None:
        raise NotImplementedError

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

    # -- Models ---------------------------------------------------------------------------

    def _models_page(self) -> QWidget:
        return page(group("Model files", self._model_files()), group("Runtime", self._runtime()))

    def _model_files(self) -> QFormLayout:
        self.target_model_edit = QLineEdit()
        self.target_model_edit.setObjectName("targetModelEdit")
        self.target_model_edit.setPlaceholderText(f"Embedded {DEFAULT_MODEL_NAME}")
        self.target_model_edit.setClearButtonEnabled(True)
        target_row, self.target_browse = self._file_row(
            self.target_model_edit, "targetModelBrowse", "Choose the target model"
        )
        drafters = self._drafter_choice()
        self._mtp: MtpAvailability | None = None
        self._mtp_timer = QTimer(self)
        self._mtp_timer.setSingleShot(True)
        self._mtp_timer.setInterval(MTP_CHECK_DELAY_MS)
        self._mtp_timer.timeout.connect(self.update_mtp)
        self.target_model_edit.textChanged.connect(self._mtp_timer.start)

        self.draft_model_edit = QLineEdit()
        self.draft_model_edit.setObjectName("draftModelEdit")
        self.draft_model_edit.setPlaceholderText(
            "A much smaller .gguf model (another tokenizer drafts through text)"
        )
        self.draft_model_edit.setClearButtonEnabled(True)
        draft_row, self.draft_browse = self._file_row(
            self.draft_model_edit, "draftModelBrowse", "Choose the draft model"
        )

        self.field_errors = {
            name: field_error(f"{key}Error")
            for name, key in (("target_model", "targetModel"), ("draft_model", "draftModel"))
        }
        models = theme.form_layout()
        models.addRow(
            label("target_model"), with_error(target_row, self.field_errors["target_model"])
        )
        drafter_label = QLabel(label("drafter"))
        drafter_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        models.addRow(drafter_label, drafters)
        models.addRow(label("draft_model"), with_error(draft_row, self.field_errors["draft_model"]))
        return models

    def _drafter_choice(self) -> QVBoxLayout:
        """One radio per drafter kind of the registry, with its help line; then MTP,
        never selectable in this build (its help line says why, for this target)."""
        self.drafter_radios: dict[DrafterKind, QRadioButton] = {}
        for kind in DRAFTERS.values():
            radio = QRadioButton(kind.label)
            radio.setObjectName(f"drafter{kind.kind.capitalize()}Radio")
            self.drafter_radios[kind.kind] = radio
        self.drafter_mtp_radio = QRadioButton("Multi-token prediction heads")
        self.drafter_mtp_radio.setObjectName("drafterMtpRadio")
        self.drafter_mtp_radio.setEnabled(False)
        self.drafter_group = QButtonGroup(self)
        drafters = QVBoxLayout()
        drafters.setContentsMargins(0, 0, 0, 0)
        drafters.setSpacing(2)
        self.drafter_help: dict[str, QLabel] = {}
        entries = [(k, self.drafter_radios[k], DRAFTERS[k].help) for k in DRAFTERS]
        for key, radio, help_text in [*entries, ("mtp", self.drafter_mtp_radio, "")]:
            self.drafter_group.addButton(radio)
            drafters.addWidget(radio, 0, Qt.AlignmentFlag.AlignLeft)
            help_label = theme.muted_label(help_text)
            help_label.setObjectName(f"drafterHelp_{key}")
            help_label.setContentsMargins(22, 0, 0, 4)
            drafters.addWidget(help_label)
            self.drafter_help[key] = help_label
        self.drafter_group.buttonToggled.connect(self._update_enabled)
        return drafters

    def _runtime(self) -> QFormLayout:
        self.context_size_spin = PowerOfTwoSpin()
        self.context_size_spin.setObjectName("contextSizeSpin")
        low, high = SETTINGS["context_size"].range
        self.context_size_spin.setRange(int(low), int(high))
        self.context_size_spin.setMinimumWidth(120)
        self.context_size_spin.setSuffix(" tokens")
        self.threads_spin = spin("threadsSpin", "threads", special="Automatic")
        self.gpu_layers_target_spin = spin(
            "gpuLayersTargetSpin", "gpu_layers_target", special="All"
        )
        self.gpu_layers_draft_spin = spin("gpuLayersDraftSpin", "gpu_layers_draft", special="All")

        runtime = theme.form_layout()
        runtime.addRow(
            label("context_size"), help_line(left(self.context_size_spin), "context_size")
        )
        runtime.addRow(label("threads"), help_line(left(self.threads_spin), "threads"))
        gpu_target_label = QLabel(label("gpu_layers_target"))
        self._gpu_draft_label = gpu_draft_label = QLabel(label("gpu_layers_draft"))
        runtime.addRow(gpu_target_label, left(self.gpu_layers_target_spin))
        runtime.addRow(
            gpu_draft_label,
            with_help(
                left(self.gpu_layers_draft_spin),
                SETTINGS["gpu_layers_draft"].help
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
        return runtime

    # -- Speculation ----------------------------------------------------------------------

    def _speculation_page(self) -> QWidget:
        return page(
            group("Speculative decoding", self._speculation()), group("Output", self._output())
        )

    def _policy_choice(self) -> QHBoxLayout:
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
        return policies

    def _speculation(self) -> QFormLayout:
        self.speculation_check = QCheckBox("Use speculative decoding")
        self.speculation_check.setObjectName("speculationCheck")
        self.speculation_check.toggled.connect(self._update_enabled)
        policies = self._policy_choice()
        self.fixed_gamma_spin = spin("fixedGammaSpin", "fixed_gamma")
        self.fixed_gamma_spin.setSuffix(" tokens")
        self.gamma_max_spin = spin("gammaMaxSpin", "gamma_max")
        self.gamma_max_spin.setSuffix(" tokens")
        self.tree_drafts_check = QCheckBox("Draft a token tree")
        self.tree_drafts_check.setObjectName("treeDraftsCheck")
        self.tree_drafts_check.toggled.connect(self._update_enabled)
        self.tree_nodes_spin = spin("treeNodesSpin", "tree_nodes")
        self.tree_nodes_spin.setSuffix(" tokens")
        self._tree_nodes_label = QLabel(label("tree_nodes"))

        speculation = theme.form_layout()
        speculation.addRow(label("speculation"), help_line(self.speculation_check, "speculation"))
        speculation.addRow(label("policy"), help_line(policies, "policy"))
        speculation.addRow(label("fixed_gamma"), left(self.fixed_gamma_spin))
        speculation.addRow(label("gamma_max"), help_line(left(self.gamma_max_spin), "gamma_max"))
        speculation.addRow(label("tree_drafts"), help_line(self.tree_drafts_check, "tree_drafts"))
        speculation.addRow(
            self._tree_nodes_label, help_line(left(self.tree_nodes_spin), "tree_nodes")
        )
        speculation.addRow("Memory:", help_line(self._lookup_memory(), "lookup_memory"))
        return speculation

    def _lookup_memory(self) -> QHBoxLayout:
        self.lookup_memory_check = QCheckBox(SETTINGS["lookup_memory"].label)
        self.lookup_memory_check.setObjectName("lookupMemoryCheck")
        self.forget_memory_button = QPushButton("Forget…")
        self.forget_memory_button.setObjectName("forgetMemoryButton")
        self.forget_memory_button.setToolTip("Delete prompt lookup's index of your chats")
        self.forget_memory_button.clicked.connect(self._forget)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.lookup_memory_check)
        row.addWidget(self.forget_memory_button)
        row.addStretch(1)
        return row

    def _output(self) -> QFormLayout:
        self.exact_kernels_check = QCheckBox(SETTINGS["exact_kernels"].label)
        self.exact_kernels_check.setObjectName("exactKernelsCheck")
        self.highlight_drafted_check = QCheckBox(SETTINGS["highlight_drafted"].label)
        self.highlight_drafted_check.setObjectName("highlightDraftedCheck")
        self.show_stats_check = QCheckBox(SETTINGS["show_stats"].label)
        self.show_stats_check.setObjectName("showStatsCheck")
        self.even_streaming_check = QCheckBox(SETTINGS["even_streaming"].label)
        self.even_streaming_check.setObjectName("evenStreamingCheck")

        display = QVBoxLayout()
        display.setContentsMargins(0, 0, 0, 0)
        display.setSpacing(8)
        display.addWidget(help_line(self.highlight_drafted_check, "highlight_drafted"))
        display.addWidget(help_line(self.show_stats_check, "show_stats"))
        display.addWidget(help_line(self.even_streaming_check, "even_streaming"))
        display_label = QLabel("Display:")
        display_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)

        output = theme.form_layout()
        output.addRow("Determinism:", help_line(self.exact_kernels_check, "exact_kernels"))
        output.addRow(display_label, display)
        return output

    # -- Sampling and Chat ----------------------------------------------------------------

    def _sampling_page(self) -> QWidget:
        self.temperature_spin = double("temperatureSpin", "temperature", 0.05, special="0 (greedy)")
        self.top_k_spin = spin("topKSpin", "top_k", special="Off")
        self.top_p_spin = double("topPSpin", "top_p", 0.05)
        self.min_p_spin = double("minPSpin", "min_p", 0.01, special="Off")
        self.repeat_penalty_spin = double("repeatPenaltySpin", "repeat_penalty", 0.05)
        self.seed_spin = spin("seedSpin", "seed", special="Random")
        self.max_tokens_spin = spin("maxTokensSpin", "max_tokens", step=64)
        self.max_tokens_spin.setSuffix(" tokens")

        sampling = theme.form_layout()
        sampling.addRow(label("temperature"), help_line(left(self.temperature_spin), "temperature"))
        sampling.addRow(label("top_k"), left(self.top_k_spin))
        sampling.addRow(label("top_p"), help_line(left(self.top_p_spin), "top_p"))
        sampling.addRow(label("min_p"), help_line(left(self.min_p_spin), "min_p"))
        sampling.addRow(
            label("repeat_penalty"),
            help_line(left(self.repeat_penalty_spin), "repeat_penalty"),
        )
        reply = theme.form_layout()
        reply.addRow(label("seed"), help_line(left(self.seed_spin), "seed"))
        reply.addRow(label("max_tokens"), help_line(left(self.max_tokens_spin), "max_tokens"))
        return page(group("Token choice", sampling), group("Reply", reply))

    def _server_page(self) -> QWidget:
        """The local server's address and key (Tools → Local server starts it)."""
        self.server_host_edit = QLineEdit()
        self.server_host_edit.setObjectName("serverHostEdit")
        self.server_port_spin = spin("serverPortSpin", "server_port", special="Any free port")
        self.server_api_key_edit = QLineEdit()
        self.server_api_key_edit.setObjectName("serverApiKeyEdit")
        self.server_api_key_edit.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        server = theme.form_layout()
        server.addRow(label("server_host"), help_line(self.server_host_edit, "server_host"))
        server.addRow(label("server_port"), left(self.server_port_spin))
        server.addRow(
            label("server_api_key"), help_line(self.server_api_key_edit, "server_api_key")
        )
        return page(group("Local server (Tools → Local server…)", server))

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
        chat.addWidget(theme.muted_label(SETTINGS["system_prompt"].help))
        box = QGroupBox(SETTINGS["system_prompt"].label)
        box.setLayout(chat)
        chat_page = QWidget()
        column = QVBoxLayout(chat_page)
        column.setContentsMargins(12, 12, 12, 12)
        column.addWidget(box, 1)
        return chat_page
