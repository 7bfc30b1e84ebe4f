"""The results of a measurement on the user's chats, to look at rather than read:
the recommendation with its reason and an Apply button, this machine's regime
in a sentence, a bar chart of speedup per configuration, a scatter of
acceptance against speedup per conversation, and the figures in a table.

It only shows a report (``gambit.measure``); what Apply does is the dialog's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PySide6.QtCharts import (
    QBarCategoryAxis,
    QBarSet,
    QChart,
    QChartView,
    QHorizontalStackedBarSeries,
    QLineSeries,
    QScatterSeries,
    QValueAxis,
)
from PySide6.QtCore import QMargins, QPointF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPalette, QPen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from gambit.bench import PAYS_FROM, TARGET_ONLY
from gambit.engine.drafters.registry import DRAFTERS, DRAFTING
from gambit.engine.gamma.metrics import format_sources, format_speedup
from gambit.ui import theme
from gambit.words import counted

# Colours of the configurations in the scatter, in the report's order.
SERIES_COLOURS = (theme.ACCENT, theme.VIOLET, theme.TEAL, theme.WARN, theme.GOOD, theme.BAD)
TABLE_COLUMNS = (
    "Configuration", "Speedup", "Acceptance", "Tokens / pass",
    "p50 ms", "p99 ms", "First token ms", "Differed",
)  # fmt: skip


_W = TypeVar("_W", bound=QWidget)


def _named(widget: _W, name: str) -> _W:
    widget.setObjectName(name)
    return widget


SHORT_DRAFTERS = {kind: DRAFTERS[kind].tag for kind in DRAFTING}  # column names


def short_label(mode: dict[str, Any]) -> str:
    """A configuration in a few characters, for axes and legends: "lookup, γ=4"."""
    if mode["name"] == TARGET_ONLY:
        return "plain decoding"
    drafter = SHORT_DRAFTERS.get(mode["drafter"], mode["drafter"]) + (
        " tree" if mode["tree"] else ""
    )
    if mode.get("draft"):  # a candidate draft: its file's name
        drafter = Path(mode["draft"]).stem
    gamma = mode["gamma"]
    return f"{drafter}, {'adaptive' if gamma is None else f'γ={gamma}'}"


def _tone(speedup: float) -> theme.Tone:
    return "good" if speedup >= PAYS_FROM else ("bad" if speedup < 1.0 else "warn")


class _Chart(QChartView):
    """A chart on a card, antialiased, coloured from the widget's palette."""

    def __init__(self, name: str, title: str) -> None:
        self.chart_ = QChart()
        super().__init__(self.chart_)
        self.setObjectName(name)
        self.chart_.setTitle(title)
        self.chart_.setAnimationOptions(QChart.AnimationOption.NoAnimation)
        self.chart_.setMargins(QMargins(4, 4, 8, 4))
        self.chart_.setBackgroundRoundness(6)
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setMinimumHeight(230)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def reset(self) -> QChart:
        chart = self.chart_
        chart.removeAllSeries()
        for axis in chart.axes():
            chart.removeAxis(axis)
        return chart

    def apply_palette(self, palette: QPalette) -> None:
        chart = self.chart_
        self.setBackgroundBrush(QBrush(palette.color(QPalette.ColorRole.Window)))
        chart.setBackgroundBrush(QBrush(palette.color(QPalette.ColorRole.Base)))
        chart.setBackgroundPen(QPen(theme.faint(palette), 1))
        chart.setTitleBrush(QBrush(palette.color(QPalette.ColorRole.Text)))
        font = QFont(self.font())
        font.setBold(True)
        chart.setTitleFont(font)
        for axis in chart.axes():
            axis.setLabelsColor(theme.muted(palette))
            axis.setTitleBrush(QBrush(theme.muted(palette)))
            axis.setGridLineColor(theme.faint(palette))
            axis.setLinePenColor(theme.faint(palette))
        legend = chart.legend()
        legend.setLabelColor(palette.color(QPalette.ColorRole.Text))
        legend.setAlignment(Qt.AlignmentFlag.AlignBottom)
        small = QFont(self.font())
        small.setPointSizeF(max(small.pointSizeF() * 0.88, 7.0))
        legend.setFont(small)
        for axis in chart.axes():
            axis.setLabelsFont(small)


