"""The live statistics panel: is the speculative bet paying off, right now?

``StatsPanel`` is a dock showing one reply's ``MetricsSnapshot`` as counters
and three small charts. Snapshots can arrive once per decoding round (many
per second); ``set_snapshot`` only stores the latest one, and a 100 ms timer
repaints when something new arrived, so a burst of snapshots costs one
repaint. Call it from the GUI thread (connect the engine's signal queued).
The charts' cards and axis arithmetic live in stats_charts.py.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Final

from PySide6.QtCharts import (
    QChartView,
    QLineSeries,
)
from PySide6.QtCore import QEvent, QPointF, Qt, QTimer
from PySide6.QtGui import QFont, QPalette, QPen
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QGridLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from gambit.engine.gamma.metrics import (
    NO_FIGURE,
    MetricsSnapshot,
    MetricsTracker,
    format_percent,
    format_rate,
    format_sources,
    format_speedup,
)
from gambit.storage.reply_stats import ReplyRecord
from gambit.ui import theme
from gambit.ui.stats.stats_charts import (
    TIME_UNIT,
    ChartCard,
    DepthChart,
    Sample,
    gamma_steps,
    nice_step,
    sample_of,
    set_range,
)
from gambit.ui.stats.stored_figures import stored_figures
from gambit.ui.theme import Tone
from gambit.words import counted

if TYPE_CHECKING:
    from gambit.qt.worker import EngineInfo

REPAINT_INTERVAL_MS: Final = 100
MAX_POINTS: Final = 200  # samples kept per time chart
SPEEDUP_GOOD: Final = 1.05  # at or above: the bet pays (green)
SPEEDUP_BAD: Final = 0.97  # below: the bet loses (red); in between: amber
PLACEHOLDER: Final = NO_FIGURE

_WINDOW = MetricsTracker.WINDOW
# Above the figures of a reply that is not streaming now (show_stored).
STORED_SCOPE: Final = "Figures stored with the selected reply"
CONTINUED_SCOPE: Final = ": its last part (it was continued)"
CONTINUED_LIVE: Final = "Figures of the reply's last part (it was continued)."

TOOLTIPS: Final[dict[str, str]] = {
    "speedupValue": (
        "This reply's tokens/s over the baseline: above 1× the bet pays. Only a reply "
        "that drafted has one (— otherwise); the reply's footer shows the same figure."
    ),
    "tokensPerSecondValue": (
        "This reply's tokens / its generation time (from the end of prompt processing "
        "to the last round), as in the reply's footer and gambit-cli."
    ),
    "baselineValue": (
        "Plain decoding's rate, as your plain replies get it. A reply that drafted nothing "
        "is plain decoding: its baseline is its own tokens/s. A reply that drafted is "
        "compared with a plain step re-timed on its own context when it ends; while it "
        "streams, with the baseline the last reply ended with."
    ),
    "acceptedValue": "Draft tokens the target model accepted / draft tokens proposed, this reply.",
    "acceptanceValue": "Accepted draft tokens / drafted tokens over the whole reply.",
    "acceptanceRollingValue": (
        f"Accepted draft tokens / drafted tokens over the last {_WINDOW} rounds that drafted."
    ),
    "gammaValue": (
        "γ: draft tokens proposed per round by the controller (a tree's main chain; side "
        "nodes come on top); 0 means speculation is off."
    ),
    "shapeValue": (
        "The token tree the controller drafts now: a main chain of γ tokens plus side nodes "
        "(other candidates at some depths), all verified in one target batch."
    ),
    "sideGainValue": (
        "Draft tokens accepted thanks to side nodes / side nodes drafted, this reply: "
        "what the tree won over a plain chain."
    ),
    "gammaReasonValue": (
        "What the controller does next and why: its expected speedup over plain decoding "
        "(an expectation from measured costs and acceptance, not a measurement), and the "
        "thresholds it switches at."
    ),
    "ttftValue": (
        "Time to first token: from the request to the first visible token, prompt included."
    ),
    "p50Value": "Median time between consecutive reply tokens as the reader sees them.",
    "p99Value": (
        "99th percentile of the time between consecutive reply tokens; tokens that arrive "
        "together count as one gap followed by gaps of 0."
    ),
}


# -- formatting -------------------------------------------------------------------------


def speedup_tone(speedup: float) -> Tone:
    """Green from 1.05×, amber from 0.97× up to 1.05×, red below."""
    if speedup >= SPEEDUP_GOOD:
        return "good"
    if speedup >= SPEEDUP_BAD:
        return "warn"
    return "bad"


def format_ms(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms"


def format_shape(gamma: int, side_nodes: int) -> str:
    """The controller's tree: ``"γ 4 + 2 side nodes"``; a bare chain says so."""
    if gamma <= 0:
        return "off"
    if side_nodes <= 0:
        return f"γ {gamma}, a plain chain"
    return f"γ {gamma} + {counted(side_nodes, 'side node')}"


