"""The memory a pair will take once loaded, against what is available now."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGroupBox, QLabel, QProgressBar, QVBoxLayout

from gambit.engine.machine.kernels import KVType
from gambit.formats.gguf_info import ModelInfo
from gambit.models.memory import MemoryEstimate, available_memory, check_fits, estimate_memory
from gambit.models.memory_split import MemorySplit, WorkerMemory, split_memory
from gambit.ui import theme
from gambit.ui.models_dialog.text import MIB, format_bytes, html
from gambit.ui.models_dialog.widgets import PROGRESS_STEPS
from gambit.ui.theme import Tone
from gambit.words import counted


@dataclass(frozen=True)
class PairEstimate:
    """Both sides' estimates, the memory available and the warning, if any."""

    target: ModelInfo
    draft: ModelInfo | None
    target_est: MemoryEstimate
    draft_est: MemoryEstimate | None
    n_ctx: int
    kv: KVType
    available: int
    warning: str | None
    split: MemorySplit | None = None  # with workers, once they answered
    asking: int = 0  # workers still being asked for their memory

    @property
    def total(self) -> int:
        return self.target_est.total_bytes + (self.draft_est.total_bytes if self.draft_est else 0)

    @property
    def local(self) -> int:
        """What this machine holds: all of it, or its part of a split."""
        return self.split.local_bytes if self.split is not None else self.total


def estimate_pair_memory(
    target: ModelInfo,
    draft: ModelInfo | None,
    n_ctx: int,
    kv: KVType,
    gpu_layers: int,
    workers: Workers | None = None,
) -> PairEstimate:
    """Estimate ``target`` (with ``draft``) at ``n_ctx``; raises what reading does.
    With ``workers``, the target's layers are split over them once they answered."""
    t_est = estimate_memory(target, n_ctx, kv)
    d_est = estimate_memory(draft, n_ctx, kv) if draft is not None else None
    available = available_memory()
    if workers is not None and workers.endpoints:
        if workers.answers is None:  # the target goes out; how much, the workers will say
            asking = len(workers.endpoints)
            return PairEstimate(
                target, draft, t_est, d_est, n_ctx, kv, available, None, None, asking
            )
        split = split_memory(
            target, draft, n_ctx, kv,
            worker_layers=workers.layers, workers=workers.answers, available=available,
        )  # fmt: skip
        warning = " ".join(split.problems) or None
        return PairEstimate(target, draft, t_est, d_est, n_ctx, kv, available, warning, split)
    warning = check_fits(
        target, draft, n_ctx, kv_type=kv, gpu_layers=gpu_layers, available=available
    )
    return PairEstimate(target, draft, t_est, d_est, n_ctx, kv, available, warning)


@dataclass(frozen=True)
class Workers:
    """The workers of the settings, their layer count and their answers (None: asking)."""

    endpoints: tuple[str, ...]
    layers: int  # 0: all
    answers: tuple[WorkerMemory, ...] | None