def _plain_line(x0: float, y0: float, x1: float, y1: float, palette: QPalette) -> QLineSeries:
    """The dashed 1.00x line: plain decoding, what every bar is measured against."""
    line = QLineSeries()
    line.setName("plain decoding (1.00x)")
    line.append(QPointF(x0, y0))
    line.append(QPointF(x1, y1))
    pen = QPen(theme.muted(palette), 1.5, Qt.PenStyle.DashLine)
    line.setPen(pen)
    return line


class MeasureResults(QWidget):
    """Shows one report; ``apply_requested`` when the user applies its recommendation."""

    apply_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("measureResults")
        self.report: dict[str, Any] | None = None
        self._steps: list[Callable[[dict[str, Any], QPalette], None]] = []
        self._points: dict[int, list[str]] = {}  # scatter series index -> titles of its points
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(10)

        self.placeholder = theme.muted_label(
            "Results appear here: which drafter and policy pay on your own chats, "
            "measured on this machine against plain decoding."
        )
        self.placeholder.setObjectName("resultsPlaceholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        col.addWidget(self.placeholder, 1)

        self.body = QWidget()
        body = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(10)
        self.card = _named(QFrame(), "recommendationCard")
        self.card.setFrameShape(QFrame.Shape.StyledPanel)
        card = QHBoxLayout(self.card)
        card.setContentsMargins(14, 10, 14, 10)
        words = QVBoxLayout()
        self.headline = _named(QLabel(), "recommendationHeadline")
        font = self.headline.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        font.setBold(True)
        self.headline.setFont(font)
        self.reason = _named(QLabel(), "recommendationReason")
        self.reason.setWordWrap(True)
        self.source = theme.muted_label()
        self.source.setObjectName("resultsSource")
        words.addWidget(self.headline)
        words.addWidget(self.reason)
        words.addWidget(self.source)
        self.can_apply = False  # a recommendation is shown, and it has something to apply
        self.apply_button = _named(QPushButton("Apply"), "applyButton")
        self.apply_button.setToolTip("Use this drafter and policy from now on (saved in Settings)")
        self.apply_button.clicked.connect(self.apply_requested)
        card.addLayout(words, 1)
        card.addWidget(self.apply_button, 0, Qt.AlignmentFlag.AlignVCenter)
        body.addWidget(self.card)

        self.regime = _named(QLabel(), "regimeLabel")
        self.regime.setWordWrap(True)
        self.regime.setContentsMargins(4, 0, 4, 0)
        body.addWidget(self.regime)

        charts = QHBoxLayout()
        charts.setSpacing(10)
        self.bars = _Chart("speedupChart", "Speedup over plain decoding, all your turns")
        self.bars.setToolTip(
            f"Green pays (at least {PAYS_FROM:.2f}x), amber gains less than "
            f"{PAYS_FROM - 1:.0%}, red is slower than plain decoding (grey, 1.00x); "
            "pale: no draft of it was accepted, so it claims no speedup (—)"
        )
        self.scatter = _Chart("scatterChart", "Each conversation: acceptance vs speedup")
        charts.addWidget(self.bars, 1)
        charts.addWidget(self.scatter, 1)
        body.addLayout(charts, 1)

        self.table = _named(QTableWidget(0, len(TABLE_COLUMNS)), "resultsTable")
        self.table.setHorizontalHeaderLabels(TABLE_COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setAlternatingRowColors(True)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        body.addWidget(self.table, 0)
        col.addWidget(self.body, 1)
        self.body.hide()

    # ------------------------------------------------------------------ showing
    def show_report(self, report: dict[str, Any] | None) -> None:
        self.report = report
        self._steps = []
        self.placeholder.setVisible(report is None)
        self.body.setVisible(report is not None)
        if report is None:
            return
        palette = self.palette()
        rec = report["recommendation"]
        self.headline.setText(rec["headline"])
        colour = theme.tone_colour("neutral" if rec["off"] else "good", palette)
        self.headline.setStyleSheet(f"color: {colour.name()};")
        edge = theme.faint(palette) if rec["off"] else colour
        self.card.setStyleSheet(
            f"QFrame#recommendationCard {{ border: 1px solid {edge.name()}; border-radius: 6px;"
            f" background: {palette.color(QPalette.ColorRole.Base).name()}; }}"
        )
        self.reason.setText(rec["reason"][:1].upper() + rec["reason"][1:] + ".")
        self.apply_button.setText("Switch speculation off" if rec["off"] else "Apply")
        self.can_apply = rec.get("apply", True) is not False  # thin evidence: nothing to apply
        self.apply_button.setEnabled(self.can_apply)
        self.source.setText(_source_line(report))
        self.regime.setText(report["regime"]["sentence"])
        self._fill_table(report, palette)
        # The charts are built one per turn of the event loop, so that showing
        # a result never holds the window for the sum of them (tens of ms).
        self._steps = [self._fill_bars, self._fill_scatter]
        QTimer.singleShot(0, self._next_step)

    @property
    def filled(self) -> bool:
        """Whether everything of the shown report is drawn (charts included)."""
        return not self._steps

    @Slot()
    def _next_step(self) -> None:
        if self._steps and self.report is not None:
            self._steps.pop(0)(self.report, self.palette())
            if self._steps:
                QTimer.singleShot(0, self._next_step)

    def _fill_bars(self, report: dict[str, Any], palette: QPalette) -> None:
        chart = self.bars.reset()
        figures = report["suites"]["ALL"]
        modes = [m for m in report["modes"] if m["name"] in figures]
        tones = {
            "plain": ("plain", theme.muted(palette)),
            "idle": (
                "never drafted",
                theme.blend(theme.muted(palette), palette.color(QPalette.ColorRole.Base), 0.45),
            ),
            "good": (f"pays ≥ {PAYS_FROM:.2f}x", theme.pick(theme.GOOD, palette)),
            # (the legend reads rich text: no "<" in its labels)
            "warn": (f"gain under {PAYS_FROM - 1:.0%}", theme.pick(theme.WARN, palette)),
            "bad": ("slower", theme.pick(theme.BAD, palette)),
        }
        sets = {k: QBarSet(name) for k, (name, _) in tones.items()}
        for k, s in sets.items():
            s.setColor(tones[k][1])
            s.setBorderColor(tones[k][1])
        categories = []
        top = 1.2
        for m in reversed(modes):  # a horizontal chart draws its first category lowest
            f = figures[m["name"]]
            claimed = f.get("speedup")
            value = round(float(claimed), 2) if claimed is not None else 1.0
            tone = (
                "plain" if m["name"] == TARGET_ONLY
                else "idle" if claimed is None
                else _tone(value)
            )  # fmt: skip
            for k, s in sets.items():
                s.append(value if k == tone else 0.0)
            categories.append(f"{short_label(m)}  {format_speedup(claimed)}")
            top = max(top, value * 1.1)
        series = QHorizontalStackedBarSeries()
        series.setBarWidth(0.55)

        for s in sets.values():
            if any(s.at(i) for i in range(s.count())):
                series.append(s)
        chart.addSeries(series)
        y = QBarCategoryAxis()
        y.append(categories)
        x = QValueAxis()
        x.setRange(0.0, math.ceil(top * 4) / 4)
        x.setLabelFormat("%.2fx")
        x.setTickType(QValueAxis.TickType.TicksDynamic)
        x.setTickAnchor(0.0)
        x.setTickInterval(0.25 if top <= 2.5 else 0.5)
        chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
        chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
        series.attachAxis(y)
        series.attachAxis(x)
        line = _plain_line(1.0, -0.5, 1.0, len(categories) - 0.5, palette)
        chart.addSeries(line)
        line.attachAxis(x)
        line.attachAxis(y)
        chart.legend().markers(line)[0].setVisible(False)
        self.bars.apply_palette(palette)

    def _fill_scatter(self, report: dict[str, Any], palette: QPalette) -> None:
        chart = self.scatter.reset()
        modes = [m for m in report["modes"] if m["name"] != TARGET_ONLY]
        top = 1.2
        self._points = {}
        x = QValueAxis()
        x.setRange(-4.0, 104.0)  # room for a whole marker at 0 % and 100 %
        x.setLabelFormat("%.0f%%")
        x.setTitleText("acceptance")
        y = QValueAxis()
        y.setLabelFormat("%.2fx")
        y.setTitleText("speedup")
        chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
        for i, m in enumerate(modes):
            series = QScatterSeries()
            series.setName(short_label(m))
            series.setMarkerSize(11.0)
            colour = theme.pick(SERIES_COLOURS[i % len(SERIES_COLOURS)], palette)
            series.setColor(colour)
            series.setBorderColor(QColor(colour).darker(130))
            titles = []
            for conv in report["conversations"]:
                f = conv["modes"].get(m["name"])
                if f is None or f.get("speedup") is None:
                    continue  # no draft accepted in this conversation: nothing to plot
                series.append(QPointF(100.0 * f["acceptance_rate"], f["speedup"]))
                titles.append(f"{conv['title']} ({conv['kind']}, {counted(conv['turns'], 'turn')})")
                top = max(top, f["speedup"] * 1.1)
            chart.addSeries(series)
            series.attachAxis(x)
            series.attachAxis(y)
            self._points[i] = titles
            series.hovered.connect(self._tip_for(i, m["label"]))
        y.setRange(0.0, math.ceil(top * 4) / 4)
        y.setTickType(QValueAxis.TickType.TicksDynamic)
        y.setTickAnchor(0.0)
        y.setTickInterval(0.25 if top <= 2.5 else 0.5)
        x.setTickType(QValueAxis.TickType.TicksDynamic)
        x.setTickAnchor(0.0)
        x.setTickInterval(25.0)
        line = _plain_line(-4.0, 1.0, 104.0, 1.0, palette)
        chart.addSeries(line)
        line.attachAxis(x)
        line.attachAxis(y)
        chart.legend().markers(line)[0].setVisible(False)
        self.scatter.apply_palette(palette)
        chart.legend().setAlignment(Qt.AlignmentFlag.AlignRight)

    def _tip_for(self, index: int, label: str) -> Any:
        series_titles = self._points

        @Slot(QPointF, bool)
        def tip(point: QPointF, state: bool) -> None:
            if not state:
                QToolTip.hideText()
                return
            chart = self.scatter.chart_
            series = chart.series()[index]
            assert isinstance(series, QScatterSeries)
            points = series.points()
            nearest = min(range(len(points)), key=lambda j: (points[j] - point).manhattanLength())
            title = series_titles[index][nearest]
            QToolTip.showText(
                self.scatter.mapToGlobal(self.scatter.rect().center()),
                f"{title}\n{label}: {point.y():.2f}x at {point.x():.0f}% accepted",
            )

        return tip

    def _fill_table(self, report: dict[str, Any], palette: QPalette) -> None:
        figures = report["suites"]["ALL"]
        modes = [m for m in report["modes"] if m["name"] in figures]
        # Sized once when filled, not after every cell (that costs ms per cell).
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.setUpdatesEnabled(False)
        self.table.setRowCount(len(modes))
        for row, m in enumerate(modes):
            f = figures[m["name"]]
            plain = m["name"] == TARGET_ONLY
            idle = not plain and f.get("speedup") is None
            divergence = f.get("divergence_rate")
            cells = [
                m["label"],
                format_speedup(f.get("speedup")),
                "—" if plain or not f.get("drafted_tokens") else f"{f['acceptance_rate']:.0%}",
                f"{f['tokens_per_round']:.2f}",
                f"{f['p50_ms']:.1f}",
                f"{f['p99_ms']:.1f}",
                f"{f['ttft_ms']:.0f}",
                "—" if plain or divergence is None else f"{divergence:.0%}",
            ]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == 2 and f.get("accepted_by_drafter"):  # what each source supplied
                    item.setToolTip("accepted" + format_sources(f["accepted_by_drafter"]))
                if col:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                if col == 1 and not (plain or idle):
                    item.setForeground(theme.tone_colour(_tone(f["speedup"]), palette))
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        # As tall as its rows: the charts take the rest.
        rows = sum(self.table.rowHeight(r) for r in range(self.table.rowCount()))
        self.table.setFixedHeight(rows + header.height() + 2 * self.table.frameWidth() + 2)
        self.table.setUpdatesEnabled(True)


def _source_line(report: dict[str, Any]) -> str:
    """What was measured, in one line: when, how much, on which models."""
    models = report.get("models") or {}
    names = [m["file"] for m in (models.get("target"), models.get("draft")) if m]
    when = str(report.get("started", "")).replace("T", " ")[:16]
    turns = report.get("turns", 0)
    return (
        f"{when} · {counted(turns, 'turn')} replayed, "
        f"{report.get('max_tokens')} tokens each, greedy · {' + '.join(names)}"
    )
