"""The settings dialog, driven through its real widgets (offscreen Qt, no mocks)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QRadioButton,
    QSpinBox,
    QTabWidget,
    QWidget,
)
from pytestqt.qtbot import QtBot

from gambit.storage.settings import Settings
from gambit.ui.settings_dialog import NO_GPU_TOOLTIP, SettingsDialog

MakeDialog = Callable[..., SettingsDialog]


@pytest.fixture
def make_dialog(qtbot: QtBot) -> MakeDialog:
    def make(settings: Settings | None = None, gpu_offload: bool = False) -> SettingsDialog:
        dialog = SettingsDialog(settings if settings is not None else Settings(), None, gpu_offload)
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitExposed(dialog)
        return dialog

    return make


def _model_file(folder: Path, name: str) -> Path:
    """A file that passes ``Settings.validate()``, which checks that the path is a file."""
    path = folder / name
    path.write_bytes(b"GGUF" + b"\0" * 60)
    return path


def _non_default(tmp_path: Path) -> Settings:
    """Every field away from its default."""
    return Settings(
        target_model=str(_model_file(tmp_path, "target.gguf")),
        drafter="draft",
        draft_model=str(_model_file(tmp_path, "draft.gguf")),
        speculation=False,
        policy="fixed",
        fixed_gamma=3,
        gamma_max=12,
        temperature=0.0,
        top_k=0,
        top_p=0.9,
        min_p=0.1,
        repeat_penalty=1.1,
        seed=1234,
        max_tokens=1024,
        system_prompt="You are terse.\nAnswer in one line.",
        threads=3,
        gpu_layers_target=-1,
        gpu_layers_draft=10,
        context_size=8192,
        exact_kernels=False,
        highlight_drafted=False,
        show_stats=False,
    )


def _find(dialog: QWidget, kind: type[QWidget], name: str) -> QWidget:
    widget = dialog.findChild(kind, name)
    assert widget is not None, f"no {kind.__name__} named {name!r}"
    return widget


def _spin(dialog: QWidget, name: str) -> QSpinBox:
    widget = _find(dialog, QSpinBox, name)
    assert isinstance(widget, QSpinBox)
    return widget


def _double(dialog: QWidget, name: str) -> QDoubleSpinBox:
    widget = _find(dialog, QDoubleSpinBox, name)
    assert isinstance(widget, QDoubleSpinBox)
    return widget


def _radio(dialog: QWidget, name: str) -> QRadioButton:
    widget = _find(dialog, QRadioButton, name)
    assert isinstance(widget, QRadioButton)
    return widget


def _edit(dialog: QWidget, name: str) -> QLineEdit:
    widget = _find(dialog, QLineEdit, name)
    assert isinstance(widget, QLineEdit)
    return widget


def _check(dialog: QWidget, name: str) -> QCheckBox:
    widget = _find(dialog, QCheckBox, name)
    assert isinstance(widget, QCheckBox)
    return widget


def _error_label(dialog: QWidget) -> QLabel:
    widget = _find(dialog, QLabel, "errorLabel")
    assert isinstance(widget, QLabel)
    return widget


def _button(dialog: QWidget, which: QDialogButtonBox.StandardButton) -> QAbstractButton:
    box = dialog.findChild(QDialogButtonBox)
    assert isinstance(box, QDialogButtonBox)
    button = box.button(which)
    assert button is not None
    return button


def _click(qtbot: QtBot, widget: QWidget) -> None:
    """Show the widget's tab first, so the click lands on a visible widget."""
    tabs = widget.window().findChild(QTabWidget)
    assert isinstance(tabs, QTabWidget)
    for index in range(tabs.count()):
        page = tabs.widget(index)
        if page is not None and page.isAncestorOf(widget):
            tabs.setCurrentIndex(index)
    qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)


