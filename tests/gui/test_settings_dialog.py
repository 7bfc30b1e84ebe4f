"""The settings dialog, driven through its real widgets (offscreen Qt, no mocks)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
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
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QTabWidget,
    QWidget,
)
from pytestqt.qtbot import QtBot

from gambit.formats.mtp import mtp_availability
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.settings.settings_dialog import (
    LAYERSKIP_HELP,
    NO_GPU_TOOLTIP,
    TREE_HELP,
    TREE_NEEDS_DRAFTER,
    SettingsDialog,
)
from gguf_fixtures import write_raw_gguf

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
    """A small, complete GGUF file: it passes ``Settings.validate()`` and the header
    check the dialog runs before it accepts."""
    return write_raw_gguf(folder / name)


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
        tree_drafts=True,
        tree_nodes=12,
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
        rpc_workers=("127.0.0.1:50052", "192.168.1.20:50053"),
        worker_layers=20,
        highlight_drafted=False,
        show_stats=False,
        even_streaming=False,
        lookup_memory=False,
        server_host="0.0.0.0",
        server_port=8123,
        server_api_key="s3cret",
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


def _label(dialog: QWidget, name: str) -> QLabel:
    widget = _find(dialog, QLabel, name)
    assert isinstance(widget, QLabel)
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
        "Workers",
        "Server",
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
    _click(qtbot, _check(dialog, "evenStreamingCheck"))

    assert dialog.settings() == Settings().with_(
        drafter="none",
        policy="fixed",
        fixed_gamma=6,
        temperature=0.0,
        seed=42,
        system_prompt="Be brief.",
        highlight_drafted=False,
        even_streaming=False,
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


DRAFTER_RADIOS = [
    ("drafterNoneRadio", "None"),
    ("drafterLookupRadio", "Prompt lookup"),
    ("drafterDraftRadio", "Draft model"),
    ("drafterLayerskipRadio", "Self-speculation (skip layers)"),
    ("drafterMtpRadio", "Multi-token prediction heads"),
]


def _mtp_header(path: Path, n_heads: int) -> Path:
    """A small GGUF whose header declares ``n_heads`` multi-token-prediction layers."""
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(8)
    writer.add_uint32(gguf.Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch="llama"), n_heads)
    writer.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_drafter_choices_in_order(make_dialog: MakeDialog) -> None:
    dialog = make_dialog()
    radios = [_radio(dialog, name) for name, _ in DRAFTER_RADIOS]
    assert [r.text() for r in radios] == [text for _, text in DRAFTER_RADIOS]
    # one exclusive group, laid out top to bottom in that order
    assert len({id(r.group()) for r in radios}) == 1
    ys = [r.mapTo(dialog, r.rect().topLeft()).y() for r in radios]
    assert ys == sorted(ys)
    assert [r.isEnabled() for r in radios] == [True, True, True, True, False]


def test_mtp_is_offered_but_disabled_with_the_reason(
    make_dialog: MakeDialog, qtbot: QtBot, smol_q4_1: Path
) -> None:
    dialog = make_dialog(Settings(target_model=str(smol_q4_1)))
    mtp = _radio(dialog, "drafterMtpRadio")
    reason = mtp_availability(smol_q4_1).reason
    assert reason.startswith("SmolLM2-135M-Instruct.Q4_1.gguf has no multi-token-prediction heads")
    assert not mtp.isEnabled()
    assert mtp.toolTip() == reason
    assert _label(dialog, "drafterHelp_mtp").text() == reason
    assert dialog.mtp().n_heads == 0

    _click(qtbot, mtp)  # a click on the disabled item changes nothing
    assert not mtp.isChecked()
    assert dialog.settings().drafter == "lookup"


def test_mtp_reason_follows_the_target_model(
    make_dialog: MakeDialog, qtbot: QtBot, smol_q4_1: Path, tmp_path: Path
) -> None:
    dialog = make_dialog(Settings(target_model=str(smol_q4_1)))
    with_heads = _mtp_header(tmp_path / "glm-like.gguf", 1)
    _edit(dialog, "targetModelEdit").setText(str(with_heads))
    help_label = _label(dialog, "drafterHelp_mtp")
    qtbot.waitUntil(lambda: "glm-like.gguf has 1 MTP head" in help_label.text(), timeout=3000)
    assert dialog.mtp().n_heads == 1
    assert help_label.text() == mtp_availability(with_heads).reason
    assert "Gambit has no MTP drafter yet" in help_label.text()
    mtp = _radio(dialog, "drafterMtpRadio")
    assert not mtp.isEnabled()  # heads or not, Gambit cannot draft with them
    assert mtp.toolTip() == help_label.text()

    _edit(dialog, "targetModelEdit").setText(str(tmp_path / "missing.gguf"))
    qtbot.waitUntil(lambda: "missing.gguf could not be read" in help_label.text(), timeout=3000)


def test_mtp_reason_for_the_embedded_default_model(
    make_dialog: MakeDialog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path))  # the default model not fetched yet
    dialog = make_dialog(Settings(target_model=""))
    assert _label(dialog, "drafterHelp_mtp").text() == (
        "SmolLM2-135M-Instruct has no multi-token-prediction heads "
        "(only models trained with them carry them, e.g. GLM-4.5, Qwen3.5, MiMo)."
    )


def test_self_speculation_explains_its_first_load(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()
    help_text = _label(dialog, "drafterHelp_layerskip").text()
    assert help_text == LAYERSKIP_HELP
    assert "a minute or more" in help_text and "rarely pays" in help_text
    _click(qtbot, _radio(dialog, "drafterLayerskipRadio"))
    assert dialog.settings().drafter == "layerskip"
    assert not _edit(dialog, "draftModelEdit").isEnabled()  # no file to choose
    assert dialog.settings().validate() == []


def test_tree_controls_follow_the_drafter(make_dialog: MakeDialog, qtbot: QtBot) -> None:
    dialog = make_dialog()  # prompt lookup, no tree
    tree = _check(dialog, "treeDraftsCheck")
    nodes = _spin(dialog, "treeNodesSpin")
    assert (nodes.minimum(), nodes.maximum(), nodes.value()) == (2, 16, 8)
    assert tree.isEnabled() and not tree.isChecked()
    assert not nodes.isEnabled()  # only with tree drafts on

    _click(qtbot, tree)
    assert tree.isChecked() and nodes.isEnabled()
    nodes.setValue(6)

    _click(qtbot, _radio(dialog, "drafterNoneRadio"))
    assert not tree.isEnabled() and not nodes.isEnabled()
    assert tree.toolTip() == TREE_NEEDS_DRAFTER

    for name in ("drafterDraftRadio", "drafterLayerskipRadio", "drafterLookupRadio"):
        _click(qtbot, _radio(dialog, name))
        assert tree.isEnabled() and nodes.isEnabled(), name
        assert tree.toolTip() == ""

    _click(qtbot, _check(dialog, "speculationCheck"))  # speculation off: nothing to shape
    assert not tree.isEnabled() and not nodes.isEnabled()
    _click(qtbot, _check(dialog, "speculationCheck"))
    assert dialog.settings() == Settings(tree_drafts=True, tree_nodes=6)


def test_lookup_memory_follows_the_drafter_and_forgets_on_request(
    qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    forgotten: list[bool] = []
    dialog = SettingsDialog(Settings(), None, forget_memory=lambda: forgotten.append(True))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    memory = _check(dialog, "lookupMemoryCheck")
    forget = dialog.findChild(QPushButton, "forgetMemoryButton")
    assert isinstance(forget, QPushButton)
    assert memory.isEnabled() and memory.isChecked()  # prompt lookup copies: on by default
    for name, copies in [
        ("drafterDraftRadio", False),
        ("drafterDraft+lookupRadio", True),
        ("drafterNoneRadio", False),
        ("drafterLookupRadio", True),
    ]:
        _click(qtbot, _radio(dialog, name))
        assert memory.isEnabled() == copies, name
    _click(qtbot, memory)
    assert dialog.settings() == Settings(lookup_memory=False)

    answers = [QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes]
    monkeypatch.setattr(QMessageBox, "question", lambda *args: answers.pop(0))
    _click(qtbot, forget)
    assert not forgotten and forget.isEnabled()  # "No": nothing deleted
    _click(qtbot, forget)
    assert forgotten == [True]
    assert not forget.isEnabled() and forget.text() == "Forgotten"


def test_forget_is_disabled_without_a_memory_to_forget(make_dialog: MakeDialog) -> None:
    forget = make_dialog().findChild(QPushButton, "forgetMemoryButton")
    assert isinstance(forget, QPushButton) and not forget.isEnabled()


def test_tree_help_explains_when_trees_win(make_dialog: MakeDialog) -> None:
    dialog = make_dialog()
    texts = [label.text() for label in dialog.findChildren(QLabel)]
    assert TREE_HELP in texts
    assert "one target batch" in TREE_HELP and "GPU" in TREE_HELP and "CPU" in TREE_HELP


def test_new_settings_round_trip_through_the_store(
    make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path
) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    dialog = make_dialog(Settings())
    _click(qtbot, _radio(dialog, "drafterLayerskipRadio"))
    _click(qtbot, _check(dialog, "treeDraftsCheck"))
    _spin(dialog, "treeNodesSpin").setValue(12)
    with qtbot.waitSignal(dialog.accepted, timeout=1000):
        _click_ok(qtbot, dialog)
    store.save(dialog.settings())

    loaded = store.load()
    assert store.load_errors == []
    assert loaded == Settings(drafter="layerskip", tree_drafts=True, tree_nodes=12)
    again = make_dialog(loaded)
    assert _radio(again, "drafterLayerskipRadio").isChecked()
    assert _check(again, "treeDraftsCheck").isChecked()
    assert _spin(again, "treeNodesSpin").value() == 12
    assert again.settings() == loaded


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
        assert image.save(str(tmp_path / f"settings_dialog_{name}.png"))
        if index == 0:
            assert image.save(str(tmp_path / "settings_dialog.png"))
        if index == 1:  # with a tree: the nodes spin box enabled
            _check(dialog, "treeDraftsCheck").setChecked(True)
            qtbot.wait(10)
            image = dialog.grab()
            assert image.save(str(tmp_path / "settings_dialog_speculation.png"))
            _check(dialog, "treeDraftsCheck").setChecked(False)

    tabs.setCurrentIndex(0)
    _click(qtbot, _radio(dialog, "drafterDraftRadio"))
    _edit(dialog, "targetModelEdit").setText(str(tmp_path / "missing.gguf"))
    _click_ok(qtbot, dialog)
    assert _error_label(dialog).isVisible()
    image = dialog.grab()
    assert image.save(str(tmp_path / "settings_dialog_errors.png"))
    assert (tmp_path / "settings_dialog.png").stat().st_size > 0
    out = os.environ.get("GAMBIT_SCREENSHOT_DIR")
    if out:  # for docs/; the test itself writes only under tmp_path
        Path(out).mkdir(parents=True, exist_ok=True)
        for shot in tmp_path.glob("settings_dialog*.png"):
            shutil.copy(shot, Path(out) / shot.name)


def test_threads_cannot_be_set_out_of_range(make_dialog: MakeDialog) -> None:
    # The same range as the settings file and the command line (engine/machine/limits.py).
    dialog = make_dialog()
    threads = _spin(dialog, "threadsSpin")
    assert (threads.minimum(), threads.maximum()) == (0, 512)
    threads.setValue(100_000)
    assert dialog.settings().threads == 512
    threads.setValue(-3)
    assert dialog.settings().threads == 0
    assert dialog.settings().validate() == []


NOT_A_MODEL = {
    "README.md": "not a GGUF model file (llama.cpp needs .gguf",
    "x.gguf": "not a GGUF model file: it is named .gguf, but it holds text",
}


@pytest.mark.parametrize("name", list(NOT_A_MODEL))
def test_a_target_that_is_not_a_model_is_refused_next_to_the_field(
    make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path, name: str
) -> None:
    bad = tmp_path / name
    bad.write_text("# Gambit\n\nA desktop chat app.\n")
    dialog = make_dialog()
    dialog.tabs.setCurrentIndex(2)
    _edit(dialog, "targetModelEdit").setText(str(bad))
    _click_ok(qtbot, dialog)

    assert dialog.isVisible() and dialog.result() != QDialog.DialogCode.Accepted
    reason = _label(dialog, "targetModelError")
    assert reason.isVisible()  # next to the field, whose tab came forward
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == "Models"
    assert reason.text().startswith("Target model: " + NOT_A_MODEL[name])
    assert str(bad) in reason.text()
    if name.endswith(".gguf"):
        assert "needs .gguf" not in reason.text()
    assert dialog.errors() == [reason.text()]
    assert not _label(dialog, "draftModelError").isVisible()

    # A real model clears the reason and the dialog accepts.
    _edit(dialog, "targetModelEdit").setText(str(_model_file(tmp_path, "good.gguf")))
    _click_ok(qtbot, dialog)
    assert dialog.result() == QDialog.DialogCode.Accepted
    assert not reason.isVisible()


def test_a_draft_that_is_not_a_model_is_refused_next_to_its_field(
    make_dialog: MakeDialog, qtbot: QtBot, tmp_path: Path
) -> None:
    bad = tmp_path / "draft.gguf"
    bad.write_bytes(bytes(range(256)))
    dialog = make_dialog(Settings(drafter="draft", draft_model=str(bad)))
    _click_ok(qtbot, dialog)
    assert dialog.isVisible() and dialog.result() != QDialog.DialogCode.Accepted
    reason = _label(dialog, "draftModelError")
    assert reason.isVisible()
    assert reason.text().startswith("Draft model: not a GGUF model file: it is named .gguf")
    assert not _label(dialog, "targetModelError").isVisible()


def test_help_texts_are_never_cut_when_the_dialog_is_short(
    make_dialog: MakeDialog, qtbot: QtBot
) -> None:
    dialog = make_dialog()
    dialog.resize(dialog.minimumWidth(), 420)  # far shorter than the Models tab
    for index in range(dialog.tabs.count()):
        dialog.tabs.setCurrentIndex(index)
        qtbot.wait(20)
        page = dialog.tabs.currentWidget()
        assert page is not None
        for label in page.findChildren(QLabel):
            if label.isVisible() and label.wordWrap() and label.text():
                needed = label.heightForWidth(label.width())
                assert label.height() >= needed, (label.objectName(), label.text())
