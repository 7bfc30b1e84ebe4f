"""The settings dialog's spin boxes, help lines and check-box texts come from the
fields' declarations (``Settings``'s ``Setting`` records), not from numbers of
its own."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QLabel, QSpinBox
from pytestqt.qtbot import QtBot

from gambit.engine.drafters.registry import DRAFTERS
from gambit.storage.settings import SETTINGS, Settings
from gambit.ui.settings.settings_dialog import SettingsDialog


def _dialog(qtbot: QtBot) -> SettingsDialog:
    dialog = SettingsDialog(Settings(), None, True)
    qtbot.addWidget(dialog)
    return dialog


def test_every_setting_has_a_widget_and_round_trips(qtbot: QtBot) -> None:
    """A new field without its widget in ``_field_widgets`` would be lost on OK."""
    dialog = _dialog(qtbot)
    assert set(dialog._field_widgets()) == set(SETTINGS)
    edited = Settings(
        target_model="/m/t.gguf", drafter="draft", draft_model="/m/d.gguf", speculation=False,
        policy="fixed", fixed_gamma=3, gamma_max=6, tree_drafts=True, tree_nodes=5,
        temperature=0.25, top_k=7, top_p=0.5, min_p=0.1, repeat_penalty=1.5, seed=9,
        max_tokens=100, system_prompt="Be brief.", threads=2, gpu_layers_target=-1,
        gpu_layers_draft=3, context_size=2048, exact_kernels=False, highlight_drafted=False,
        show_stats=False, rpc_workers=("127.0.0.1:50052",), worker_layers=4,
        even_streaming=False, server_host="0.0.0.0", server_port=8123, server_api_key="k",
    )  # fmt: skip
    dialog._load(edited)
    assert dialog.settings() == edited


def test_every_spin_box_has_the_declared_range(qtbot: QtBot) -> None:
    dialog = _dialog(qtbot)
    spins = {
        name: widget
        for name, widget in dialog._field_widgets().items()
        if isinstance(widget, QAbstractSpinBox)
    }
    assert set(spins) == {
        "context_size", "threads", "gpu_layers_target", "gpu_layers_draft", "fixed_gamma",
        "gamma_max", "tree_nodes", "temperature", "top_k", "top_p", "min_p",
        "repeat_penalty", "seed", "max_tokens", "worker_layers", "server_port",
    }  # fmt: skip
    for name, widget in spins.items():
        assert isinstance(widget, (QSpinBox, QDoubleSpinBox))
        assert (widget.minimum(), widget.maximum()) == SETTINGS[name].range, name


def test_help_lines_and_drafters_come_from_the_declarations(qtbot: QtBot) -> None:
    dialog = _dialog(qtbot)
    texts = {label.text() for label in dialog.findChildren(QLabel)}
    for name, declared in SETTINGS.items():
        if declared.help:
            assert declared.help in texts, name
    for kind, radio in dialog.drafter_radios.items():
        assert radio.text() == DRAFTERS[kind].label
        assert dialog.drafter_help[kind].text() == DRAFTERS[kind].help