def _click_ok(qtbot: QtBot, dialog: QDialog) -> None:
    qtbot.mouseClick(_button(dialog, QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)


def test_window_basics(make_dialog: MakeDialog) -> None:
    dialog = make_dialog()
    assert dialog.objectName() == "settingsDialog"
    assert dialog.windowTitle() == "Settings"
    assert dialog.minimumWidth() >= 560
    tabs = dialog.findChild(QTabWidget)
    assert isinstance(tabs, QTabWidget)
    assert [tabs.tabText(i) for i in range(tabs.count())] == [
        "Models",
        "Speculation",
        "Sampling",
        "Chat",
    ]
    assert _edit(dialog, "targetModelEdit").placeholderText() == "Embedded SmolLM2-135M-Instruct"
    assert not _error_label(dialog).isVisible()


def test_round_trip_defaults(make_dialog: MakeDialog) -> None:
    assert make_dialog(Settings()).settings() == Settings()


def test_round_trip_non_default(make_dialog: MakeDialog, tmp_path: Path) -> None:
    settings = _non_default(tmp_path)
    assert all(getattr(settings, f.name) != f.default for f in dataclasses.fields(Settings)), (
        "the fixture should move every field off its default"
    )
    assert make_dialog(settings, gpu_offload=True).settings() == settings


def test_special_values_are_spelled_out(make_dialog: MakeDialog) -> None:
    dialog = make_dialog(
        Settings(temperature=0.0, top_k=0, seed=-1, threads=0, gpu_layers_target=-1),
        gpu_offload=True,
    )
    assert _double(dialog, "temperatureSpin").text() == "0 (greedy)"
    assert _spin(dialog, "topKSpin").text() == "Off"
    assert _spin(dialog, "seedSpin").text() == "Random"
    assert _spin(dialog, "threadsSpin").text() == "Automatic"
    assert _spin(dialog, "gpuLayersTargetSpin").text() == "All"
    temperature = _double(dialog, "temperatureSpin")
    assert (temperature.minimum(), temperature.maximum()) == (0.0, 5.0)
    assert temperature.singleStep() == pytest.approx(0.05)


def test_context_size_arrows_double_and_halve(make_dialog: MakeDialog) -> None:
    spin = _spin(make_dialog(Settings(context_size=4096)), "contextSizeSpin")
    spin.stepBy(1)
    assert spin.value() == 8192
    spin.stepBy(-2)
    assert spin.value() == 2048
    spin.setValue(3000)  # typing any size stays possible
    assert spin.value() == 3000


def test_editing_widgets_changes_settings(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()

    _click(qtbot, _radio(dialog, "drafterNoneRadio"))
    assert dialog.settings().drafter == "none"

    _click(qtbot, _radio(dialog, "policyFixedRadio"))
    fixed_gamma = _spin(dialog, "fixedGammaSpin")
    assert fixed_gamma.isEnabled()
    fixed_gamma.setValue(6)

    temperature = _double(dialog, "temperatureSpin")
    temperature.setValue(0.0)
    _spin(dialog, "seedSpin").setValue(42)

    prompt = _find(dialog, QPlainTextEdit, "systemPromptEdit")
    _click(qtbot, prompt)
    qtbot.keyClicks(prompt, "Be brief.")

    _click(qtbot, _check(dialog, "highlightDraftedCheck"))

    assert dialog.settings() == Settings().with_(
        drafter="none",
        policy="fixed",
        fixed_gamma=6,
        temperature=0.0,
        seed=42,
        system_prompt="Be brief.",
        highlight_drafted=False,
    )


def test_fixed_gamma_follows_policy_and_speculation(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()
    fixed_gamma = _spin(dialog, "fixedGammaSpin")
    assert not fixed_gamma.isEnabled()  # adaptive by default
    _click(qtbot, _radio(dialog, "policyFixedRadio"))
    assert fixed_gamma.isEnabled()
    _click(qtbot, _check(dialog, "speculationCheck"))
    assert dialog.settings().speculation is False
    assert not fixed_gamma.isEnabled()
    assert not _radio(dialog, "policyAdaptiveRadio").isEnabled()


def test_draft_model_only_for_draft_drafter(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()  # prompt lookup by default
    draft_edit = _edit(dialog, "draftModelEdit")
    browse = _find(dialog, QAbstractButton, "draftModelBrowse")
    assert _radio(dialog, "drafterLookupRadio").isChecked()
    assert not draft_edit.isEnabled()
    assert not browse.isEnabled()

    _click(qtbot, _radio(dialog, "drafterDraftRadio"))
    assert draft_edit.isEnabled()
    assert browse.isEnabled()
    assert dialog.settings().drafter == "draft"

    _click(qtbot, _radio(dialog, "drafterNoneRadio"))
    assert not draft_edit.isEnabled()
    _click(qtbot, _radio(dialog, "drafterLookupRadio"))
    assert not draft_edit.isEnabled()


def test_gpu_layers_disabled_without_gpu_backend(make_dialog: MakeDialog) -> None:
    dialog = make_dialog(Settings(drafter="draft"), gpu_offload=False)
    for name in ("gpuLayersTargetSpin", "gpuLayersDraftSpin"):
        spin = _spin(dialog, name)
        assert not spin.isEnabled()
        assert spin.toolTip() == NO_GPU_TOOLTIP


def test_gpu_layers_enabled_with_gpu_backend(make_dialog: MakeDialog) -> None:
    dialog = make_dialog(Settings(drafter="draft"), gpu_offload=True)
    for name in ("gpuLayersTargetSpin", "gpuLayersDraftSpin"):
        spin = _spin(dialog, name)
        assert spin.isEnabled()
        assert spin.toolTip() == ""


def test_invalid_settings_keep_the_dialog_open(
    make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path
) -> None:
    dialog = make_dialog()
    missing = tmp_path / "missing.gguf"
    target = _edit(dialog, "targetModelEdit")
    target.setText(str(missing))
    _click(qtbot, _radio(dialog, "drafterDraftRadio"))
    assert _edit(dialog, "draftModelEdit").text() == ""

    problems = dialog.settings().validate()
    assert len(problems) >= 2, problems

    _click_ok(qtbot, dialog)

    error_label = _error_label(dialog)
    assert dialog.isVisible()
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert error_label.isVisible()
    assert error_label.wordWrap()
    for problem in problems:
        assert problem in error_label.text()
    assert dialog.errors() == problems

    # Fix both problems: the dialog closes with Accepted.
    target.setText(str(_model_file(tmp_path, "target.gguf")))
    _edit(dialog, "draftModelEdit").setText(str(_model_file(tmp_path, "draft.gguf")))
    _click_ok(qtbot, dialog)

    assert dialog.result() == QDialog.DialogCode.Accepted
    assert not dialog.isVisible()
    assert not error_label.isVisible()
    assert dialog.settings().drafter == "draft"
    assert dialog.settings().target_model == str(tmp_path / "target.gguf")


def test_errors_bring_their_tab_forward(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog(Settings(max_tokens=4096, context_size=4096))
    tabs = dialog.findChild(QTabWidget)
    assert isinstance(tabs, QTabWidget)
    assert tabs.tabText(tabs.currentIndex()) == "Models"
    _click_ok(qtbot, dialog)
    assert dialog.result() != QDialog.DialogCode.Accepted
    assert "Max tokens (4096) must be less than the context size (4096)." in dialog.errors()
    assert tabs.tabText(tabs.currentIndex()) == "Sampling"

    _spin(dialog, "maxTokensSpin").setValue(1024)
    _click_ok(qtbot, dialog)
    assert dialog.result() == QDialog.DialogCode.Accepted


def test_valid_settings_accept(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()
    with qtbot.waitSignal(dialog.accepted, timeout=1000):
        _click_ok(qtbot, dialog)
    assert dialog.result() == QDialog.DialogCode.Accepted


def test_cancel_rejects(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()
    qtbot.mouseClick(
        _button(dialog, QDialogButtonBox.StandardButton.Cancel), Qt.MouseButton.LeftButton
    )
    assert dialog.result() == QDialog.DialogCode.Rejected


def test_restore_defaults(make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path) -> None:
    dialog = make_dialog(_non_default(tmp_path), gpu_offload=True)
    assert dialog.settings() != Settings()
    qtbot.mouseClick(
        _button(dialog, QDialogButtonBox.StandardButton.RestoreDefaults),
        Qt.MouseButton.LeftButton,
    )
    # Every field is back, so the dialog has a widget for each of them.
    assert dialog.settings() == Settings()
    assert _radio(dialog, "drafterLookupRadio").isChecked()
    assert not _edit(dialog, "draftModelEdit").isEnabled()
    assert dialog.isVisible()  # restoring does not close or save


def test_browse_fills_in_the_chosen_file(
    make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path
) -> None:
    model = _model_file(tmp_path, "picked.gguf")
    dialog = make_dialog()
    _click(qtbot, _find(dialog, QAbstractButton, "targetModelBrowse"))

    def file_dialog() -> QFileDialog:
        found = dialog.findChild(QFileDialog, "modelFileDialog")
        assert isinstance(found, QFileDialog)
        assert found.isVisible()
        return found

    qtbot.waitUntil(lambda: file_dialog() is not None, timeout=3000)
    chooser = file_dialog()
    assert "*.gguf" in " ".join(chooser.nameFilters())
    chooser.setDirectory(str(tmp_path))
    chooser.selectFile(str(model))
    chooser.accept()
    qtbot.waitUntil(lambda: _edit(dialog, "targetModelEdit").text() == str(model), timeout=3000)


def test_screenshots(make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path) -> None:
    dialog = make_dialog(Settings(), gpu_offload=False)
    dialog.resize(dialog.sizeHint())
    tabs = dialog.findChild(QTabWidget)
    assert isinstance(tabs, QTabWidget)
    for index in range(tabs.count()):
        tabs.setCurrentIndex(index)
        qtbot.wait(10)
        image = dialog.grab()
        assert not image.isNull()
        assert image.width() >= 560
        name = tabs.tabText(index).lower()
        for folder in (tmp_path, Path("/tmp")):
            assert image.save(str(folder / f"settings_dialog_{name}.png"))
        if index == 0:
            for folder in (tmp_path, Path("/tmp")):
                assert image.save(str(folder / "settings_dialog.png"))

    tabs.setCurrentIndex(0)
    _click(qtbot, _radio(dialog, "drafterDraftRadio"))
    _edit(dialog, "targetModelEdit").setText(str(tmp_path / "missing.gguf"))
    _click_ok(qtbot, dialog)
    assert _error_label(dialog).isVisible()
    image = dialog.grab()
    for folder in (tmp_path, Path("/tmp")):
        assert image.save(str(folder / "settings_dialog_errors.png"))
    assert (tmp_path / "settings_dialog.png").stat().st_size > 0
