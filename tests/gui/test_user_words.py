"""The words a user reads about drafts and kernels say what the code does now.

Every label, tooltip, placeholder and list row of the settings dialog, the
Models dialog and the statistics panel is collected; those about a draft's
tokenizer must not claim a draft needs the target's, since the pairing code
takes one of another tokenizer (through text). A kernel verdict is worded
as llama.cpp's kernels failing on this CPU, never as a crash of the app.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtWidgets import QComboBox, QLineEdit, QListWidget, QWidget
from pytestqt.qtbot import QtBot

from gambit.engine.drafters.registry import DRAFTERS
from gambit.engine.machine.backend import BackendInfo
from gambit.engine.machine.kernels import (
    EXACT,
    LLAMA_DEFAULT,
    KernelChoice,
    KernelConfig,
    KernelVerdict,
    ProbeResult,
)
from gambit.formats.gguf_info import inspect_model
from gambit.models.library import ModelLibrary
from gambit.models.pairing import drafts_through_text, pair_report
from gambit.qt.worker import EngineInfo
from gambit.storage.settings import Settings
from gambit.ui.models_dialog.dialog import ModelsDialog
from gambit.ui.settings.settings_dialog import SettingsDialog
from gambit.ui.stats.stats_panel import StatsPanel

# A sentence that says a draft must have, share or use the target's tokenizer.
NEEDS_SAME = re.compile(
    r"(must|needs? to|has to|should)\s+(share|have|use)\b[^.]*tokenizer"
    r"|with the target's tokenizer"
    r"|^same tokenizer and smaller",
    re.IGNORECASE,
)


def texts(root: QWidget) -> list[str]:
    """Every string ``root`` and its children show: texts, titles, tooltips,
    placeholders, list rows and combo box entries."""
    found: list[str] = []
    for widget in [root, *root.findChildren(QWidget)]:
        found.append(widget.toolTip())
        for name in ("text", "title"):
            getter = getattr(widget, name, None)
            if callable(getter):
                value = getter()
                if isinstance(value, str):
                    found.append(value)
        if isinstance(widget, QLineEdit):
            found.append(widget.placeholderText())
        if isinstance(widget, QListWidget):
            found += [widget.item(i).text() for i in range(widget.count())]
            found += [widget.item(i).toolTip() for i in range(widget.count())]
        if isinstance(widget, QComboBox):
            found += [widget.itemText(i) for i in range(widget.count())]
    return [t for t in found if t]


def about_draft_tokenizers(strings: list[str]) -> list[str]:
    return [s for s in strings if "tokenizer" in s.lower() and "draft" in s.lower()]


def test_no_word_says_a_draft_needs_the_target_s_tokenizer(
    qtbot: QtBot, tmp_path: Path, smol_q8_0: Path, changed_tokenizer: Path
) -> None:
    # What the pairing code says: a draft of another tokenizer drafts, through text.
    target, other = inspect_model(smol_q8_0), inspect_model(changed_tokenizer)
    assert drafts_through_text(target, other) and pair_report(target, other).through_text

    settings = SettingsDialog(Settings(), None)
    qtbot.addWidget(settings)
    library = ModelLibrary(tmp_path / "library.json", tmp_path / "models")
    models = ModelsDialog(library, Settings(context_size=2048))
    qtbot.addWidget(models)
    models.details.drafts.show_drafts([], set())  # the "none yet" message, as a new user sees it
    strings = texts(settings) + texts(models)
    strings += [s for spec in DRAFTERS.values() for s in (spec.help, spec.cli_help)]

    about = about_draft_tokenizers(strings)
    assert len(about) >= 4  # (the collection found the places this is said)
    assert [s for s in about if NEEDS_SAME.search(s)] == []
    # Where a user picks a draft, the words say what one of another tokenizer does.
    where_picked = (
        settings.draft_model_edit.placeholderText(),
        models.details.use_draft_button.toolTip(),
        models.details.drafts.caption.text(),
        models.details.drafts.empty_label.text(),
    )
    assert all("through text" in s for s in where_picked), where_picked


def test_a_kernel_verdict_is_never_worded_as_a_crash(qtbot: QtBot) -> None:
    repacked_q8 = KernelConfig(repack=True, kv_type="q8_0")
    verdict = KernelVerdict(
        (
            ProbeResult(EXACT, True, t1_s=0.01, tk_s=0.02, k_max=9),
            ProbeResult(repacked_q8, False, error="crashed (SIGSEGV)"),
            ProbeResult(LLAMA_DEFAULT, False, error="hung (no answer in 240 s)"),
        ),
        probed_on="a test CPU",
    )
    line = KernelChoice(EXACT, "fast", verdict).describe()
    assert "crash" not in line.lower()
    assert "not used on this CPU" in line and "llama.cpp's kernels fail here" in line
    assert "SIGSEGV" in line and "hang here" in line  # (the detail stays for a report)

    panel = StatsPanel()
    qtbot.addWidget(panel)
    info = EngineInfo(
        target_name="SmolLM2-135M-Instruct.Q8_0.gguf",
        draft_name=None,
        drafter="lookup",
        drafter_label="prompt lookup",
        n_ctx=4096,
        backend=BackendInfo(
            gpu_offload=False, cpu_features=("AVX2",), system_info="CPU : AVX2 = 1", threads=2
        ),
        load_seconds=1.0,
        kernels=line,
    )
    panel.set_engine(info)
    kernel_words = [s for s in texts(panel) if "kernel" in s.lower()]
    assert kernel_words and not [s for s in kernel_words if "crash" in s.lower()]
