"""Measure on my chats: does speculation pay on *your* conversations, here?

The user picks conversations (default: the latest 20 user turns of all of
them), the drafters and the policies to compare; the engine worker replays
each turn target-only and with each configuration on the loaded models
(``gambit.measure``), while this dialog shows progress, the time left and a
Cancel that stops within a round. The results (``measure_results``) come with
a recommendation that Apply turns into settings through the window's own
save path; every measurement is kept, listed newest first, and exported as
JSON or CSV in the schema of ``gambit-cli bench --json``.

The conversations are only read (read-only SQLite, on the worker thread);
the dialog never touches the window's conversation store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gambit.bench import (
    DRAFTER_LABELS,
    MeasureOutcome,
    MeasureProgress,
    MeasureRequest,
    replays_per_turn,
    report_csv,
)
from gambit.engine.drafters.registry import DRAFTING, spec
from gambit.errors import GambitError
from gambit.qt.compat import give_to_qt_parents
from gambit.qt.worker import EngineInfo, EngineWorker
from gambit.storage import measurements
from gambit.storage.prompts.history_turns import DEFAULT_LAST_TURNS, list_conversations
from gambit.storage.settings import Settings
from gambit.ui import theme
from gambit.ui.measure.measure_candidates import CandidateDraft, CandidateDrafts, no_drafts
from gambit.ui.measure.measure_results import MeasureResults
from gambit.words import counted

TURNS_ROLE = Qt.ItemDataRole.UserRole + 1  # a conversation item's user turns
POLICIES = (("adaptive", "Adaptive γ", True), ("fixed=2", "Fixed γ=2", False),
            ("fixed=4", "Fixed γ=4", True), ("fixed=8", "Fixed γ=8", False))  # fmt: skip
DEFAULT_REPLY_TOKENS = 96


@dataclass(frozen=True)
class MeasureHost:
    """What the dialog needs from the window, and nothing more."""

    worker: EngineWorker
    db_path: Path
    settings: Callable[[], Settings]  # the window's current settings
    apply: Callable[[Settings], bool]  # save and use (MainWindow.apply_settings)
    engine_info: Callable[[], EngineInfo | None]
    busy: Callable[[], bool]  # a reply is being generated
    measurements_dir: Path | None = None  # None: the data folder's
    # The library's models that could draft for the target (``library_drafts``)
    drafts: Callable[[], list[CandidateDraft]] = field(default=no_drafts)


def time_left(seconds: float | None) -> str:
    if seconds is None:
        return "estimating the time left…"
    if seconds < 60:
        return f"about {max(1, round(seconds))} s left"
    return f"about {seconds / 60:.0f} min left" if seconds >= 90 else "about 1 min left"


def _policy_fits(key: str, gamma_max: int) -> bool:
    """Whether a measurement keeps a policy (a fixed γ above max γ is left out)."""
    return key == "adaptive" or int(key.removeprefix("fixed=")) <= gamma_max


class MeasureDialog(QDialog):
    request_measure = Signal(object)  # MeasureRequest, to EngineWorker.measure (queued)

    def __init__(self, host: MeasureHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("measureDialog")
        self.setWindowTitle("Measure on my chats")
        self.resize(1180, 800)
        self.host = host
        self.running = False
        self.last_outcome: MeasureOutcome | None = None
        self._eta: tuple[float, float] | None = None  # (eta seconds, when it was said)
        self._build()
        give_to_qt_parents(self)  # one owner per widget (see there)
        worker = host.worker
        self.request_measure.connect(worker.measure)
        worker.measure_progress.connect(self._on_progress)
        worker.measure_finished.connect(self._on_finished)
        worker.loaded.connect(self.refresh_drafters)
        self._countdown = QTimer(self)  # time left moves between replays too
        self._countdown.setInterval(1000)
        self._countdown.timeout.connect(self._show_time_left)
        self.refresh_choices()
        self.refresh_earlier(select_first=True)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        intro = theme.muted_label(
            "Replays your own recent turns on the loaded models — plain decoding, then each "
            "drafter and policy — and measures what speculation gains on this machine. Your "
            "conversations are only read, never changed."
        )
        outer.addWidget(intro)
        splitter = QSplitter()
        splitter.setObjectName("measureSplitter")
        splitter.setChildrenCollapsible(False)
        outer.addWidget(splitter, 1)

        left = QWidget()
        col = QVBoxLayout(left)
        col.setContentsMargins(0, 0, 6, 0)
        col.addWidget(self._build_chats(), 2)
        col.addWidget(self._build_compare())
        self.candidates_group = CandidateDrafts()
        col.addWidget(self.candidates_group)
        self._build_run(col)
        col.addWidget(self._build_earlier(), 2)
        splitter.addWidget(left)

        self.results = MeasureResults()
        splitter.addWidget(self.results)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([340, 840])

        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.results.apply_requested.connect(self.apply_recommendation)
        self.earlier.currentItemChanged.connect(self._on_earlier_selected)
        self.export_json_button.clicked.connect(lambda: self._ask_export("json"))
        self.export_csv_button.clicked.connect(lambda: self._ask_export("csv"))
        self.conversations.itemChanged.connect(lambda _item: self._on_chats_ticked())
        for box in (*self.drafter_boxes.values(), self.trees_box, *self.policy_boxes.values()):
            box.toggled.connect(lambda _on: self._on_choice_changed())
        self.last_turns.valueChanged.connect(lambda _n: self._on_choice_changed())
        self.candidates_group.changed.connect(self._on_choice_changed)

    def _build_chats(self) -> QGroupBox:
        self.chats_group = chats = QGroupBox("Conversations")
        chats_col = QVBoxLayout(chats)
        self.conversations = QListWidget()
        self.conversations.setObjectName("conversationPicker")
        self.conversations.setMinimumHeight(110)
        self.conversations.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversations.setTextElideMode(Qt.TextElideMode.ElideRight)
        row = QHBoxLayout()
        row.addWidget(QLabel("Latest user turns:"))
        self.last_turns = QSpinBox()
        self.last_turns.setObjectName("lastTurnsSpin")
        self.last_turns.setRange(1, 500)
        self.last_turns.setValue(DEFAULT_LAST_TURNS)
        row.addWidget(self.last_turns)
        row.addStretch(1)
        chats_col.addWidget(self.conversations)
        chats_col.addLayout(row)
        return chats

    def _build_compare(self) -> QGroupBox:
        self.compare_group = compare = QGroupBox("Compare")
        grid = QHBoxLayout(compare)
        drafters_col = QVBoxLayout()
        drafters_col.addWidget(QLabel("Drafters"))
        self.drafter_boxes: dict[str, QCheckBox] = {}
        for kind in DRAFTING:  # every drafter of the registry
            box = QCheckBox(DRAFTER_LABELS[kind].capitalize())
            box.setObjectName(f"drafter_{kind}")
            self.drafter_boxes[kind] = box
            drafters_col.addWidget(box)
        self.trees_box = QCheckBox("Token trees")
        self.trees_box.setObjectName("drafter_trees")
        drafters_col.addWidget(self.trees_box)
        drafters_col.addStretch(1)
        policies_col = QVBoxLayout()
        policies_col.addWidget(QLabel("Policies"))
        self.policy_boxes: dict[str, QCheckBox] = {}
        for key, text, on in POLICIES:
            box = QCheckBox(text)
            box.setObjectName(f"policy_{key.replace('=', '')}")
            box.setChecked(on)
            self.policy_boxes[key] = box
            policies_col.addWidget(box)
        policies_col.addStretch(1)
        grid.addLayout(drafters_col)
        grid.addLayout(policies_col)
        return compare

    def _build_run(self, col: QVBoxLayout) -> None:
        """Reply length, Measure and Cancel, the progress bar, status and time left."""
        length = QHBoxLayout()
        length.addWidget(QLabel("Reply length:"))
        self.max_tokens = QSpinBox()
        self.max_tokens.setObjectName("replyTokensSpin")
        self.max_tokens.setRange(4, 1024)
        self.max_tokens.setValue(DEFAULT_REPLY_TOKENS)
        self.max_tokens.setSuffix(" tokens")
        length.addWidget(self.max_tokens)
        length.addStretch(1)
        col.addLayout(length)

        buttons = QHBoxLayout()
        self.start_button = QPushButton("Measure")
        self.start_button.setObjectName("measureButton")
        self.start_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelMeasureButton")
        self.cancel_button.setEnabled(False)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        col.addLayout(buttons)
        self.progress = QProgressBar()
        self.progress.setObjectName("measureProgress")
        self.progress.setFormat("%v of %m replays")
        self.progress.setValue(0)
        self.status = QLabel("")
        self.status.setObjectName("measureStatus")
        self.status.setWordWrap(True)
        self.eta = theme.muted_label("")
        self.eta.setObjectName("timeLeftLabel")
        col.addWidget(self.progress)
        col.addWidget(self.status)
        col.addWidget(self.eta)

    def _build_earlier(self) -> QGroupBox:
        earlier = QGroupBox("Earlier measurements")
        earlier_col = QVBoxLayout(earlier)
        self.earlier = QListWidget()
        self.earlier.setObjectName("earlierList")
        self.earlier.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.earlier.setTextElideMode(Qt.TextElideMode.ElideRight)
        exports = QHBoxLayout()
        self.export_json_button = QPushButton("Export JSON…")
        self.export_json_button.setObjectName("exportJsonButton")
        self.export_csv_button = QPushButton("Export CSV…")
        self.export_csv_button.setObjectName("exportCsvButton")
        exports.addWidget(self.export_json_button)
        exports.addWidget(self.export_csv_button)
        exports.addStretch(1)
        earlier_col.addWidget(self.earlier)
        earlier_col.addLayout(exports)
        return earlier

    # ----------------------------------------------------------------- choices
    def refresh_choices(self) -> None:
        """Conversations from the history (read-only) and the drafters the loaded models allow."""
        self.conversations.clear()
        try:
            convs = list_conversations(self.host.db_path)
        except GambitError as exc:
            convs = []
            self.status.setText(str(exc))
        self.conversations.blockSignals(True)  # (the offer follows once, below)
        for c in convs:
            turns = counted(c.n_user_turns, "turn")
            item = QListWidgetItem(f"{c.title} · {turns}")
            item.setData(Qt.ItemDataRole.UserRole, c.id)
            item.setData(TURNS_ROLE, c.n_user_turns)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked)
            self.conversations.addItem(item)
        self.conversations.blockSignals(False)
        self._offer_turns()
        self.refresh_drafters()

    @Slot()
    def refresh_drafters(self) -> None:
        """The drafters the loaded models allow (again after each load: Apply reloads)."""
        if self.running:
            return
        info = self.host.engine_info()
        settings = self.host.settings()
        loaded = info.drafter if info is not None else "none"
        # (lookup always; draft model + lookup loaded also measures the draft model alone)
        parts = spec(loaded).combines if loaded in self.drafter_boxes else ()
        for kind, box in self.drafter_boxes.items():
            usable = not spec(kind).loads_model or kind == loaded or kind in parts
            box.setEnabled(usable)
            box.setChecked(usable)
            box.setToolTip(
                ""
                if usable
                else "Not loaded: choose it in Settings → Models → Drafter to compare it"
            )
        trees = info is not None and settings.tree_drafts and loaded != "none"
        self.trees_box.setEnabled(trees)
        self.trees_box.setChecked(False)
        self.trees_box.setToolTip(
            "Also each drafter drafting token trees (adaptive policy)"
            if trees
            else "Switch on Settings → Speculation → Tree drafts to compare trees"
        )
        self.candidates_group.refresh(self.host.drafts())
        self._on_choice_changed()

    def chosen_drafts(self) -> tuple[str, ...]:
        """The candidate drafts ticked, as files."""
        return self.candidates_group.chosen()

    def refresh_earlier(self, select_first: bool = False) -> None:
        self.earlier.blockSignals(True)
        self.earlier.clear()
        for saved in measurements.list_saved(self.host.measurements_dir):
            self.earlier.addItem(_earlier_item(saved))
        self.earlier.blockSignals(False)
        if select_first and self.earlier.count():
            self.earlier.setCurrentRow(0)
        self._update_buttons()

    def _add_earlier(self, report: dict[str, Any], path: Path) -> None:
        """The measurement just made, first in the list and shown (from memory:
        no file is read back on the window's thread)."""
        self.earlier.blockSignals(True)
        self.earlier.insertItem(0, _earlier_item(measurements.summary(report, path)))
        self.earlier.setCurrentRow(0)
        self.earlier.blockSignals(False)
        self.results.show_report(report)

    def available_turns(self) -> int:
        """The user turns of the ticked conversations: the most a measurement replays."""
        items = [self.conversations.item(i) for i in range(self.conversations.count())]
        return sum(
            int(it.data(TURNS_ROLE) or 0)
            for it in items
            if it.checkState() == Qt.CheckState.Checked
        )

    def planned_replays(self) -> int:
        """The replays Measure would run now: the turns offered, each target-only
        twice, once per drafter and policy ticked (trees: once more per drafter)
        and once per candidate draft ticked."""
        gamma_max = self.host.settings().gamma_max
        policies = [
            key
            for key, box in self.policy_boxes.items()
            if box.isChecked() and _policy_fits(key, gamma_max)
        ]
        trees = self.trees_box.isEnabled() and self.trees_box.isChecked()
        drafters = [b for b in self.drafter_boxes.values() if b.isEnabled() and b.isChecked()]
        n_configs = len(drafters) * (len(policies) + trees) + len(self.chosen_drafts())
        turns = min(self.last_turns.value(), self.available_turns())
        return turns * replays_per_turn(n_configs) if n_configs else 0

    def _offer_turns(self) -> None:
        """Offer as many latest turns as the ticked conversations hold (at most
        the default); a count the user lowered stays, within what there is."""
        spin = self.last_turns
        available = self.available_turns()
        following = spin.value() >= min(spin.maximum(), DEFAULT_LAST_TURNS)
        spin.blockSignals(True)
        spin.setMaximum(max(1, available))
        if following:
            spin.setValue(max(1, min(DEFAULT_LAST_TURNS, available)))
        spin.blockSignals(False)

    def _on_chats_ticked(self) -> None:
        self._offer_turns()
        self._on_choice_changed()

    def _on_choice_changed(self) -> None:
        """Before a run, the progress bar counts the replays the choices make."""
        if not self.running:
            total = self.planned_replays()
            self.progress.setFormat("%v of %m replays" if total else "Nothing to replay")
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(0)
        self._update_buttons()

    def chosen_conversations(self) -> tuple[int, ...] | None:
        """The ticked conversations; None when all are (later ones count too)."""
        items = [self.conversations.item(i) for i in range(self.conversations.count())]
        ticked = [it for it in items if it.checkState() == Qt.CheckState.Checked]
        if len(ticked) == len(items):
            return None
        return tuple(int(it.data(Qt.ItemDataRole.UserRole)) for it in ticked)

    def _request(self) -> MeasureRequest:
        settings = self.host.settings()
        return MeasureRequest(
            db_path=self.host.db_path,
            drafters=tuple(k for k, b in self.drafter_boxes.items() if b.isChecked()),
            policies=tuple(k for k, b in self.policy_boxes.items() if b.isChecked()),
            trees=self.trees_box.isChecked(),
            last=self.last_turns.value(),
            conversation_ids=self.chosen_conversations(),
            max_tokens=self.max_tokens.value(),
            system_prompt=settings.system_prompt,
            save_to=self.host.measurements_dir,
            # JSON-shaped (the workers' tuple a list), as the report's file holds it
            app_settings=json.loads(json.dumps(asdict(settings))),
            drafts=self.chosen_drafts(),
        )

    # --------------------------------------------------------------- measuring
    @Slot()
    def start(self) -> None:
        if self.running:
            return
        if self.host.engine_info() is None:
            last = self.last_outcome  # (a lost worker took the model: say so again)
            lost = last.error if last is not None and last.worker_lost else None
            self.status.setText(lost or "The model is not loaded yet: measure once it is ready.")
            return
        if self.host.busy():
            self.status.setText("A reply is being written: measure once it has finished.")
            return
        self.running = True
        self._eta = None
        self.progress.setFormat("%v of %m replays")
        self.progress.setRange(0, 0)  # busy until the first replay is counted
        self.status.setText("Starting…")
        self.eta.setText(time_left(None))
        self._countdown.start()
        self._update_buttons()
        self.request_measure.emit(self._request())

    @Slot()
    def cancel(self) -> None:
        if self.running:
            self.host.worker.cancel()  # the worker stops at its next round
            self.status.setText("Cancelling…")
            self.cancel_button.setEnabled(False)

    @Slot(object)
    def _on_progress(self, p: MeasureProgress) -> None:
        if not self.running:
            return
        self.progress.setRange(0, p.total)
        self.progress.setValue(p.done)
        self.status.setText(p.line)
        if p.eta_s is not None:
            self._eta = (p.eta_s, time.monotonic())
        self._show_time_left()

    @Slot()
    def _show_time_left(self) -> None:
        if not self.running:
            return
        if self._eta is None:
            self.eta.setText(time_left(None))
            return
        eta, said = self._eta
        self.eta.setText(time_left(max(0.0, eta - (time.monotonic() - said))))

    @Slot(object)
    def _on_finished(self, outcome: MeasureOutcome) -> None:
        if not self.running:
            return
        self.running = False
        self.last_outcome = outcome
        self._countdown.stop()
        self.eta.setText("")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        if outcome.report is not None and outcome.path is not None:
            self.progress.setValue(1)
            self.progress.setFormat("Done")
            self.status.setText(f"Saved as {outcome.path.name}.")
            self._add_earlier(outcome.report, outcome.path)
        else:
            self.progress.setFormat(
                "Cancelled" if outcome.cancelled else "Worker lost" if outcome.worker_lost
                else "Stopped"
            )  # fmt: skip
            self.status.setText(outcome.error or "The measurement stopped.")
        self._update_buttons()

    # ----------------------------------------------------------------- results
    @Slot(object, object)
    def _on_earlier_selected(self, item: QListWidgetItem | None, _prev: object) -> None:
        if item is None:
            self.results.show_report(None)
            return
        try:
            report = measurements.load(Path(item.data(Qt.ItemDataRole.UserRole)))
        except GambitError as exc:
            self.status.setText(str(exc))
            self.results.show_report(None)
            return
        self.results.show_report(report)
        self._update_buttons()

    @Slot()
    def apply_recommendation(self) -> None:
        """The shown recommendation into settings, through the window's save path."""
        report = self.results.report
        if report is None:
            return
        try:
            new = measurements.recommended_settings(self.host.settings(), report)
        except GambitError as exc:
            self._error("The recommendation was not applied", str(exc))
            return
        if self.host.apply(new):
            self.status.setText(f"Applied: {report['recommendation']['headline']}.")
            self.refresh_choices()

    def export(self, path: Path, kind: str) -> None:
        """Write the shown measurement to ``path`` as "json" or "csv". Raises OSError."""
        report = self.results.report
        assert report is not None
        text = report_csv(report) if kind == "csv" else json.dumps(report, indent=1) + "\n"
        path.write_text(text, encoding="utf-8")

    def _ask_export(self, kind: str) -> None:
        report = self.results.report
        if report is None:
            return
        stamp = str(report.get("started", "measurement")).replace(":", "").replace("T", "-")
        name, _ = QFileDialog.getSaveFileName(
            self, f"Export {kind.upper()}", f"gambit-measure-{stamp}.{kind}",
            "CSV (*.csv)" if kind == "csv" else "JSON (*.json)",
        )  # fmt: skip
        if not name:
            return
        try:
            self.export(Path(name), kind)
        except OSError as exc:
            self._error("The measurement was not exported", f"{name}: {exc.strerror or exc}")
            return
        self.status.setText(f"Exported to {name}.")

    # ----------------------------------------------------------------- helpers
    def _update_buttons(self) -> None:
        running = self.running
        items = [self.conversations.item(i) for i in range(self.conversations.count())]
        any_chat = any(it.checkState() == Qt.CheckState.Checked for it in items)
        any_drafter = any(b.isChecked() for b in self.drafter_boxes.values())
        any_policy = any(b.isChecked() for b in self.policy_boxes.values())
        # (a candidate draft runs under the adaptive policy, ticked or not)
        something = (any_drafter and any_policy) or bool(self.chosen_drafts())
        self.start_button.setEnabled(not running and any_chat and something)
        self.start_button.setToolTip(
            "" if any_chat and something
            else "Tick at least one conversation, and one drafter and one policy or a draft"
        )  # fmt: skip
        self.cancel_button.setEnabled(running)
        # (a child disabled on its own, like a drafter that is not loaded, stays so)
        for w in (self.chats_group, self.compare_group, self.candidates_group, self.max_tokens):
            w.setEnabled(not running)
        self.results.apply_button.setEnabled(not running and self.results.can_apply)
        has_report = self.results.report is not None
        self.export_json_button.setEnabled(has_report)
        self.export_csv_button.setEnabled(has_report)

    def _error(self, title: str, message: str) -> None:
        box = QMessageBox(QMessageBox.Icon.Warning, title, message, parent=self)
        box.setObjectName("measureError")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    def reject(self) -> None:
        """Closing mid-run cancels the measurement (the worker stops within a round)."""
        if self.running:
            self.host.worker.cancel()
        super().reject()


def _earlier_item(saved: measurements.SavedMeasurement) -> QListWidgetItem:
    item = QListWidgetItem(f"{saved.title}\n{saved.headline}")
    item.setData(Qt.ItemDataRole.UserRole, str(saved.path))
    item.setToolTip(f"{saved.target}\n{saved.path}")
    return item
