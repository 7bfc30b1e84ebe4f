"""The models dialog's memory estimate with RPC workers in the settings: the
workers are asked off the UI thread, the target's layers are split over the
ones that answer, and one that does not is shown as unreachable. Real widgets
offscreen, a real ``gambit-worker`` on 127.0.0.1 and a port nobody listens on."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from gambit.models.library import ModelLibrary
from gambit.storage.settings import Settings
from gambit.ui.models_dialog.dialog import ModelsDialog
from worker_process import free_port, workers

TIMEOUT_MS = 30_000


def _dialog(qtbot: QtBot, library: ModelLibrary, settings: Settings) -> ModelsDialog:
    dialog = ModelsDialog(library, settings)
    qtbot.addWidget(dialog)
    return dialog


def _memory(dialog: ModelsDialog) -> str:
    label = dialog.findChild(QLabel, "memoryLabel")
    assert isinstance(label, QLabel)
    return label.text()


def test_the_estimate_splits_the_target_over_the_workers(
    qtbot: QtBot, tmp_path: Path, smol_q8_0: Path
) -> None:
    library = ModelLibrary(tmp_path / "library.json", tmp_path / "models")
    library.add_file(smol_q8_0)
    dead = f"127.0.0.1:{free_port()}"  # nobody listens there
    with workers(tmp_path, 1) as (worker,):
        settings = Settings(
            target_model=str(smol_q8_0), context_size=2048, rpc_workers=(worker.endpoint, dead)
        )
        dialog = _dialog(qtbot, library, settings)
        # The dialog is built before any worker answered: the probe runs on a
        # task thread and its answer comes through the event loop.
        assert dialog.worker_memory.pending
        assert "Asking the 2 workers for their free memory" in _memory(dialog)
        dialog.show()
        qtbot.waitUntil(lambda: not dialog.worker_memory.pending, timeout=TIMEOUT_MS)
        memory = _memory(dialog)
        # SmolLM2: 30 blocks and the output layer, all on the one worker that answers
        assert "Split over the workers</b> (30 layers)" in memory
        assert f"{worker.endpoint}&nbsp; 30 layers + output" in memory
        assert "<b>This machine</b>&nbsp; 0 layers, embeddings" in memory
        assert f"{dead}</td><td align='right'>&nbsp;&nbsp;unreachable" in memory
        assert "connection refused" in memory and "⚠ Will not load." in memory
        dialog.close()

        # Ten layers on the worker, the rest here; it all fits.
        settings = settings.with_(rpc_workers=(worker.endpoint,), worker_layers=10)
        dialog = _dialog(qtbot, library, settings)
        dialog.show()
        qtbot.waitUntil(lambda: not dialog.worker_memory.pending, timeout=TIMEOUT_MS)
        memory = _memory(dialog)
        assert f"{worker.endpoint}&nbsp; 9 layers + output" in memory
        assert "<b>This machine</b>&nbsp; 21 layers, embeddings" in memory
        assert "unreachable" not in memory and "⚠" not in memory
        dialog.close()
