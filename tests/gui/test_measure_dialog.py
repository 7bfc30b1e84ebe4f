"""Measure on my chats, end to end in the window: the real engine (SmolLM2's first
8 blocks: Q8_0 target, Q4_1 draft), a real conversation database under tmp_path, real
widgets offscreen. The measurement runs on the worker thread; the
conversations stay byte-identical; the window stays responsive. A worker that
holds the target's layers killed mid-run ends the measurement (a real
``gambit-worker``).

``GAMBIT_SCREENSHOT_DIR`` set: the screenshots are copied there too (for docs/).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCharts import QChartView, QScatterSeries
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QLabel,
    QListWidget,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
)
from pytestqt.qtbot import QtBot

from gambit.bench import MeasureProgress
from gambit.engine.machine.target_host import HostedRuntime
from gambit.models.library import ModelLibrary
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.measurements import measurements_dir
from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.measure.measure_dialog import MeasureDialog
from gambit.ui.window.main_window import MainWindow
from worker_process import workers

LOAD_TIMEOUT_MS = 120_000
MEASURE_TIMEOUT_MS = 300_000
# The bound for the event loop while a measurement runs.
# A freeze guard only a hang can hit (the figure is printed; speed is not under test).
MAX_BLOCK_MS = 10_000.0

CHATS = {
    "Refactor the config parser": [
        ("user", "Here is my function:\n```python\ndef parse(line):\n    key, value = "
                 "line.split('=')\n    return key.strip(), value.strip()\n```\nMake it skip "
                 "comments that start with #."),
        ("assistant", "```python\ndef parse(line):\n    if line.startswith('#'):\n        return "
                      "None\n    key, value = line.split('=')\n    return key.strip(), "
                      "value.strip()\n```"),
        ("user", "Now rename parse to parse_line and repeat the whole function."),
    ],
    "Polish my cover letter": [
        ("user", "Rewrite this more politely: I want the job because I am the best at it and "
                 "you need me."),
    ],
    "Weekend in Lisbon": [
        ("user", "What should I see in Lisbon in two days?"),
    ],
}  # fmt: skip


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.sqlite3"
    with ConversationStore(path) as store:
        for title, messages in CHATS.items():
            conv = store.create(title)
            for role, text in messages:
                store.add_message(conv, role, text)  # type: ignore[arg-type]
    return path


@pytest.fixture
def window(
    qtbot: QtBot,
    tmp_path: Path,
    db: Path,
    q8_0_first8: Path,
    q4_1_first8: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[MainWindow]:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path / "home"))  # measurements are saved here
    store = SettingsStore(tmp_path / "settings.json")
    store.save(
        Settings(
            # The short pair (conftest: SmolLM2's first 8 blocks): every
            # replay the dialog runs costs a fraction of the full pair's.
            target_model=str(q8_0_first8),
            drafter="draft",
            draft_model=str(q4_1_first8),
            temperature=0.0,
            max_tokens=32,
            context_size=1024,
            threads=1,  # two cores shared with other jobs: one thread stays steady
        )
    )
    w = MainWindow(store, ConversationStore(db))
    qtbot.addWidget(w)
    w.show()
    w.load_engine()
    qtbot.waitUntil(lambda: w.conversation.engine_info is not None, timeout=LOAD_TIMEOUT_MS)
    yield w
    w.close()


def fingerprint(db: Path) -> dict[str, str]:
    """The database file and its WAL, byte for byte."""
    files = [db, db.with_name(db.name + "-wal")]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.exists()}


def open_dialog(qtbot: QtBot, window: MainWindow) -> MeasureDialog:
    action = window.findChild(QAction, "measureAction")
    assert isinstance(action, QAction)
    action.trigger()
    dialog = window.findChild(MeasureDialog, "measureDialog")
    assert isinstance(dialog, MeasureDialog)
    qtbot.waitExposed(dialog)
    dialog.max_tokens.setValue(8)
    return dialog


class GapMeter:
    """A 10 ms timer on the GUI thread: the longest gap between its ticks is
    the longest the event loop was blocked."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self._last = time.perf_counter()
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest_ms = max(self.longest_ms, (now - self._last) * 1000)
        self._last = now

    def pause(self) -> None:
        """While the test itself blocks the loop (a screenshot), not the app."""
        self._timer.stop()

    def resume(self) -> None:
        self._last = time.perf_counter()
        self._timer.start()

    def stop(self) -> float:
        self._timer.stop()
        return self.longest_ms


