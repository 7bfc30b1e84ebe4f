"""The statistics panel's chart pieces: compact chart cards and their axes' arithmetic.

``StatsPanel`` (stats_panel.py) draws three charts: tokens/s and γ against the
reply's elapsed seconds, and acceptance by draft depth. This module holds what
those charts are made of: the card that frames each one, the samples the time
charts plot, γ's step line, and the "nice" tick steps their axes use.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from PySide6.QtCharts import (
    QAbstractBarSeries,
    QBarCategoryAxis,
    QBarSeries,
    QBarSet,
    QChart,
    QChartView,
    QValueAxis,
)
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QBrush, QFont, QPainter, QPalette, QPen, QResizeEvent
from PySide6.QtWidgets import QFrame, QSizePolicy

from gambit.engine.gamma.metrics import MetricsSnapshot, MetricsTracker
from gambit.ui import theme

# Charts share the height the figures leave, between these bounds: at 1024×700 the
# figures and all three charts fit the dock without scrolling.
CHART_MIN_HEIGHT: Final = 84
CHART_MAX_HEIGHT: Final = 190

_WINDOW = MetricsTracker.WINDOW

CHART_TOOLTIPS: Final[dict[str, str]] = {
    "tokensPerSecondChart": (
        f"Tokens/s over the last {_WINDOW} rounds, against the reply's elapsed seconds; "
        "dashed: baseline."
    ),
    "gammaChart": "The controller's γ over the reply's elapsed seconds (0: speculation off).",
    "acceptanceChart": (
        "α_d: of the rounds in this reply that reached depth d (every draft token before "
        "it accepted), the share in which a draft token at depth d was accepted: the main "
        "chain's or, in a tree, a side node's."
    ),
}


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k that is at least ``raw`` (> 0)."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * magnitude >= raw * (1 - 1e-9):
            return m * magnitude
    return 10.0 * magnitude  # pragma: no cover - the loop always returns


def _decimals(step: float) -> int:
    """Decimals needed to print multiples of ``step`` exactly."""
    for d in range(4):
        if abs(step * 10**d - round(step * 10**d)) < 1e-6:
            return d
    return 3


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of the time charts: tokens/s (the last rounds') and γ at ``t``."""

    t: float
    tokens_per_s: float
    baseline: float
    gamma: int


def sample_of(snapshot: MetricsSnapshot) -> Sample:
    return Sample(
        snapshot.elapsed_s,
        snapshot.tokens_per_s_rolling,
        snapshot.baseline_tokens_per_s,
        snapshot.gamma,
    )


LABEL_PITCH: Final = 18  # px of plot height per value-axis label: fewer ticks when short


class ChartView(QChartView):
    """A chart view that says when its height changes (its axes then pick their ticks)."""

    def __init__(self, chart: QChart) -> None:
        super().__init__(chart)
        self.on_resized: Callable[[], None] | None = None

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.on_resized is not None and event.size().height() != event.oldSize().height():
            self.on_resized()


