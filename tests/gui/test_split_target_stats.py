"""The statistics panel says where a split target's layers are: a real window
offscreen, a real ``gambit-worker`` holding 15 of the small model's layers."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.main_window import MainWindow
from worker_process import workers

TIMEOUT_MS = 180_000


def test_the_panel_shows_the_layers_here_and_on_the_worker(
    qtbot: QtBot, tmp_path: Path, smol_q4_1: Path
) -> None:
    settings_path = tmp_path / "settings.json"
    with workers(tmp_path, 1) as (worker,):
        SettingsStore(settings_path).save(
            Settings(
                target_model=str(smol_q4_1),
                drafter="lookup",  # no draft model, and the costs are calibrated at load
                temperature=0.0,
                context_size=1024,
                threads=1,
                rpc_workers=(worker.endpoint,),
                worker_layers=15,
            )
        )
        window = MainWindow(SettingsStore(settings_path), ConversationStore(tmp_path / "c.db"))
        qtbot.addWidget(window)
        window.show()
        window.load_engine()
        qtbot.waitUntil(lambda: window.conversation.engine_info is not None, timeout=TIMEOUT_MS)
        label = window.stats.findChild(QLabel, "targetValue")
        assert label is not None and label.isVisibleTo(window.stats)
        first, costs = label.text().split("\n")
        # SmolLM2-135M: 30 blocks and the output layer; the last 15 go to the worker
        assert first.startswith(f"Target: 16 layers here · 15 on {worker.endpoint} (rtt ")
        assert costs.startswith("Target pass: t(1) ") and "/t(1) " in costs
        window.close()