class MemoryView(QGroupBox):
    """Each side's weights, KV cache, compute and other memory, the total, and
    a bar of its share of the memory available now."""

    def __init__(self) -> None:
        super().__init__("Memory")
        self.label = QLabel()
        self.label.setObjectName("memoryLabel")
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.bar = QProgressBar()
        self.bar.setObjectName("memoryBar")
        self.bar.setTextVisible(False)
        self.bar.setRange(0, PROGRESS_STEPS)
        self.bar.setFixedHeight(6)
        memory = QVBoxLayout()
        memory.setSpacing(6)
        memory.addWidget(self.label)
        memory.addWidget(self.bar)
        self.setLayout(memory)

    def show_failure(self, why: str) -> None:
        self.label.setText(f"No estimate: {html(why)}")
        self.bar.hide()

    def show_estimate(self, est: PairEstimate) -> None:
        palette = self.label.palette()
        muted = theme.muted(palette).name()
        rows = _line("Target", est.target, est.target_est, muted)
        if est.draft is not None and est.draft_est is not None:
            rows += _line("Draft", est.draft, est.draft_est, muted)
        rows += (
            f"<tr><td><b>Total</b></td><td align='right'><b>{format_bytes(est.total)}</b></td></tr>"
        )
        text = (
            f"<table width='100%' cellspacing='0' cellpadding='1'>{rows}</table>"
            f"<p style='color:{muted}'>At {est.n_ctx:,} tokens of context "
            f"({est.kv.upper()} KV cache), "
            f"against {format_bytes(est.available)} of memory available now.</p>"
        )
        if est.asking:
            n = est.asking
            text += (
                f"<p style='color:{muted}'>Asking the {counted(n, 'worker')} for "
                "their free memory, to split the target's layers…</p>"
            )
        if est.split is not None:
            text += split_table(est.split, est.draft is not None)
        if est.warning:
            amber = theme.pick(theme.WARN, palette).name()
            verdict = "Will not load" if est.split and est.split.unreachable else "Will not fit"
            text += f"<p style='color:{amber}'><b>⚠ {verdict}.</b> {html(est.warning)}</p>"
        self.label.setText(text)
        self._show_share(est)

    def _show_share(self, est: PairEstimate) -> None:
        palette = self.label.palette()
        share = est.local / est.available if est.available > 0 else 1.0
        self.bar.setValue(min(PROGRESS_STEPS, max(1, round(share * PROGRESS_STEPS))))
        tone: Tone = "bad" if est.warning else ("warn" if share > 0.6 else "good")
        chunk = theme.tone_colour(tone, palette).name()
        groove = theme.faint(palette).name()
        self.bar.setStyleSheet(
            f"QProgressBar#memoryBar {{ border: none; border-radius: 3px; background: {groove}; }}"
            f" QProgressBar#memoryBar::chunk {{ border-radius: 3px; background: {chunk}; }}"
        )
        self.bar.setToolTip(f"{share:.1%} of the memory available now")
        self.bar.show()


def _line(role: str, info: ModelInfo, est: MemoryEstimate, muted: str) -> str:
    parts = " · ".join(
        f"{what} {est_bytes / MIB:,.1f}"
        for what, est_bytes in (
            ("weights", est.weights_bytes),
            ("KV cache", est.kv_bytes),
            ("compute", est.compute_bytes),
            ("other", est.overhead_bytes),
        )
    )
    return (
        f"<tr><td><b>{role}</b>&nbsp; {html(info.path.name)}</td>"
        f"<td align='right'>&nbsp;&nbsp;{format_bytes(est.total_bytes)}</td></tr>"
        f"<tr><td colspan='2' style='color:{muted}'>{parts} MiB</td></tr>"
    )


def split_table(split: MemorySplit, with_draft: bool) -> str:
    """Each worker's layers and memory against its free memory (or that it does
    not answer), then what stays on this machine."""
    rows = ""
    for share in split.shares:
        what = counted(share.layers, "layer")
        what += " + output" if share.output else ""
        free = format_bytes(share.worker.free)
        flag = "" if share.fits else " ⚠"
        rows += (
            f"<tr><td>{html(share.worker.endpoint)}&nbsp; {what}</td>"
            f"<td align='right'>&nbsp;&nbsp;{format_bytes(share.bytes)} of {free} free{flag}"
            "</td></tr>"
        )
    for worker in split.unreachable:
        rows += (
            f"<tr><td>{html(worker.endpoint)}</td>"
            "<td align='right'>&nbsp;&nbsp;unreachable ⚠</td></tr>"  # (why: in the warning)
        )
    here = f"{counted(split.local_layers, 'layer')}, embeddings"
    here += ", the draft" if with_draft else ""
    rows += (
        f"<tr><td><b>This machine</b>&nbsp; {here}</td>"
        f"<td align='right'>&nbsp;&nbsp;<b>{format_bytes(split.local_bytes)}</b> of "
        f"{format_bytes(split.available)} available</td></tr>"
    )
    return (
        f"<p><b>Split over the workers</b> ({split.n_layer} layers)</p>"
        f"<table width='100%' cellspacing='0' cellpadding='1'>{rows}</table>"
    )