class ChartCard:
    """A compact chart on a rounded card: antialiased, no animation, small fonts."""

    def __init__(self, object_name: str, font: QFont) -> None:
        self.chart = QChart()
        self.chart.setMargins(QMargins(2, 6, 8, 2))
        self.chart.setBackgroundRoundness(6)
        self.chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)
        self.chart.legend().setVisible(False)
        layout = self.chart.layout()
        if layout is not None:
            layout.setContentsMargins(0, 0, 0, 0)
        self.font = font
        self.view = ChartView(self.chart)
        self.view.setObjectName(object_name)
        self.view.setToolTip(CHART_TOOLTIPS[object_name])
        self.view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.view.setFrameShape(QFrame.Shape.NoFrame)
        self.view.setMinimumSize(220, CHART_MIN_HEIGHT)
        self.view.setMaximumHeight(CHART_MAX_HEIGHT)
        self.view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.view.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def max_ticks(self) -> int:
        """How many value labels the plot's height has room for (at least 2)."""
        plot = self.view.height() - 36  # the time axis' labels and the card's margins
        return max(2, plot // LABEL_PITCH)

    def value_axis(self, alignment: Qt.AlignmentFlag) -> QValueAxis:
        axis = QValueAxis()
        axis.setTickType(QValueAxis.TickType.TicksDynamic)
        axis.setTickAnchor(0.0)
        axis.setMinorTickCount(0)
        axis.setLabelsFont(self.font)
        self.chart.addAxis(axis, alignment)
        return axis

    def apply_palette(self, palette: QPalette) -> None:
        base = palette.color(QPalette.ColorRole.Base)
        self.view.setBackgroundBrush(QBrush(palette.color(QPalette.ColorRole.Window)))
        self.chart.setBackgroundBrush(QBrush(base))
        self.chart.setBackgroundPen(QPen(theme.faint(palette), 1))
        self.chart.setPlotAreaBackgroundVisible(False)
        label = theme.muted(palette)
        grid = theme.faint(palette)
        for axis in self.chart.axes():
            axis.setLabelsColor(label)
            axis.setGridLineColor(grid)
            axis.setLinePenColor(grid)
        self.chart.legend().setLabelColor(palette.color(QPalette.ColorRole.Text))


class DepthChart(ChartCard):
    """Acceptance by draft depth: a bar per depth, its percentage above it."""

    def __init__(self, font: QFont) -> None:
        super().__init__("acceptanceChart", font)
        self.bars = QBarSet("acceptance")
        self.bars.setLabelFont(font)
        series = QBarSeries()
        series.append(self.bars)
        series.setBarWidth(0.6)
        series.setLabelsVisible(True)
        series.setLabelsFormat("@value%")
        series.setLabelsPosition(QAbstractBarSeries.LabelsPosition.LabelsOutsideEnd)
        self.chart.addSeries(series)
        self.depths = QBarCategoryAxis()
        self.depths.setLabelsFont(font)
        self.depths.setGridLineVisible(False)
        self.chart.addAxis(self.depths, Qt.AlignmentFlag.AlignBottom)
        series.attachAxis(self.depths)
        self.percent = self.value_axis(Qt.AlignmentFlag.AlignLeft)
        set_range(self.percent, 0.0, 120.0, 25.0)  # (room for a label above 100 %; no tick there)
        self.percent.setLabelFormat("%d%%")
        series.attachAxis(self.percent)
        self.show(())

    def show(self, alphas: tuple[float, ...]) -> None:
        """Show α_d for d = 1.. (nothing: one empty depth)."""
        values = [float(round(a * 100)) for a in alphas]
        if self.bars.count() != len(values):
            self.bars.remove(0, self.bars.count())
            self.bars.append(values)
        else:
            for i, x in enumerate(values):
                if self.bars.at(i) != x:
                    self.bars.replace(i, x)
        # A bar of no height draws no label: a depth reached where none landed
        # says so under it.
        categories = [str(d) if x else f"{d}: 0%" for d, x in enumerate(values, 1)] or ["1"]
        if self.depths.categories() != categories:
            self.depths.setCategories(categories)

    def fit_ticks(self) -> None:
        """Percent labels every 25 where the plot is tall enough, else every 50."""
        self.percent.setTickInterval(25.0 if self.max_ticks() >= 5 else 50.0)

    def apply_palette(self, palette: QPalette) -> None:
        super().apply_palette(palette)
        teal = theme.pick(theme.TEAL, palette)
        self.bars.setColor(teal)
        self.bars.setBorderColor(teal)
        self.bars.setLabelColor(palette.color(QPalette.ColorRole.WindowText))


def gamma_steps(samples: deque[Sample]) -> list[QPointF]:
    """γ as a step line: the start, a vertical jump at each change, and the end."""
    points: list[QPointF] = []
    previous: int | None = None
    for s in samples:
        if previous is None:
            points.append(QPointF(s.t, s.gamma))
        elif s.gamma != previous:
            points.append(QPointF(s.t, previous))  # the old γ held until now
            points.append(QPointF(s.t, s.gamma))
        previous = s.gamma
    if samples and points[-1].x() != samples[-1].t:
        points.append(QPointF(samples[-1].t, samples[-1].gamma))
    return points


TIME_UNIT = " s"  # on the time axes' labels: seconds since the reply started


def set_range(axis: QValueAxis, low: float, high: float, step: float, unit: str = "") -> None:
    axis.setRange(low, high)
    axis.setTickInterval(step)
    axis.setLabelFormat(f"%.{_decimals(step)}f{unit}")
