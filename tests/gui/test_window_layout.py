"""The main window's layout at the default size (1280×820) and at 1024×700, on
real widgets with a stored conversation and a filled statistics panel (no model
loaded): nothing cut off, long titles elided with tooltips, screenshots saved.

``GAMBIT_SCREENSHOT_DIR`` set: the screenshots are copied there too (for docs/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCharts import QChartView
from PySide6.QtWidgets import QApplication, QLabel, QScrollArea, QToolBar, QToolButton, QWidget
from pytestqt.qtbot import QtBot

from gambit.engine.gamma.metrics import MetricsSnapshot
from gambit.engine.machine.backend import BackendInfo
from gambit.qt.worker import EngineInfo
from gambit.storage.chat_store.conversations import ConversationStore
from gambit.storage.settings import SettingsStore
from gambit.ui.window.main_window import MainWindow

LONG_TITLE = (
    "Rewrite the quarterly report's summary in plain English for the board, keeping every figure"
)
SIZES = {"main_window.png": (1280, 820), "main_window_1024.png": (1024, 700)}
HEADLINES = (
    "speedupValue", "tokensPerSecondValue", "baselineValue", "acceptanceValue", "gammaValue",
    "gammaReasonValue", "ttftValue", "p99Value",
)  # fmt: skip
CHARTS = ("tokensPerSecondChart", "gammaChart", "acceptanceChart")


def _snapshot(t: float) -> MetricsSnapshot:
    return MetricsSnapshot(
        n_tokens=int(40 * t), n_drafted=int(60 * t), n_accepted=int(40 * t), n_rounds=int(20 * t),
        acceptance_rate=0.67, acceptance_rate_rolling=0.72, mean_accepted=2.0,
        acceptance_by_position=(0.9, 0.74, 0.55, 0.38), gamma=4 if t < 2 else 3,
        gamma_reason="on: expected 1.38x", tokens_per_s=38.5, tokens_per_s_rolling=40.0 + t,
        baseline_tokens_per_s=28.0, speedup=1.38, ttft_ms=212.0, p50_ms=21.0, p95_ms=31.0,
        p99_ms=44.0, draft_time_share=0.2, elapsed_s=t,
    )  # fmt: skip


@pytest.fixture
def window(qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    monkeypatch.setenv("GAMBIT_HOME", str(tmp_path / "home"))
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    for title in ("Haiku about autumn", "Explain speculative decoding", LONG_TITLE):
        conv = store.create(title)
        store.add_message(conv, "user", f"{title}, please.")
    conv = store.create("List the primary colours")
    store.add_message(conv, "user", "List the primary colours, one per line, in **bold**.")
    reply = store.add_message(conv, "assistant", "", complete=False)
    stats = {
        "stop": "eos", "tokens": 14, "tokens_per_s": 38.5, "baseline_tokens_per_s": 28.0,
        "speedup": 1.38,
        "drafted_tokens": 12, "accepted_tokens": 8, "acceptance_rate": 0.67, "speculation": True,
        "drafted": [9, 12, 6],
    }  # fmt: skip
    store.update_message(reply, "- **Red**\n- **Yellow**\n- **Blue**", True, stats)
    w = MainWindow(SettingsStore(tmp_path / "settings.json"), store)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    w.stats.set_engine(
        EngineInfo(
            target_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            draft_name=None,
            drafter="lookup",
            drafter_label="prompt lookup",
            n_ctx=4096,
            load_seconds=1.2,
            backend=BackendInfo(
                gpu_offload=False, cpu_features=("AVX2",), system_info="CPU", threads=2
            ),
        )
    )
    w.stats.start_reply()
    for i in range(1, 9):
        before = w.stats.repaint_count
        w.stats.set_snapshot(_snapshot(i * 0.5))
        qtbot.waitUntil(lambda b=before: w.stats.repaint_count > b, timeout=2000)  # type: ignore[misc]
    yield w
    w.close()


def _inside(widget: QWidget, outer: QWidget) -> bool:
    """``widget`` is visible and lies wholly inside ``outer``'s rectangle."""
    top_left = widget.mapTo(outer, widget.rect().topLeft())
    bottom_right = widget.mapTo(outer, widget.rect().bottomRight())
    return (
        widget.isVisible()
        and outer.rect().contains(top_left)
        and outer.rect().contains(bottom_right)
    )


@pytest.mark.parametrize("name", list(SIZES))
def test_the_window_fits(qtbot: QtBot, window: MainWindow, tmp_path: Path, name: str) -> None:
    window.resize(*SIZES[name])
    qtbot.wait(150)
    QApplication.processEvents()

    # Sidebar: no sideways scrolling; the long title is elided and whole in its tooltip.
    sidebar = window.list
    assert not sidebar.horizontalScrollBar().isVisible()
    items = [sidebar.item(i) for i in range(sidebar.count())]
    long_item = next(item for item in items if item.text() == LONG_TITLE)
    assert sidebar.visualItemRect(long_item).right() <= sidebar.viewport().width()
    assert long_item.toolTip().startswith(LONG_TITLE)

    # Menus, toolbar and status bar: every entry shown, no overflow ("»") button.
    bar = window.menuBar()
    for action in bar.actions():
        assert bar.rect().contains(bar.actionGeometry(action)), action.text()
    toolbar = window.findChild(QToolBar, "mainToolbar")
    assert isinstance(toolbar, QToolBar)
    overflow = toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
    assert overflow is None or not overflow.isVisible()

    # The statistics panel's headline figures and its charts show without scrolling:
    # each wholly inside the panel's viewport, nothing clipped, no scroll bar needed.
    scroll = window.stats.findChild(QScrollArea, "statsScroll")
    assert isinstance(scroll, QScrollArea)
    viewport = scroll.viewport()
    assert scroll.verticalScrollBar().maximum() == 0
    shown: list[QWidget] = []
    for label_name in HEADLINES:
        label = window.stats.findChild(QLabel, label_name)
        assert label is not None, label_name
        shown.append(label)
    for chart_name in CHARTS:
        chart = window.stats.findChild(QChartView, chart_name)
        assert chart is not None, chart_name
        assert chart.height() >= 80, chart_name  # a chart, not a sliver
        shown.append(chart)
    for widget in shown:
        what = widget.objectName()
        assert _inside(widget, viewport) and _inside(widget, window), what
        # not clipped (a chart view is covered by its own viewport: ask that one)
        painted = widget.viewport() if isinstance(widget, QChartView) else widget
        assert painted.visibleRegion().boundingRect() == painted.rect(), what
    assert _inside(window.send_button, window) and _inside(window.input, window)

    shot = tmp_path / name
    assert window.grab().save(str(shot))
    assert shot.stat().st_size > 10_000
    out = os.environ.get("GAMBIT_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / name)
