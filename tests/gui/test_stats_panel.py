"""The statistics panel, with real widgets on the offscreen platform."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCharts import QBarCategoryAxis, QBarSeries, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QLabel, QScrollArea
from pytestqt.qtbot import QtBot

from gambit.engine.gamma.metrics import MetricsSnapshot
from gambit.engine.machine.backend import BackendInfo
from gambit.engine.machine.placement import TargetPlacement, WorkerShare
from gambit.qt.worker import EngineInfo
from gambit.ui import theme
from gambit.ui.stats.stats_panel import PLACEHOLDER, TOOLTIPS, StatsPanel, speedup_tone

COUNTERS = [
    "acceptedValue",
    "acceptanceValue",
    "acceptanceRollingValue",
    "gammaValue",
    "shapeValue",
    "sideGainValue",
    "gammaReasonValue",
    "tokensPerSecondValue",
    "baselineValue",
    "speedupValue",
    "ttftValue",
    "p50Value",
    "p99Value",
]

BASE = MetricsSnapshot(
    n_tokens=120,
    n_drafted=180,
    n_accepted=120,
    n_rounds=60,
    acceptance_rate=120 / 180,
    acceptance_rate_rolling=0.75,
    mean_accepted=2.0,
    acceptance_by_position=(0.9, 0.7, 0.5, 0.3),
    gamma=4,
    gamma_reason="on: expected 1.38x",
    tokens_per_s=41.3,
    tokens_per_s_rolling=39.0,
    baseline_tokens_per_s=29.1,
    speedup=1.42,
    ttft_ms=231.4,
    p50_ms=0.0,
    p95_ms=30.2,
    p99_ms=48.24,
    draft_time_share=0.2,
    elapsed_s=3.0,
)


def snap(**changes: Any) -> MetricsSnapshot:
    return dataclasses.replace(BASE, **changes)


BACKEND = BackendInfo(
    gpu_offload=False, cpu_features=("AVX2", "FMA"), system_info="CPU : AVX2 = 1", threads=2
)


def engine_info(**changes: Any) -> EngineInfo:
    info = EngineInfo(
        target_name="SmolLM2-135M-Instruct.F16.gguf",
        draft_name=None,
        drafter="layerskip",
        drafter_label="layer skip",
        n_ctx=4096,
        backend=BACKEND,
        load_seconds=1.5,
        drafter_detail="skips blocks 12, 15, 18 of 30 · tree, up to 8 nodes",
    )
    return dataclasses.replace(info, **changes)


@pytest.fixture
def panel(qtbot: QtBot) -> StatsPanel:
    widget = StatsPanel()
    qtbot.addWidget(widget)
    widget.resize(380, 1000)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def show(qtbot: QtBot, panel: StatsPanel, snapshot: MetricsSnapshot) -> None:
    """Hand over one snapshot and wait for the timer to paint it."""
    before = panel.repaint_count
    panel.set_snapshot(snapshot)
    qtbot.waitUntil(lambda: panel.repaint_count > before, timeout=2000)


def text(panel: StatsPanel, name: str) -> str:
    label = panel.findChild(QLabel, name)
    assert label is not None, name
    return label.text()


def line(panel: StatsPanel, chart: str, name: str) -> QLineSeries:
    view = panel.findChild(QChartView, chart)
    assert view is not None
    for series in view.chart().series():
        if series.name() == name:
            assert isinstance(series, QLineSeries)
            return series
    raise AssertionError(f"no series {name!r} in {chart}")


def bars(panel: StatsPanel) -> tuple[list[float], list[str]]:
    view = panel.findChild(QChartView, "acceptanceChart")
    assert view is not None
    (series,) = view.chart().series()
    assert isinstance(series, QBarSeries)
    (barset,) = series.barSets()
    axis = series.attachedAxes()[0]
    assert isinstance(axis, QBarCategoryAxis)
    return [barset.at(i) for i in range(barset.count())], list(axis.categories())


def test_dock_basics(panel: StatsPanel) -> None:
    assert panel.objectName() == "statsPanel"
    assert panel.windowTitle() == "Speculation"
    assert isinstance(panel.widget(), QScrollArea)
    assert panel.repaint_count == 0
    for name in COUNTERS:
        assert text(panel, name) == PLACEHOLDER
    assert line(panel, "tokensPerSecondChart", "tokens/s").count() == 0


def test_every_counter_explains_itself(panel: StatsPanel) -> None:
    for name in COUNTERS:
        label = panel.findChild(QLabel, name)
        assert label is not None
        assert label.toolTip() == TOOLTIPS[name]
        assert label.toolTip().endswith(".")
    for chart in ("tokensPerSecondChart", "gammaChart", "acceptanceChart"):
        view = panel.findChild(QChartView, chart)
        assert view is not None and view.toolTip()


def test_counters_show_the_snapshot_formatted(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, BASE)
    assert panel.snapshot is BASE
    assert text(panel, "speedupValue") == "1.42×"
    assert text(panel, "acceptedValue") == "120 / 180"
    assert text(panel, "acceptanceValue") == "67%"
    assert text(panel, "acceptanceRollingValue") == "75%"
    assert text(panel, "gammaValue") == "4"
    assert text(panel, "gammaReasonValue") == "on: expected 1.38x"
    assert text(panel, "tokensPerSecondValue") == "41.3 tok/s"
    assert text(panel, "baselineValue") == "29.1 tok/s"
    assert text(panel, "ttftValue") == "231 ms"
    assert text(panel, "p50Value") == "0.0 ms"
    assert text(panel, "p99Value") == "48.2 ms"


def test_speculation_off_shows_no_acceptance(qtbot: QtBot, panel: StatsPanel) -> None:
    show(
        qtbot,
        panel,
        snap(
            n_drafted=0,
            n_accepted=0,
            acceptance_rate=0.0,
            acceptance_rate_rolling=None,
            acceptance_by_position=(),
            gamma=0,
            gamma_reason="off: expected 0.82x",
            tokens_per_s=128.4,
            baseline_tokens_per_s=130.0,
            speedup=None,
        ),
    )
    assert text(panel, "acceptedValue") == "0 / 0"
    assert text(panel, "acceptanceValue") == PLACEHOLDER
    assert text(panel, "acceptanceRollingValue") == PLACEHOLDER
    assert text(panel, "gammaValue") == "0"
    assert text(panel, "gammaReasonValue") == "off: expected 0.82x"
    assert text(panel, "tokensPerSecondValue") == "128.4 tok/s"
    # No drafting, no bet: no speedup claimed, and no colour.
    assert text(panel, "speedupValue") == PLACEHOLDER
    label = panel.findChild(QLabel, "speedupValue")
    assert label is not None and label.property("tone") == "neutral"
    assert bars(panel) == ([], ["1"])


def test_unknown_baseline_shows_no_speedup(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, snap(baseline_tokens_per_s=0.0, speedup=None))
    assert text(panel, "baselineValue") == PLACEHOLDER
    assert text(panel, "speedupValue") == PLACEHOLDER
    label = panel.findChild(QLabel, "speedupValue")
    assert label is not None and label.property("tone") == "neutral"
    assert line(panel, "tokensPerSecondChart", "baseline").count() == 0
    assert line(panel, "tokensPerSecondChart", "tokens/s").count() == 1


def test_threads_in_use_and_a_withheld_speedup_are_said_in_words(
    qtbot: QtBot, panel: StatsPanel
) -> None:
    why = "the load changed during this reply (threads 2 → 1): plain decoding was not timed"
    in_use = "1 of 2 threads (automatic: other programs use 1.0 of 2 cores)"
    show(qtbot, panel, snap(
        threads=in_use, speedup=None, baseline_tokens_per_s=0.0, speedup_withheld=why
    ))  # fmt: skip
    threads, note = (panel.findChild(QLabel, n) for n in ("threadsValue", "busyValue"))
    assert threads is not None and note is not None
    assert threads.isVisible() and note.isVisible()
    assert threads.text() == f"Threads: {in_use}"
    assert note.text() == f"No speedup shown: {why}."
    assert text(panel, "speedupValue") == PLACEHOLDER
    assert line(panel, "tokensPerSecondChart", "baseline").count() == 0
    show(qtbot, panel, snap(threads="2 threads (as set)"))
    assert not note.isVisible() and threads.text() == "Threads: 2 threads (as set)"


@pytest.mark.parametrize(
    ("speedup", "tone"),
    [(1.42, "good"), (1.05, "good"), (1.049, "warn"), (0.97, "warn"), (0.969, "bad"), (0.5, "bad")],
)
def test_speedup_colour(qtbot: QtBot, panel: StatsPanel, speedup: float, tone: str) -> None:
    assert speedup_tone(speedup) == tone
    show(qtbot, panel, snap(speedup=speedup))
    label = panel.findChild(QLabel, "speedupValue")
    assert label is not None
    assert label.property("tone") == tone
    expected = theme.tone_colour(speedup_tone(speedup), panel.palette())
    assert label.palette().color(QPalette.ColorRole.WindowText) == expected


def test_speedup_colour_follows_a_dark_palette(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, snap(speedup=1.42))
    dark = QPalette(panel.palette())
    for role, colour in [
        (QPalette.ColorRole.Window, "#1e1e1e"),
        (QPalette.ColorRole.Base, "#181818"),
        (QPalette.ColorRole.WindowText, "#e6e6e6"),
        (QPalette.ColorRole.Text, "#e6e6e6"),
    ]:
        dark.setColor(role, QColor(colour))
    panel.setPalette(dark)
    label = panel.findChild(QLabel, "speedupValue")
    assert label is not None
    assert label.palette().color(QPalette.ColorRole.WindowText) == QColor(theme.GOOD[1])


def test_series_grow_with_each_repaint(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, snap(elapsed_s=1.0, gamma=4))
    show(qtbot, panel, snap(elapsed_s=1.5, gamma=4))
    show(qtbot, panel, snap(elapsed_s=2.0, gamma=2, acceptance_by_position=(0.8, 0.6, 0.4)))
    show(qtbot, panel, snap(elapsed_s=2.5, gamma=2, acceptance_by_position=(0.8, 0.6, 0.4)))
    assert line(panel, "tokensPerSecondChart", "tokens/s").count() == 4
    assert line(panel, "tokensPerSecondChart", "baseline").count() == 4
    # Step-like: a vertical jump where γ changed, flat runs drawn as one segment.
    gamma = line(panel, "gammaChart", "γ")
    assert [(p.x(), p.y()) for p in gamma.points()] == [
        (1.0, 4.0),
        (2.0, 4.0),
        (2.0, 2.0),
        (2.5, 2.0),
    ]
    assert bars(panel) == ([80.0, 60.0, 40.0], ["1", "2", "3"])


def test_same_moment_updates_the_last_point(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, snap(elapsed_s=1.0, tokens_per_s_rolling=10.0))
    show(qtbot, panel, snap(elapsed_s=1.0, tokens_per_s_rolling=12.0))
    points = line(panel, "tokensPerSecondChart", "tokens/s").points()
    assert [(p.x(), p.y()) for p in points] == [(1.0, 12.0)]


def test_a_burst_of_snapshots_repaints_a_bounded_number_of_times(
    qtbot: QtBot, panel: StatsPanel
) -> None:
    before = panel.repaint_count
    for i in range(1000):
        rate = float(i)
        panel.set_snapshot(
            snap(
                n_tokens=i + 1,
                elapsed_s=0.01 * (i + 1),
                tokens_per_s=rate,
                tokens_per_s_rolling=rate,
            )
        )
    assert panel.repaint_count == before  # nothing painted per call
    qtbot.waitUntil(lambda: panel.repaint_count > before, timeout=2000)
    qtbot.wait(250)  # a later tick must not repaint again: nothing new arrived
    assert panel.repaint_count - before == 1
    assert text(panel, "tokensPerSecondValue") == "999.0 tok/s"
    assert line(panel, "tokensPerSecondChart", "tokens/s").count() == 1


def test_charts_keep_the_last_200_points(qtbot: QtBot, panel: StatsPanel) -> None:
    for i in range(250):
        panel.set_snapshot(snap(elapsed_s=float(i), gamma=4))
        panel._on_repaint_timer()  # the timer's slot, called at once rather than waited for
    series = line(panel, "tokensPerSecondChart", "tokens/s")
    assert series.count() == 200
    assert series.at(0).x() == 50.0
    assert series.at(199).x() == 249.0
    assert panel.repaint_count == 250


def test_axes_follow_the_data(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, snap(elapsed_s=2.0, tokens_per_s_rolling=40.0, baseline_tokens_per_s=30.0))
    show(qtbot, panel, snap(elapsed_s=12.0, tokens_per_s_rolling=80.0, baseline_tokens_per_s=30.0))
    series = line(panel, "tokensPerSecondChart", "tokens/s")
    axes = {axis.orientation(): axis for axis in series.attachedAxes()}
    x_axis, y_axis = axes[Qt.Orientation.Horizontal], axes[Qt.Orientation.Vertical]
    assert isinstance(x_axis, QValueAxis) and isinstance(y_axis, QValueAxis)
    assert (x_axis.min(), x_axis.max()) == (2.0, 12.0)
    assert y_axis.min() == 0.0
    assert 80.0 < y_axis.max() <= 120.0


def test_start_reply_clears_series_and_counters(qtbot: QtBot, panel: StatsPanel) -> None:
    show(qtbot, panel, snap(elapsed_s=1.0))
    show(qtbot, panel, snap(elapsed_s=2.0, gamma=3))
    panel.start_reply()
    for chart, name in [
        ("tokensPerSecondChart", "tokens/s"),
        ("tokensPerSecondChart", "baseline"),
        ("gammaChart", "γ"),
    ]:
        assert line(panel, chart, name).count() == 0
    assert bars(panel)[0] == []
    for name in COUNTERS:
        assert text(panel, name) == PLACEHOLDER
    assert panel.snapshot is None
    # The next reply starts from scratch.
    show(qtbot, panel, snap(elapsed_s=0.5))
    assert line(panel, "tokensPerSecondChart", "tokens/s").count() == 1


def test_a_new_reply_without_start_reply_restarts_the_charts(
    qtbot: QtBot, panel: StatsPanel
) -> None:
    show(qtbot, panel, snap(elapsed_s=5.0))
    show(qtbot, panel, snap(elapsed_s=6.0))
    show(qtbot, panel, snap(elapsed_s=0.4))  # time went backwards
    assert line(panel, "tokensPerSecondChart", "tokens/s").count() == 1


def test_backend_line(panel: StatsPanel) -> None:
    label = panel.findChild(QLabel, "backendValue")
    assert label is not None
    assert not label.isVisible()
    panel.set_backend("CPU · 2 threads · AVX2")
    assert label.text() == "CPU · 2 threads · AVX2"
    assert label.isVisible()
    panel.set_backend("")
    assert not label.isVisible()


def visible(panel: StatsPanel, name: str) -> bool:
    label = panel.findChild(QLabel, name)
    assert label is not None, name
    return label.isVisible()


def test_tree_shape_shows_only_for_trees(qtbot: QtBot, panel: StatsPanel) -> None:
    assert not visible(panel, "shapeValue")
    show(qtbot, panel, snap(tree=True, gamma=4, side_nodes=2, n_side=40, side_gain=3))
    assert visible(panel, "shapeValue") and visible(panel, "sideGainValue")
    assert text(panel, "shapeValue") == "γ 4 + 2 side nodes"
    assert text(panel, "sideGainValue") == "3 / 40"
    assert text(panel, "gammaValue") == "4"  # the main chain, as the γ chart plots it
    show(qtbot, panel, snap(tree=True, gamma=3, side_nodes=1, elapsed_s=3.5))
    assert text(panel, "shapeValue") == "γ 3 + 1 side node"
    show(qtbot, panel, snap(tree=True, gamma=5, side_nodes=0, elapsed_s=4.0))
    assert text(panel, "shapeValue") == "γ 5, a plain chain"  # the controller kept it narrow
    show(qtbot, panel, snap(tree=True, gamma=0, side_nodes=0, elapsed_s=4.5))
    assert text(panel, "shapeValue") == "off"
    show(qtbot, panel, snap(tree=False, gamma=4, side_nodes=0, elapsed_s=5.0))
    assert not visible(panel, "shapeValue")  # a chain drafter: no tree to describe
    assert not visible(panel, "sideGainValue")
    show(qtbot, panel, snap(tree=True, elapsed_s=5.5))
    panel.start_reply()
    assert not visible(panel, "shapeValue")


def test_acceptance_is_by_depth(panel: StatsPanel) -> None:
    captions = [label.text() for label in panel.findChildren(QLabel)]
    assert "Acceptance by depth, of the rounds that reached it" in captions
    assert not any("position" in c for c in captions)
    view = panel.findChild(QChartView, "acceptanceChart")
    assert view is not None and "depth d" in view.toolTip()


def test_a_depth_reached_where_nothing_landed_reads_zero(qtbot: QtBot, panel: StatsPanel) -> None:
    # Depth 1 landed in every round that reached it, depth 2 in none: a bar of
    # no height draws no label, so its depth says "0%" (it was blank).
    show(qtbot, panel, snap(acceptance_by_position=(1.0, 0.0, 0.5)))
    assert bars(panel) == ([100.0, 0.0, 50.0], ["1", "2: 0%", "3"])
    show(qtbot, panel, snap(acceptance_by_position=(1.0, 0.25, 0.5)))
    assert bars(panel) == ([100.0, 25.0, 50.0], ["1", "2", "3"])
    captions = [label.text() for label in panel.findChildren(QLabel)]
    assert "Acceptance by depth, of the rounds that reached it" in captions


def test_engine_line_shows_the_drafter_shape(panel: StatsPanel) -> None:
    assert not visible(panel, "drafterValue")
    panel.set_engine(engine_info())
    assert visible(panel, "drafterValue") and visible(panel, "backendValue")
    assert text(panel, "drafterValue") == (
        "Drafter: layer skip · skips blocks 12, 15, 18 of 30 · tree, up to 8 nodes"
    )
    assert text(panel, "backendValue") == BACKEND.summary

    panel.set_engine(engine_info(drafter="lookup", drafter_label="prompt lookup",
                                 drafter_detail="tree, up to 6 nodes"))  # fmt: skip
    assert text(panel, "drafterValue") == "Drafter: prompt lookup · tree, up to 6 nodes"

    panel.set_engine(engine_info(drafter="none", drafter_label=None, drafter_detail=None))
    assert not visible(panel, "drafterValue")  # nothing drafts
    assert visible(panel, "backendValue")
    panel.set_engine(None)  # loading failed
    assert not visible(panel, "drafterValue") and not visible(panel, "backendValue")


def test_engine_line_shows_the_chosen_kernels(panel: StatsPanel) -> None:
    assert not visible(panel, "kernelsValue")
    line = "plain weights, Q8_0 KV cache, batch-invariant: greedy output as plain decoding"
    panel.set_engine(engine_info(kernels=line))
    assert text(panel, "kernelsValue") == f"Kernels: {line}"
    panel.set_engine(None)  # a failed load leaves no stale verdict behind
    assert not visible(panel, "kernelsValue")


def test_target_line_shows_a_split_target_only(panel: StatsPanel) -> None:
    panel.set_engine(engine_info())  # a target on this machine: nothing to say
    assert not visible(panel, "targetValue")
    share = WorkerShare("10.0.0.2:50052", 15, 8 * 1024**3, 0.0004)
    costs = "Target pass: t(1) 20.0 ms · t(5)/t(1) 1.25"
    panel.set_engine(engine_info(placement=TargetPlacement(16, (share,)), target_costs=costs))
    assert visible(panel, "targetValue")
    assert text(panel, "targetValue") == (
        "Target: 16 layers here · 15 on 10.0.0.2:50052 (rtt 0.40 ms) · network ≥ 0.40 ms"
        f" per pass\n{costs}"
    )
    panel.set_engine(None)
    assert not visible(panel, "targetValue")


def test_screenshot(qtbot: QtBot, panel: StatsPanel, tmp_path: Path) -> None:
    panel.set_engine(engine_info())
    for i in range(1, 41):
        gamma = 0 if 20 <= i < 30 else 4  # off for a while, then back on
        show_now = snap(
            elapsed_s=0.25 * i,
            tokens_per_s_rolling=30.0 + 12.0 * (i % 5) / 4 + (10.0 if gamma else -3.0),
            gamma=gamma,
            gamma_reason="on: expected 1.38x with 2 side nodes" if gamma else "off: expected 0.82x",
            tree=True,
            side_nodes=2 if gamma else 0,
            n_side=2 * min(i, 20) + 2 * max(0, i - 29),
            side_gain=min(i, 20) // 4,
        )
        panel.set_snapshot(show_now)
        panel._on_repaint_timer()
    path = tmp_path / "stats_panel.png"
    assert panel.grab().save(str(path))
    assert path.stat().st_size > 0
    out = os.environ.get("GAMBIT_SCREENSHOT_DIR")
    if out:  # for docs/; the test itself writes only under tmp_path
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)
    image = QImage(str(path))
    assert not image.isNull()
    assert image.width() >= 300 and image.height() >= 500
    assert panel.width() >= 300 and panel.height() >= 500


def test_time_axes_are_in_seconds(qtbot: QtBot, panel: StatsPanel) -> None:
    def time_axis(chart: str) -> QValueAxis:
        view = panel.findChild(QChartView, chart)
        assert view is not None
        (axis,) = view.chart().axes(Qt.Orientation.Horizontal)
        assert isinstance(axis, QValueAxis)
        return axis

    for chart in ("tokensPerSecondChart", "gammaChart"):
        assert time_axis(chart).labelFormat().endswith(" s")  # before any reply too
    show(qtbot, panel, snap(elapsed_s=1.0, gamma=4))
    show(qtbot, panel, snap(elapsed_s=7.5, gamma=4))
    for chart in ("tokensPerSecondChart", "gammaChart"):
        assert time_axis(chart).labelFormat().endswith(" s")


def test_a_figure_timed_on_a_busy_machine_says_so(qtbot: QtBot, panel: StatsPanel) -> None:
    assert not visible(panel, "busyValue")
    show(qtbot, panel, snap(busy="other programs used 1.0 of 2 cores"))
    assert visible(panel, "busyValue")
    assert text(panel, "busyValue") == (
        "Timed while the machine was busy: other programs used 1.0 of 2 cores; "
        "the figures may be off."
    )
    show(qtbot, panel, snap())  # the next reply ran on a quiet machine
    assert not visible(panel, "busyValue")


def test_the_backend_line_names_the_gpus_or_says_there_is_none() -> None:
    cpu = BackendInfo(False, ("AVX2",), "CPU : AVX2 = 1", 2)
    assert cpu.summary == "CPU only (no GPU found) · 2 threads · AVX2"
    gpu = BackendInfo(True, ("AVX2",), "", 16, devices=("CUDA0 (NVIDIA H200)",))
    assert gpu.summary.startswith("GPU: CUDA0 (NVIDIA H200) · 16 threads")