def save_shot(widget: MeasureDialog, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    assert widget.grab().save(str(shot))
    assert shot.stat().st_size > 10_000
    out = os.environ.get("GAMBIT_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / name)
    return shot


def run(qtbot: QtBot, dialog: MeasureDialog) -> None:
    """Measure, and wait until the results are drawn (the charts come a moment later)."""
    qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
    assert dialog.running
    qtbot.waitUntil(
        lambda: not dialog.running and dialog.results.filled, timeout=MEASURE_TIMEOUT_MS
    )


def test_measure_shows_results_and_applies_the_recommendation(
    qtbot: QtBot, window: MainWindow, db: Path, tmp_path: Path
) -> None:
    before = fingerprint(db)
    dialog = open_dialog(qtbot, window)
    picker = dialog.findChild(QListWidget, "conversationPicker")
    assert isinstance(picker, QListWidget) and picker.count() == 3
    # The latest 20 user turns by default, but the chats hold 4: all 4 are
    # offered, and the progress bar counts the replays they make (issue 35).
    assert (dialog.last_turns.value(), dialog.last_turns.maximum()) == (4, 4)
    bar = dialog.findChild(QProgressBar, "measureProgress")
    assert isinstance(bar, QProgressBar)
    assert bar.text() == "0 of 24 replays"  # 4 turns x (2 drafters x 2 policies + target-only x2)
    refactor = picker.findItems("Refactor the config parser", Qt.MatchFlag.MatchStartsWith)[0]
    refactor.setCheckState(Qt.CheckState.Unchecked)  # its 2 turns are not on offer then
    assert (dialog.last_turns.value(), bar.text()) == (2, "0 of 12 replays")
    refactor.setCheckState(Qt.CheckState.Checked)
    assert (dialog.last_turns.value(), bar.text()) == (4, "0 of 24 replays")
    totals: list[int] = []
    window.worker.measure_progress.connect(lambda p: totals.append(p.total))
    # the loaded models offer prompt lookup and the draft model, not layer skip or trees
    assert dialog.drafter_boxes["lookup"].isChecked()
    assert dialog.drafter_boxes["draft"].isChecked()
    assert not dialog.drafter_boxes["layerskip"].isEnabled()
    assert not dialog.trees_box.isEnabled()

    meter = GapMeter()
    run(qtbot, dialog)
    longest = meter.stop()
    print(f"UI event loop: longest gap between 10 ms ticks during the measurement {longest:.1f} ms")
    assert longest < MAX_BLOCK_MS

    outcome = dialog.last_outcome
    assert outcome is not None and outcome.error is None, outcome
    report = outcome.report
    assert report is not None and outcome.path is not None and outcome.path.is_file()
    assert report["turns"] == 4
    assert set(totals) == {24}  # the run counted what the bar had said it would
    names = [m["name"] for m in report["modes"]]
    assert names == [
        "target-only", "lookup adaptive", "lookup fixed=4", "draft adaptive", "draft fixed=4",
    ]  # fmt: skip
    assert report["identical_outputs"] == "16/16"  # a Q8_0 target is batch-invariant
    # results on screen: the recommendation, the regime, both charts and the table
    rec = report["recommendation"]
    headline = dialog.findChild(QLabel, "recommendationHeadline")
    assert isinstance(headline, QLabel) and headline.isVisible()
    assert headline.text() == rec["headline"]
    regime = dialog.findChild(QLabel, "regimeLabel")
    assert isinstance(regime, QLabel) and "t(5)/t(1)" in regime.text()
    bars = dialog.findChild(QChartView, "speedupChart")
    assert isinstance(bars, QChartView) and bars.chart().series()
    scatter = dialog.findChild(QChartView, "scatterChart")
    assert isinstance(scatter, QChartView)
    points = [s for s in scatter.chart().series() if isinstance(s, QScatterSeries)]
    # a point per conversation in which the configuration drafted (no bet, no point)
    assert len(points) == 4 and all(s.count() <= 3 for s in points)
    assert sum(s.count() for s in points) > 0
    table = dialog.findChild(QTableWidget, "resultsTable")
    assert isinstance(table, QTableWidget) and table.rowCount() == 5
    earlier = dialog.findChild(QListWidget, "earlierList")
    assert isinstance(earlier, QListWidget) and earlier.count() == 1
    save_shot(dialog, tmp_path, "measure_results.png")

    # Apply: the window's settings (and the file) follow the recommendation;
    # where the evidence is too thin there is nothing to apply.
    apply = dialog.findChild(QPushButton, "applyButton")
    assert isinstance(apply, QPushButton)
    assert apply.isEnabled() == (rec["apply"] is not False)
    qtbot.mouseClick(apply, Qt.MouseButton.LeftButton)
    saved = window.settings_store.load()
    assert saved == window.settings
    if rec["apply"] is False:
        assert saved == window.settings and rec["headline"].startswith("Not enough evidence")
    elif rec["off"]:
        assert saved.speculation is False
    else:
        assert saved.speculation is True
        assert (saved.drafter, saved.policy) == (rec["drafter"], rec["policy"])
        if rec["policy"] == "fixed":
            assert saved.fixed_gamma == rec["gamma"]
    if rec["apply"] is not False:
        assert rec["headline"] in dialog.status.text()

    # exports in the schema of bench --json
    dialog.export(tmp_path / "m.csv", "csv")
    lines = (tmp_path / "m.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("started,target,draft") and "speedup" in lines[0]
    assert len(lines) == 1 + 5 * len(report["suites"])  # a row per suite x mode
    dialog.export(tmp_path / "m.json", "json")
    assert json.loads((tmp_path / "m.json").read_text(encoding="utf-8")) == report
    assert fingerprint(db) == before  # the conversations were only read


def test_cancel_mid_run_then_a_second_run_is_listed_first(
    qtbot: QtBot, window: MainWindow, db: Path, tmp_path: Path
) -> None:
    before = fingerprint(db)
    dialog = open_dialog(qtbot, window)
    dialog.policy_boxes["fixed=4"].setChecked(False)  # adaptive only: quicker runs
    run(qtbot, dialog)
    first = dialog.last_outcome
    assert first is not None and first.report is not None

    meter = GapMeter()
    qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
    bar = dialog.findChild(QProgressBar, "measureProgress")
    assert isinstance(bar, QProgressBar)
    qtbot.waitUntil(lambda: bar.value() >= 2, timeout=MEASURE_TIMEOUT_MS)
    assert not dialog.start_button.isEnabled() and dialog.cancel_button.isEnabled()
    assert "left" in dialog.eta.text()
    meter.pause()
    save_shot(dialog, tmp_path, "measure_running.png")
    meter.resume()
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=MEASURE_TIMEOUT_MS)
    longest = meter.stop()
    print(f"UI event loop: longest gap between 10 ms ticks, run and cancel {longest:.1f} ms")
    assert longest < MAX_BLOCK_MS
    cancelled = dialog.last_outcome
    assert cancelled is not None and cancelled.cancelled and cancelled.report is None
    # a clear state: says so, nothing saved, ready to measure again
    assert "cancelled after" in dialog.status.text() and "nothing was saved" in dialog.status.text()
    assert bar.value() == 0 and dialog.eta.text() == ""
    assert dialog.start_button.isEnabled() and not dialog.cancel_button.isEnabled()
    assert dialog.earlier.count() == 1

    run(qtbot, dialog)
    second = dialog.last_outcome
    assert second is not None and second.path is not None
    assert dialog.earlier.count() == 2
    newest = dialog.earlier.item(0)
    assert newest.data(Qt.ItemDataRole.UserRole) == str(second.path)  # newest first
    assert dialog.earlier.currentRow() == 0
    assert fingerprint(db) == before  # the conversations were only read
    # the chat still works on the engine the measurement used
    window.input.setPlainText("Say hi")
    dialog.close()
    qtbot.mouseClick(window.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.conversation.streaming, timeout=MEASURE_TIMEOUT_MS)
    assert window.chat.messages[-1].role == "assistant" and window.chat.messages[-1].text


def test_a_draft_of_the_library_is_measured_and_recommended_only_beyond_its_noise(
    qtbot: QtBot,
    window: MainWindow,
    q4_1_first4: Path,
    q4_1_first8: Path,
    smol_q8_0: Path,
) -> None:
    """Issue 34: the library's models much cheaper than the target are offered
    as drafts to measure (the chosen draft and bigger files are not), one is
    replayed next to the target on the chats, and Apply takes its file."""
    library = ModelLibrary()  # (under GAMBIT_HOME: this test's own)
    for path in (q4_1_first4, q4_1_first8, smol_q8_0):
        library.import_file(path)
    dialog = open_dialog(qtbot, window)
    offered = {str(p): box for p, box in dialog.candidates_group.boxes.items()}
    assert list(offered) == [str(q4_1_first4)]  # not the chosen draft, not the full model
    box = offered[str(q4_1_first4)]
    assert not box.isChecked() and "through text" not in box.text()  # same tokenizer
    for drafter in dialog.drafter_boxes.values():
        drafter.setChecked(False)
    assert not dialog.start_button.isEnabled()  # nothing to compare
    box.setChecked(True)
    assert dialog.start_button.isEnabled()
    bar = dialog.findChild(QProgressBar, "measureProgress")
    assert isinstance(bar, QProgressBar) and bar.text() == "0 of 12 replays"  # 4 x (1 + 2)

    run(qtbot, dialog)
    outcome = dialog.last_outcome
    assert outcome is not None and outcome.error is None and outcome.report is not None
    report = outcome.report
    (candidate,) = [m for m in report["modes"] if m.get("draft")]
    assert candidate["draft"] == str(q4_1_first4) and candidate["policy"] == "adaptive"
    assert [m["name"] for m in report["modes"]] == ["target-only", candidate["name"]]
    assert report["identical_outputs"] == "4/4"  # lossless with the candidate too
    rec = report["recommendation"]
    # (None: none of its drafts landed, it claims nothing)
    gain = float(report["suites"]["ALL"][candidate["name"]]["speedup"] or 1.0) - 1.0
    # A gain within its noise is never recommended (issue 34).
    if rec["apply"] is not False and not rec["off"]:
        assert rec["draft_model"] == str(q4_1_first4)
        assert gain > float(report["noise"])
        qtbot.mouseClick(dialog.results.apply_button, Qt.MouseButton.LeftButton)
        assert window.settings_store.load().draft_model == str(q4_1_first4)
    else:
        assert window.settings_store.load().draft_model == str(q4_1_first8)


def test_cancel_stops_the_measurement_at_its_next_replay(
    qtbot: QtBot, window: MainWindow, db: Path
) -> None:
    """Issue 35: a cancelled long task stops at its next step, not at its end.
    Cancelled from the worker's own thread the moment it counts its second
    replay (so the count is exact, not a race with the window), it finishes
    no third: 2 of 24."""
    dialog = open_dialog(qtbot, window)

    def cancel_at_the_second(p: MeasureProgress) -> None:
        if p.done == 2:
            window.worker.cancel()  # what Cancel does: an event, set from any thread

    window.worker.measure_progress.connect(cancel_at_the_second, Qt.ConnectionType.DirectConnection)
    qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=MEASURE_TIMEOUT_MS)
    outcome = dialog.last_outcome
    assert outcome is not None and outcome.cancelled and outcome.report is None, outcome
    assert "cancelled after 2 of 24 replays" in dialog.status.text()


def test_a_worker_killed_mid_measurement_ends_it_and_drops_the_engine(
    qtbot: QtBot, tmp_path: Path, db: Path, smol_q4_1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GAMBIT_HOME", str(home))  # a measurement would be saved here
    store = SettingsStore(tmp_path / "settings.json")
    with workers(tmp_path, 1) as (worker,):
        store.save(
            Settings(
                target_model=str(smol_q4_1),
                drafter="lookup",
                temperature=0.0,
                context_size=1024,
                threads=1,
                rpc_workers=(worker.endpoint,),
            )
        )
        window = MainWindow(store, ConversationStore(db))
        qtbot.addWidget(window)
        window.show()
        window.load_engine()
        qtbot.waitUntil(
            lambda: window.conversation.engine_info is not None, timeout=MEASURE_TIMEOUT_MS
        )
        engine = window.worker._engine
        assert engine is not None and isinstance(engine.target, HostedRuntime)
        before = fingerprint(db)  # (once the window has opened it: an empty WAL)

        dialog = open_dialog(qtbot, window)
        dialog.max_tokens.setValue(96)  # long replays: the kill lands mid-run
        qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
        assert dialog.running
        bar = dialog.findChild(QProgressBar, "measureProgress")
        assert isinstance(bar, QProgressBar)
        qtbot.waitUntil(lambda: bar.value() >= 1, timeout=MEASURE_TIMEOUT_MS)  # a replay is done
        assert bar.value() < bar.maximum()
        worker.kill()  # SIGKILL, mid-measurement
        qtbot.waitUntil(lambda: not dialog.running, timeout=MEASURE_TIMEOUT_MS)

    outcome = dialog.last_outcome
    assert outcome is not None and outcome.worker_lost and not outcome.cancelled
    assert outcome.report is None and outcome.path is None
    assert outcome.error is not None and worker.endpoint in outcome.error
    assert "Nothing was saved" in outcome.error
    assert dialog.status.text() == outcome.error  # the dialog names the worker
    assert bar.format() == "Worker lost" and dialog.earlier.count() == 0
    assert dialog.start_button.isEnabled() and not dialog.cancel_button.isEnabled()
    # the broken engine is gone, as after a lost reply, and the window says so
    assert window.worker._engine is None and window.conversation.engine_info is None
    assert not window.conversation.streaming and window.send_button.isEnabled()
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "workerLostDialog") is not None)
    box = window.findChild(QMessageBox, "workerLostDialog")
    assert isinstance(box, QMessageBox) and worker.endpoint in box.text()
    # nothing written: no report, no message in any conversation
    saved = measurements_dir()
    assert saved.is_relative_to(home) and not (saved.exists() and any(saved.iterdir()))
    assert fingerprint(db) == before
    # Start again while the engine is gone: the same message, nothing runs
    qtbot.mouseClick(dialog.start_button, Qt.MouseButton.LeftButton)
    assert not dialog.running and dialog.status.text() == outcome.error
    box.close()
    dialog.close()
    window.close()
