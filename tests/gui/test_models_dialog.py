"""The Models dialog on real GGUF files and a real library in a temporary folder
(offscreen Qt, no mocks): listing, bad files, choosing a pair, a draft of
another tokenizer (through text), deriving (and cancelling) a draft, and a catalog download
without network."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QLabel,
    QListWidget,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
)
from pytestqt.qtbot import QtBot

from gambit.formats.gguf_info import inspect_model
from gambit.models.library import ModelLibrary
from gambit.storage.settings import Settings
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.models_dialog.library_page import (
    COL_ARCH,
    COL_CONTEXT,
    COL_NAME,
    COL_PARAMS,
    COL_QUANT,
    COL_ROLE,
    COL_SIZE,
    COL_TEMPLATE,
    COL_VOCAB,
)
from gambit.ui.models_dialog.text import format_bytes

TASK_TIMEOUT_MS = 60_000

MakeDialog = Callable[..., ModelsDialog]


@pytest.fixture
def library(tmp_path: Path) -> ModelLibrary:
    return ModelLibrary(tmp_path / "data" / "library.json", tmp_path / "data" / "models")


@pytest.fixture
def make_dialog(qtbot: QtBot, library: ModelLibrary) -> MakeDialog:
    def make(settings: Settings | None = None) -> ModelsDialog:
        dialog = ModelsDialog(library, settings or Settings(context_size=2048))
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitExposed(dialog)
        return dialog

    return make


# ------------------------------------------------------------------ helpers


def _wait_idle(qtbot: QtBot, dialog: ModelsDialog, timeout: int = TASK_TIMEOUT_MS) -> None:
    qtbot.waitUntil(lambda: not dialog.busy, timeout=timeout)


def _import(qtbot: QtBot, dialog: ModelsDialog, *files: Path) -> None:
    for path in files:
        dialog.import_file(path, copy=False)
        _wait_idle(qtbot, dialog)
        assert not dialog.error_label.isVisible(), dialog.error_label.text()


def _row(dialog: ModelsDialog, path: Path) -> int:
    table = dialog.table
    for row in range(table.rowCount()):
        item = table.item(row, COL_NAME)
        if item is not None and os.path.samefile(item.data(Qt.ItemDataRole.UserRole), path):
            return row
    raise AssertionError(f"{path.name} is not in the table")


def _text(dialog: ModelsDialog, row: int, col: int) -> str:
    item = dialog.table.item(row, col)
    assert item is not None
    return item.text()


def _select(qtbot: QtBot, dialog: ModelsDialog, path: Path) -> None:
    row = _row(dialog, path)
    item = dialog.table.item(row, COL_NAME)
    assert item is not None
    rect = dialog.table.visualItemRect(item)
    qtbot.mouseClick(dialog.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert dialog.selected_path() is not None
    assert os.path.samefile(dialog.selected_path() or "", path)


def _click(qtbot: QtBot, dialog: ModelsDialog, name: str) -> None:
    button = dialog.findChild(QPushButton, name)
    assert button is not None and button.isVisible() and button.isEnabled(), name
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def _label(dialog: ModelsDialog, name: str) -> QLabel:
    label = dialog.findChild(QLabel, name)
    assert label is not None, name
    return label


def _drafts(dialog: ModelsDialog) -> list[str]:
    """The drafts listed, or the wrapped message that there are none."""
    lst = dialog.findChild(QListWidget, "draftsList")
    empty = _label(dialog, "draftsEmpty")
    assert lst is not None
    if not empty.isHidden():
        assert lst.isHidden()  # (never both)
        return [empty.text()]
    return [lst.item(i).text() for i in range(lst.count())]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_derive(qtbot: QtBot, dialog: ModelsDialog, ftype: str) -> None:
    _click(qtbot, dialog, "deriveButton")
    combo = dialog.findChild(QComboBox, "deriveQuantCombo")
    assert combo is not None and combo.isVisible()
    # Of a Q8_0 target: what reads clearly fewer bytes per token, largest first.
    assert [combo.itemData(i) for i in range(combo.count())] == [
        "Q4_K_M",
        "Q4_1",
        "Q3_K_M",
        "Q4_0",
        "Q2_K",
    ]
    combo.setCurrentIndex(combo.findData(ftype))
    _click(qtbot, dialog, "deriveStartButton")


# ------------------------------------------------------------------ tests


def test_table_lists_an_imported_model(
    qtbot: QtBot, make_dialog: MakeDialog, smol_q8_0: Path
) -> None:
    dialog = make_dialog()
    assert dialog.objectName() == "modelsDialog" and dialog.windowTitle() == "Models"
    assert dialog.findChild(QTableWidget, "modelTable") is dialog.table
    assert dialog.table.rowCount() == 0 and _label(dialog, "emptyLabel").isVisible()

    _import(qtbot, dialog, smol_q8_0)
    info = inspect_model(smol_q8_0)
    assert dialog.table.rowCount() == 1
    row = _row(dialog, smol_q8_0)
    assert _text(dialog, row, COL_NAME) == "SmolLM2-135M-Instruct.Q8_0"  # the file's name
    assert info.name in (dialog.table.item(row, COL_NAME) or QTableWidgetItem()).toolTip()
    assert _text(dialog, row, COL_ARCH) == "llama"
    assert _text(dialog, row, COL_PARAMS) == "134.5 M"
    assert _text(dialog, row, COL_QUANT) == "Q8_0"
    assert _text(dialog, row, COL_SIZE) == format_bytes(info.file_size) == "138.1 MiB"
    assert _text(dialog, row, COL_VOCAB) == "49,152 BPE"
    assert _text(dialog, row, COL_CONTEXT) == "8,192"
    assert _text(dialog, row, COL_TEMPLATE) == "yes"
    assert _text(dialog, row, COL_ROLE) == ""  # the default target is the embedded model

    # The details of the (only, so selected) model, with its memory estimate.
    assert os.path.samefile(dialog.selected_path() or "", smol_q8_0)
    assert _label(dialog, "detail_fingerprint").text() == info.tokenizer_digest
    assert "gpt2" in _label(dialog, "detail_vocab").text()
    assert "30 blocks" in _label(dialog, "detail_layers").text()
    memory = _label(dialog, "memoryLabel").text()
    assert "2,048 tokens of context" in memory and "available" in memory
    assert "Will not fit" not in memory  # 135M parameters fit anywhere
    assert "referenced" in _label(dialog, "detail_origin").text()
    assert _label(dialog, "detail_name").text() == info.name
    assert _drafts(dialog)[0].startswith("None yet")

    # Removing a referenced model forgets it and leaves the file alone.
    _click(qtbot, dialog, "removeButton")
    assert dialog.table.rowCount() == 0 and smol_q8_0.is_file()
    assert "the file stays" in _label(dialog, "taskLabel").text()


def test_import_by_copy_then_remove_with_the_file(
    qtbot: QtBot, make_dialog: MakeDialog, library: ModelLibrary, smol_q4_1: Path
) -> None:
    dialog = make_dialog()
    copy_check = dialog.findChild(QCheckBox, "copyCheck")
    assert copy_check is not None and copy_check.text() == "Copy into Gambit's models folder"
    copy_check.setChecked(True)
    dialog.import_file(smol_q4_1)  # as the check box says
    _wait_idle(qtbot, dialog)
    copied = library.models_dir / smol_q4_1.name
    assert copied.is_file() and copied.stat().st_size == smol_q4_1.stat().st_size
    assert os.path.samefile(dialog.selected_path() or "", copied)
    assert "copied into Gambit's models folder" in _label(dialog, "detail_origin").text()

    dialog.remove_model(copied, delete_file=True)
    assert not copied.exists() and smol_q4_1.is_file()
    assert dialog.table.rowCount() == 0


def test_bad_file_in_an_added_folder(
    qtbot: QtBot, make_dialog: MakeDialog, tmp_path: Path, smol_q4_1: Path
) -> None:
    folder = tmp_path / "my-models"
    folder.mkdir()
    good = folder / smol_q4_1.name
    try:
        os.link(smol_q4_1, good)
    except OSError:
        shutil.copyfile(smol_q4_1, good)
    (folder / "broken.gguf").write_bytes(os.urandom(4096))
    (folder / "empty.gguf").write_bytes(b"")

    dialog = make_dialog()
    dialog.add_folder(folder)
    _wait_idle(qtbot, dialog)
    problems = _label(dialog, "problemsLabel")
    assert problems.isVisible()
    text = problems.text()
    assert "2 files could not be used" in text
    assert "not a GGUF model file" in text and "broken.gguf" in text
    assert "empty" in text and "empty.gguf" in text
    assert dialog.table.rowCount() == 1
    assert _text(dialog, _row(dialog, good), COL_QUANT) == "Q4_1"
    assert "found in a library folder" in _label(dialog, "detail_origin").text()

    # Fixing the bad file and rescanning clears the problem.
    (folder / "broken.gguf").unlink()
    (folder / "empty.gguf").unlink()
    _click(qtbot, dialog, "rescanButton")
    _wait_idle(qtbot, dialog)
    assert not problems.isVisible()
    assert dialog.table.rowCount() == 1


def test_choose_a_compatible_pair(
    qtbot: QtBot, make_dialog: MakeDialog, smol_q8_0: Path, smol_q4_1: Path
) -> None:
    dialog = make_dialog()
    _import(qtbot, dialog, smol_q8_0, smol_q4_1)
    assert dialog.chosen_settings() == Settings(context_size=2048)  # nothing picked yet

    _select(qtbot, dialog, smol_q8_0)
    assert _drafts(dialog)[0].startswith(smol_q4_1.name) and "suggested" in _drafts(dialog)[0]
    _click(qtbot, dialog, "useTargetButton")
    _select(qtbot, dialog, smol_q4_1)
    _click(qtbot, dialog, "useDraftButton")

    chosen = dialog.chosen_settings()
    assert chosen.drafter == "draft"
    assert os.path.samefile(chosen.target_model, smol_q8_0)
    assert os.path.samefile(chosen.draft_model, smol_q4_1)
    assert chosen.context_size == 2048  # the rest stays as given
    pair = _label(dialog, "pairLabel")
    assert pair.isVisible() and "drafts for" in pair.text()
    assert _text(dialog, _row(dialog, smol_q8_0), COL_ROLE) == "Target"
    assert _text(dialog, _row(dialog, smol_q4_1), COL_ROLE) == "Draft"
    memory = _label(dialog, "memoryLabel").text()
    assert smol_q8_0.name in memory and smol_q4_1.name in memory and "Total" in memory
    assert "(changed)" in _label(dialog, "choiceLabel").text()

    # The target cannot draft for itself.
    _select(qtbot, dialog, smol_q8_0)
    _click(qtbot, dialog, "useDraftButton")
    assert "cannot draft for itself" in pair.text()
    assert os.path.samefile(dialog.chosen_settings().draft_model, smol_q4_1)


def test_a_draft_of_another_tokenizer_is_taken_through_text(
    qtbot: QtBot, make_dialog: MakeDialog, smol_q8_0: Path, changed_tokenizer: Path
) -> None:
    dialog = make_dialog()
    _import(qtbot, dialog, smol_q8_0, changed_tokenizer)
    _select(qtbot, dialog, smol_q8_0)
    # Not offered: through text a draft must read under 40 % of the
    # target's bytes, and this Q4_1 reads two thirds of the Q8_0's.
    assert _drafts(dialog)[0].startswith("None yet")
    _click(qtbot, dialog, "useTargetButton")
    _select(qtbot, dialog, changed_tokenizer)
    _click(qtbot, dialog, "useDraftButton")

    pair = _label(dialog, "pairLabel")
    assert pair.isVisible()
    assert f"{changed_tokenizer.name} drafts for {smol_q8_0.name}: through text" in pair.text()
    assert "drafts through text" in pair.text()  # the note says what that costs
    chosen = dialog.chosen_settings()
    assert chosen.drafter == "draft" and os.path.samefile(chosen.draft_model, changed_tokenizer)
    assert os.path.samefile(chosen.target_model, smol_q8_0)
    assert _text(dialog, _row(dialog, changed_tokenizer), COL_ROLE) == "Draft"


@pytest.mark.slow
def test_derive_a_draft_and_measure_it(
    qtbot: QtBot, make_dialog: MakeDialog, library: ModelLibrary, smol_q8_0: Path
) -> None:
    # One thread: llama.cpp's spinning thread pool crawls on a busy shared machine.
    dialog = make_dialog(Settings(context_size=2048, threads=1))
    _import(qtbot, dialog, smol_q8_0)
    _select(qtbot, dialog, smol_q8_0)
    _start_derive(qtbot, dialog, "Q4_0")
    assert dialog.busy and dialog.progress.isVisible()
    _wait_idle(qtbot, dialog)

    assert not dialog.error_label.isVisible(), dialog.error_label.text()
    derived = library.models_dir / "SmolLM2-135M-Instruct.Q4_0.gguf"
    assert derived.is_file()
    assert dialog.table.rowCount() == 2
    assert os.path.samefile(dialog.selected_path() or "", derived)  # selected
    assert _text(dialog, _row(dialog, derived), COL_QUANT) == "Q4_0"
    origin = _label(dialog, "detail_origin").text()
    assert "derived by Gambit" in origin and f"draft for {smol_q8_0.name}" in origin
    assert "Derived SmolLM2-135M-Instruct.Q4_0.gguf" in _label(dialog, "taskLabel").text()

    # It is now a draft of the target, and can be chosen as one.
    _select(qtbot, dialog, smol_q8_0)
    assert _drafts(dialog)[0].startswith(derived.name)
    _click(qtbot, dialog, "useTargetButton")
    _select(qtbot, dialog, derived)
    _click(qtbot, dialog, "useDraftButton")
    assert dialog.chosen_settings().drafter == "draft"

    _click(qtbot, dialog, "measureButton")
    assert dialog.busy
    _wait_idle(qtbot, dialog, timeout=120_000)
    assert not dialog.error_label.isVisible(), dialog.error_label.text()
    acceptance = _label(dialog, "acceptanceLabel")
    assert acceptance.isVisible() and "%" in acceptance.text()


def test_derive_offers_only_cheaper_quantizations_and_says_why(
    qtbot: QtBot, make_dialog: MakeDialog, smol_q4_1: Path, smol_q8_0: Path
) -> None:
    dialog = make_dialog()
    _import(qtbot, dialog, smol_q4_1, smol_q8_0)
    missing = _label(dialog, "deriveMissingLabel")
    estimate = _label(dialog, "deriveEstimateLabel")

    # A Q4_1 model: every other quantization reads about as many bytes per token.
    _select(qtbot, dialog, smol_q4_1)
    _click(qtbot, dialog, "deriveButton")
    assert not dialog.derive_panel.isVisible() and not estimate.isVisible()
    assert missing.isVisible()
    text = missing.text()
    assert text.startswith("No quantization is meaningfully cheaper than this model")
    assert "Q4_0 (" in text and "% fewer)" in text and "25 % fewer bytes per token" in text
    _click(qtbot, dialog, "deriveButton")  # closes it again
    assert not missing.isVisible()

    # A Q8_0 model: the cheaper ones, each with what it may gain before any work.
    _select(qtbot, dialog, smol_q8_0)
    _click(qtbot, dialog, "deriveButton")
    combo = dialog.findChild(QComboBox, "deriveQuantCombo")
    assert combo is not None and combo.isVisible() and combo.count() == 5
    assert combo.itemText(0).startswith("Q4_K_M  ·  about ")
    assert estimate.isVisible() and estimate.text().startswith("A Q4_K_M draft step should cost")
    combo.setCurrentIndex(combo.findData("Q2_K"))
    assert estimate.text().startswith("A Q2_K draft step should cost")
    assert "Verification" in estimate.text()  # where the batch costs come from
    assert missing.isVisible() and "Q8_0 (the target's own quantization)" in missing.text()


def test_cancel_a_derivation(
    qtbot: QtBot, make_dialog: MakeDialog, library: ModelLibrary, smol_q8_0: Path
) -> None:
    dialog = make_dialog()
    _import(qtbot, dialog, smol_q8_0)
    _start_derive(qtbot, dialog, "Q2_K")
    _click(qtbot, dialog, "cancelTaskButton")
    _wait_idle(qtbot, dialog)

    assert "cancelled" in _label(dialog, "taskLabel").text()
    assert not dialog.error_label.isVisible()
    leftovers = list(library.models_dir.iterdir()) if library.models_dir.exists() else []
    assert leftovers == []  # neither the file nor a partial one
    assert dialog.table.rowCount() == 1
    # The UI is usable again: everything enabled, and a new task runs.
    for name in ("deriveButton", "importButton", "addFolderButton", "rescanButton"):
        button = dialog.findChild(QPushButton, name)
        assert button is not None and button.isEnabled(), name
    _click(qtbot, dialog, "rescanButton")
    _wait_idle(qtbot, dialog)
    assert "Rescanned: 1 usable model." in _label(dialog, "taskLabel").text()  # (one, not "models")


def test_catalog_download_without_network(
    qtbot: QtBot, make_dialog: MakeDialog, library: ModelLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    dialog = make_dialog()
    dialog.tabs.setCurrentIndex(1)
    assert dialog.catalog_table.rowCount() >= 1
    name, button = next(iter(dialog.download_buttons.items()))
    assert button.isVisible()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton, pos=button.rect().topLeft() + QPoint(8, 8))
    assert dialog.busy
    _wait_idle(qtbot, dialog, timeout=30_000)

    error = _label(dialog, "errorLabel")
    assert error.isVisible()
    assert "cannot be reached" in error.text() and "no network connection" in error.text()
    assert "Import" in error.text()  # points to importing a file instead
    assert name and library.entries() == []
    assert button.isEnabled()  # ready for another try


def test_catalog_claims_only_what_was_verified(make_dialog: MakeDialog) -> None:
    dialog = make_dialog()
    dialog.tabs.setCurrentIndex(1)
    intro = _label(dialog, "catalogIntro").text()
    assert "known-good" not in intro.lower()  # pairs may say "Not yet verified end to end"
    assert "Suggested" in intro and "✓" in intro
    assert dialog.catalog_table.rowCount() >= 1


def test_screenshot(
    qtbot: QtBot,
    make_dialog: MakeDialog,
    tmp_path: Path,
    smol_q8_0: Path,
    smol_q4_1: Path,
    changed_tokenizer: Path,
) -> None:
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "half-downloaded.gguf").write_bytes(smol_q4_1.read_bytes()[: 1 << 20])
    dialog = make_dialog(Settings(context_size=4096))
    dialog.add_folder(folder)
    _wait_idle(qtbot, dialog)
    _import(qtbot, dialog, smol_q8_0, smol_q4_1, changed_tokenizer)
    _select(qtbot, dialog, smol_q8_0)
    _click(qtbot, dialog, "useTargetButton")
    _select(qtbot, dialog, smol_q4_1)
    _click(qtbot, dialog, "useDraftButton")
    _select(qtbot, dialog, smol_q8_0)
    _click(qtbot, dialog, "deriveButton")
    qtbot.wait(50)
    shots = [tmp_path / "models_dialog.png", tmp_path / "models_dialog_catalog.png"]
    assert dialog.grab().save(str(shots[0]))
    dialog.tabs.setCurrentIndex(1)
    qtbot.wait(50)
    assert dialog.grab().save(str(shots[1]))
    out = os.environ.get("GAMBIT_SCREENSHOT_DIR")
    if out:  # for docs/; the test itself writes only under tmp_path
        Path(out).mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copy(shot, Path(out) / shot.name)


def test_self_speculation_is_kept_and_named(make_dialog: MakeDialog) -> None:
    settings = Settings(context_size=2048, drafter="layerskip")
    dialog = make_dialog(settings)
    assert "Drafter: <b>self-speculation (skip layers)</b>" in _label(dialog, "choiceLabel").text()
    assert dialog.chosen_settings() == settings


def test_a_damaged_library_index_is_said_and_the_dialog_works(qtbot: QtBot, tmp_path: Path) -> None:
    index = tmp_path / "data" / "library.json"
    index.parent.mkdir(parents=True)
    index.write_text("[" * 100_000)  # used to raise RecursionError on every start
    dialog = ModelsDialog(ModelLibrary(index, tmp_path / "data" / "models"), Settings())
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    problems = _label(dialog, "problemsLabel")
    assert problems.isVisible()
    [aside] = index.parent.glob("library.json.corrupt-*")
    assert "library index" in problems.text() and aside.name in problems.text()
    assert dialog.table.rowCount() == 0


def test_first_open_lists_what_is_already_in_the_models_folder(
    qtbot: QtBot, make_dialog: MakeDialog, library: ModelLibrary, smol_q4_1: Path
) -> None:
    # The default model lands in the models folder before any scan ever ran.
    library.models_dir.mkdir(parents=True)
    default = library.models_dir / smol_q4_1.name
    try:
        os.link(smol_q4_1, default)
    except OSError:
        shutil.copyfile(smol_q4_1, default)
    assert library.entries() == [] and library.unlisted() == [default]

    dialog = make_dialog()  # no Rescan clicked
    _wait_idle(qtbot, dialog)
    assert dialog.table.rowCount() == 1
    assert _text(dialog, _row(dialog, default), COL_QUANT) == "Q4_1"
    assert not _label(dialog, "emptyLabel").isVisible()
    assert library.unlisted() == []
    assert not dialog.error_label.isVisible()

    again = make_dialog()  # listed now: no scan at opening
    assert not again.busy and again.table.rowCount() == 1


def test_an_empty_models_folder_says_so_without_scanning(make_dialog: MakeDialog) -> None:
    dialog = make_dialog()
    assert not dialog.busy
    empty = _label(dialog, "emptyLabel")
    assert empty.isVisible() and empty.text().startswith("No models yet")