def drafter_line(info: EngineInfo) -> str:
    """``"Drafter: self-speculation · skips blocks 12, 15, 18 of 30"``; "" without a drafter."""
    parts = [p for p in (info.drafter_label, info.drafter_detail) if p]
    return "Drafter: " + " · ".join(parts) if parts else ""


# -- the panel --------------------------------------------------------------------------


class StatsPanel(QDockWidget):
    """Dock widget with the live figures of the current reply.

    Public API: ``set_snapshot``, ``start_reply``, ``set_engine``, ``set_backend`` and
    ``repaint_count`` (how many times the timer repainted, for tests and
    profiling). Counter labels carry object names (``speedupValue``, ...).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Speculation", parent)
        self.setObjectName("statsPanel")
        self.setAllowedAreas(
            Qt.DockWidgetArea.LeftDockWidgetArea | Qt.DockWidgetArea.RightDockWidgetArea
        )
        self.repaint_count = 0
        self._snapshot: MetricsSnapshot | None = None
        # The stored reply whose figures these are (None: none, or not a stored one).
        self.reply_id: int | None = None
        self._dirty = False
        self._samples: deque[Sample] = deque(maxlen=MAX_POINTS)
        self._tones: dict[QLabel, Tone] = {}

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REPAINT_INTERVAL_MS)
        self._timer.timeout.connect(self._on_repaint_timer)

        self._values: dict[str, QLabel] = {}
        self._captions: list[QLabel] = []
        self._build()
        for card in self._cards:
            card.view.on_resized = self._on_chart_resized
        self._ready = True
        self._apply_palette()
        self._reset()

    # -- public API
    @property
    def snapshot(self) -> MetricsSnapshot | None:
        """The latest snapshot received (shown at the next repaint)."""
        return self._snapshot

    def set_snapshot(self, snapshot: MetricsSnapshot) -> None:
        """Store ``snapshot`` for the next repaint; cheap enough to call per token."""
        self._snapshot = snapshot
        self._dirty = True
        if not self._timer.isActive():
            self._timer.start()

    def start_reply(self, continued: bool = False) -> None:
        """Forget the previous reply: clear the charts and the counters. A
        ``continued`` reply's figures are its new part's, and the panel says so."""
        self.clear()
        if continued:
            self._scope.setText(CONTINUED_LIVE)
            self._scope.setVisible(True)

    def clear(self) -> None:
        """Show no figures (a model unloads or failed to load: none of them hold now)."""
        self._timer.stop()
        self._snapshot = None
        self._dirty = False
        self.reply_id = None
        self._scope.setVisible(False)  # (live figures need no word: they are the reply's)
        self._reset()

    def show_stored(self, reply_id: int | None, record: ReplyRecord | None) -> None:
        """The figures stored with reply ``reply_id`` (a reply selected, or the
        last of a conversation opened); none where it has none."""
        self.clear()
        figures = stored_figures(record)
        if figures is None:
            return
        snapshot, samples = figures
        self.reply_id = reply_id
        self._samples.extend(samples)
        continued = record is not None and record.continued > 0
        self._scope.setText(STORED_SCOPE + (CONTINUED_SCOPE if continued else "") + ".")
        self._scope.setVisible(True)
        self.set_snapshot(snapshot)

    def set_backend(self, text: str) -> None:
        """Show where the models run, e.g. ``"CPU · 2 threads · AVX2"``; empty hides it."""
        self._backend.setText(text)
        self._backend.setToolTip(f"Backend: {text}" if text else "")
        self._backend.setVisible(bool(text))

    def set_engine(self, info: EngineInfo | None) -> None:
        """Show what was loaded: the backend line, and the drafter with its shape
        (tree size, skipped layers) when it has one; None hides both."""
        self.set_backend(info.backend.summary if info is not None else "")
        text = drafter_line(info) if info is not None else ""
        self._drafter.setText(text)
        self._drafter.setToolTip(
            "The drafter loaded with the model, and its shape." if text else ""
        )
        self._drafter.setVisible(bool(text))
        kernels = f"Kernels: {info.kernels}" if info is not None and info.kernels else ""
        self._kernels.setText(kernels)
        self._kernels.setToolTip(
            "How llama.cpp runs the target on this CPU, chosen by a one-time probe "
            "(configurations whose kernels fail or hang there are never used)."
            if kernels
            else ""
        )
        self._kernels.setVisible(bool(kernels))
        self._show_target(info)

    def _show_target(self, info: EngineInfo | None) -> None:
        """Where the target's layers are, when workers hold some, and what a pass costs."""
        placement = info.placement if info is not None else None
        text = placement.describe() if placement is not None else ""
        if text and info is not None and info.target_costs:
            text += "\n" + info.target_costs
        self._target.setText(text)
        self._target.setToolTip(
            "The target's layers on this machine and on each worker, with the link's "
            "round-trip time. Every pass crosses the link, so checking k draft tokens "
            "in one pass costs little more than one token (t(k)/t(1) near 1): that is "
            "why speculation pays over a network."
            if text
            else ""
        )
        self._target.setVisible(bool(text))

    def value_label(self, name: str) -> QLabel:
        """The counter label called ``name`` (e.g. ``"speedupValue"``)."""
        return self._values[name]

    # -- repainting
    def _on_repaint_timer(self) -> None:
        snap = self._snapshot
        if not self._dirty or snap is None:
            return
        self._dirty = False
        self.repaint_count += 1
        self._add_sample(snap)
        self._show_counters(snap)
        self._update_time_charts()
        self._depth_chart.show(snap.acceptance_by_position)

    def _add_sample(self, snap: MetricsSnapshot) -> None:
        sample = sample_of(snap)
        if self._samples:
            last = self._samples[-1].t
            if sample.t < last:  # a new reply started without start_reply()
                self._samples.clear()
            elif sample.t == last:
                self._samples.pop()
        self._samples.append(sample)

    def _show_counters(self, s: MetricsSnapshot) -> None:
        v = self._values
        sources = format_sources(dict(s.accepted_by_drafter))
        v["acceptedValue"].setText(f"{s.n_accepted:,} / {s.n_drafted:,}{sources}")
        drafted = s.n_drafted > 0
        v["acceptanceValue"].setText(format_percent(s.acceptance_rate) if drafted else PLACEHOLDER)
        recent = s.acceptance_rate_rolling
        v["acceptanceRollingValue"].setText(
            format_percent(recent) if drafted and recent is not None else PLACEHOLDER
        )
        v["gammaValue"].setText(str(s.gamma))
        tree = bool(s.tree)
        v["shapeValue"].setText(format_shape(s.gamma, s.side_nodes) if tree else PLACEHOLDER)
        v["sideGainValue"].setText(f"{s.side_gain:,} / {s.n_side:,}" if tree else PLACEHOLDER)
        for label in self._shape_tile:
            label.setVisible(tree)
        v["gammaReasonValue"].setText(s.gamma_reason or PLACEHOLDER)
        v["tokensPerSecondValue"].setText(format_rate(s.tokens_per_s))
        v["baselineValue"].setText(format_rate(s.baseline_tokens_per_s))
        # No drafting, no bet: no figure and no colour (metrics.speedup says when).
        v["speedupValue"].setText(format_speedup(s.speedup))
        tone = speedup_tone(s.speedup) if s.speedup is not None else "neutral"
        self._set_tone(v["speedupValue"], tone)
        self._threads.setText(f"Threads: {s.threads}" if s.threads else "")
        self._threads.setVisible(bool(s.threads))
        notes = [f"No speedup shown: {s.speedup_withheld}."] if s.speedup_withheld else []
        if s.busy:
            notes.append(f"Timed while the machine was busy: {s.busy}; the figures may be off.")
        self._busy.setText(" ".join(notes))
        self._busy.setVisible(bool(notes))
        self._busy.setFont(self._reason_font if s.speedup_withheld else self._caption_font)
        v["ttftValue"].setText(format_ms(s.ttft_ms) if s.n_tokens else PLACEHOLDER)
        has_gaps = s.n_tokens > 1
        v["p50Value"].setText(format_ms(s.p50_ms) if has_gaps else PLACEHOLDER)
        v["p99Value"].setText(format_ms(s.p99_ms) if has_gaps else PLACEHOLDER)

    def _update_time_charts(self) -> None:
        samples = self._samples
        self._tps_series.replace([QPointF(s.t, s.tokens_per_s) for s in samples])
        self._baseline_series.replace([QPointF(s.t, s.baseline) for s in samples if s.baseline > 0])
        self._gamma_series.replace(gamma_steps(samples))
        if not samples:
            self._reset_axes()
            return

        x0, x1 = samples[0].t, samples[-1].t
        x1 = max(x1, x0 + 1.0)
        step = nice_step((x1 - x0) / 4)
        for axis in (self._tps_x, self._gamma_x):
            set_range(axis, x0, x1, step, TIME_UNIT)

        top = max(max(max(s.tokens_per_s, s.baseline) for s in samples), 1.0) * 1.1
        step = nice_step(top / min(4, self._tps_card.max_ticks() - 1))
        set_range(self._tps_y, 0.0, step * math.ceil(top / step), step)

        g_top = max(max(s.gamma for s in samples), 1) + 1
        self._gamma_y.setRange(-0.25, g_top + 0.25)  # keeps γ = 0 clear of the axis line
        self._gamma_y.setTickInterval(self._gamma_tick(g_top))

    def _gamma_tick(self, g_top: int) -> float:
        """1 when the chart has room for a label per γ, else every 2nd, 3rd, ..."""
        return float(max(1, math.ceil((g_top + 1) / self._gamma_card.max_ticks())))

    def _on_chart_resized(self) -> None:
        self._update_time_charts()
        self._depth_chart.fit_ticks()

    def _reset(self) -> None:
        self._samples.clear()
        self._update_time_charts()
        self._depth_chart.show(())
        for label in self._values.values():
            label.setText(PLACEHOLDER)
        for label in self._shape_tile:
            label.setVisible(False)
        self._busy.setVisible(False)
        self._threads.setVisible(False)
        self._set_tone(self._values["speedupValue"], "neutral")

    def _reset_axes(self) -> None:
        for axis in (self._tps_x, self._gamma_x):
            set_range(axis, 0.0, 10.0, 2.5, TIME_UNIT)
        set_range(self._tps_y, 0.0, 40.0, 10.0)
        self._gamma_y.setRange(-0.25, 4.25)
        self._gamma_y.setTickInterval(self._gamma_tick(4))

    # -- look
    def _set_tone(self, label: QLabel, tone: Tone) -> None:
        label.setProperty("tone", tone)
        if self._tones.get(label) == tone:
            return
        self._tones[label] = tone
        palette = label.palette()
        palette.setColor(QPalette.ColorRole.WindowText, theme.tone_colour(tone, self.palette()))
        label.setPalette(palette)

    def _apply_palette(self) -> None:
        palette = self.palette()
        muted = theme.muted(palette)
        for label in [
            *self._captions,
            self._backend,
            self._drafter,
            self._kernels,
            self._threads,
        ]:
            p = label.palette()
            p.setColor(QPalette.ColorRole.WindowText, muted)
            label.setPalette(p)
        for card in self._cards:
            card.apply_palette(palette)
        self._tps_series.setPen(QPen(theme.pick(theme.ACCENT, palette), 2.0))
        dashed = QPen(muted, 1.5, Qt.PenStyle.DashLine)
        self._baseline_series.setPen(dashed)
        self._gamma_series.setPen(QPen(theme.pick(theme.VIOLET, palette), 2.0))
        for label, tone in list(self._tones.items()):
            del self._tones[label]
            self._set_tone(label, tone)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if not getattr(self, "_ready", False):
            return  # still under construction
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_palette()

    # -- construction
    def _build(self) -> None:
        base = self.font()
        size = base.pointSizeF() if base.pointSizeF() > 0 else 10.0
        self._value_font = QFont(base)
        self._value_font.setPointSizeF(size * 1.2)
        self._value_font.setWeight(QFont.Weight.DemiBold)
        self._reason_font = QFont(base)
        self._reason_font.setWeight(QFont.Weight.Medium)
        self._caption_font = QFont(base)
        self._caption_font.setPointSizeF(size * 0.85)
        self._chart_font = QFont(base)
        self._chart_font.setPointSizeF(size * 0.75)

        content = QWidget()
        content.setObjectName("statsContent")
        layout = QVBoxLayout(content)
        layout.setContentsMargins(14, 6, 14, 10)
        layout.setSpacing(4)

        # What was loaded, in caption lines; each hidden while it has nothing to say.
        self._backend, self._drafter, self._kernels, self._target, self._threads, self._busy = (
            self._info_line(layout, name, wrap=name != "backendValue")
            for name in ("backendValue", "drafterValue", "kernelsValue", "targetValue",
                         "threadsValue", "busyValue")
        )  # fmt: skip
        self._scope = self._info_line(layout, "scopeValue", wrap=True)  # whose figures

        # The figures first (speed, drafting, latency), then the charts: the headline
        # numbers never need scrolling, and the charts share the height that is left.
        self._build_figures(layout)

        self._cards: list[ChartCard] = []
        layout.addWidget(self._chart_caption("Tokens/s over time (dashed: baseline)"))
        layout.addWidget(self._build_tps_chart(), 1)
        layout.addWidget(self._chart_caption("γ over time"))
        layout.addWidget(self._build_gamma_chart(), 1)
        layout.addWidget(self._chart_caption("Acceptance by depth, of the rounds that reached it"))
        layout.addWidget(self._build_acceptance_chart(), 1)
        layout.addStretch(0)  # charts at their tallest: the rest stays below them

        scroll = QScrollArea()
        scroll.setObjectName("statsScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        scroll.setWidget(content)
        content.setMinimumWidth(280)
        self.setWidget(scroll)

    def _info_line(self, layout: QVBoxLayout, name: str, *, wrap: bool) -> QLabel:
        label = QLabel()
        label.setObjectName(name)
        label.setFont(self._caption_font)
        label.setWordWrap(wrap)
        label.setVisible(False)
        layout.addWidget(label)
        return label

    def _build_figures(self, layout: QVBoxLayout) -> None:
        """The counter tiles: speed, then drafting, then latency."""
        grid = self._grid(layout)
        self._tile(grid, 0, 0, "Speedup", "speedupValue")
        self._tile(grid, 0, 1, "Tokens/s", "tokensPerSecondValue")
        self._tile(grid, 0, 2, "Baseline", "baselineValue")

        grid = self._grid(layout)
        self._tile(grid, 0, 0, "Acceptance", "acceptanceValue")
        self._tile(grid, 0, 1, f"Last {_WINDOW} drafts", "acceptanceRollingValue")
        self._tile(grid, 0, 2, "Accepted / drafted", "acceptedValue")
        self._tile(grid, 2, 0, "γ (draft length)", "gammaValue")
        self._tile(grid, 2, 1, "Controller", "gammaReasonValue", span=2)
        self._shape_tile = (
            *self._tile(grid, 4, 0, "Tree shape", "shapeValue", span=2),
            *self._tile(grid, 4, 2, "Side nodes won", "sideGainValue"),
        )
        reason = self._values["gammaReasonValue"]
        reason.setFont(self._reason_font)
        reason.setWordWrap(True)

        grid = self._grid(layout)
        self._tile(grid, 0, 0, "First token", "ttftValue")
        self._tile(grid, 0, 1, "p50 token gap", "p50Value")
        self._tile(grid, 0, 2, "p99 token gap", "p99Value")

    def _chart_caption(self, text: str) -> QLabel:
        label = QLabel(text)
        label.setFont(self._caption_font)
        label.setContentsMargins(0, 4, 0, 0)
        self._captions.append(label)
        return label

    def _grid(self, layout: QVBoxLayout) -> QGridLayout:
        grid = QGridLayout()
        grid.setHorizontalSpacing(16)
        grid.setVerticalSpacing(0)
        for column in range(3):
            grid.setColumnStretch(column, 1)
        layout.addLayout(grid)
        return grid

    def _tile(
        self, grid: QGridLayout, row: int, column: int, caption: str, name: str, span: int = 1
    ) -> tuple[QLabel, QLabel]:
        tip = TOOLTIPS[name]
        title = QLabel(caption)
        title.setFont(self._caption_font)
        title.setToolTip(tip)
        self._captions.append(title)
        value = QLabel(PLACEHOLDER)
        value.setObjectName(name)
        value.setFont(self._value_font)
        value.setToolTip(tip)
        value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        value.setContentsMargins(0, 0, 0, 6)
        grid.addWidget(title, row, column, 1, span)
        grid.addWidget(value, row + 1, column, 1, span)
        self._values[name] = value
        return title, value

    def _build_tps_chart(self) -> QChartView:
        card = self._tps_card = ChartCard("tokensPerSecondChart", self._chart_font)
        self._tps_series = QLineSeries()
        self._tps_series.setName("tokens/s")
        self._baseline_series = QLineSeries()
        self._baseline_series.setName("baseline")
        card.chart.addSeries(self._tps_series)
        card.chart.addSeries(self._baseline_series)
        self._tps_x = card.value_axis(Qt.AlignmentFlag.AlignBottom)
        self._tps_y = card.value_axis(Qt.AlignmentFlag.AlignLeft)
        for series in (self._tps_series, self._baseline_series):
            series.attachAxis(self._tps_x)
            series.attachAxis(self._tps_y)
        self._cards.append(card)
        return card.view

    def _build_gamma_chart(self) -> QChartView:
        card = self._gamma_card = ChartCard("gammaChart", self._chart_font)
        self._gamma_series = QLineSeries()
        self._gamma_series.setName("γ")
        card.chart.addSeries(self._gamma_series)
        self._gamma_x = card.value_axis(Qt.AlignmentFlag.AlignBottom)
        self._gamma_y = card.value_axis(Qt.AlignmentFlag.AlignLeft)
        self._gamma_y.setLabelFormat("%d")
        self._gamma_series.attachAxis(self._gamma_x)
        self._gamma_series.attachAxis(self._gamma_y)
        self._cards.append(card)
        return card.view

    def _build_acceptance_chart(self) -> QChartView:
        self._depth_chart = DepthChart(self._chart_font)
        self._cards.append(self._depth_chart)
        return self._depth_chart.view
