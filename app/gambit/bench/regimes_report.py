"""The regime benchmark's report as tables and a chart (``gambit.bench.regimes``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gambit.bench.runner import TARGET_ONLY
from gambit.words import counted


def _ms(value: float | None) -> str:
    return f"{value:.0f}" if value else "-"


def _ratio(value: float | None, interval: list[float] | None, unit: str = "") -> str:
    """``value`` and, where there is one, its 95 % interval: "1.02x (0.95-1.09)";
    "-" where nothing was measured to give it."""
    if value is None:
        return "-"
    if not interval:
        return f"{value:.2f}{unit}"
    return f"{value:.2f}{unit} ({interval[0]:.2f}-{interval[1]:.2f})"


def _worst(row: dict[str, Any] | None) -> str:
    """The worst prompt's ratio and what it is held to: "0.91 ÷ fixed=8 (code #2)"
    where some fixed γ paid (gambit.bench.paired.PAYS_FROM), "0.97 ÷ plain" where none did."""
    if not row:
        return "-"
    return f"{_judged(row)} ({row['prompt']})"


def _judged(row: dict[str, Any]) -> str:
    """A prompt's judged ratio and what it is judged against, as "0.97 ÷ fixed=8"."""
    against, ratio = row["judged"]
    return f"{ratio:.2f} ÷ {row['best_fixed'] if against == 'best fixed' else 'plain'}"


def per_prompt_lines(report: dict[str, Any]) -> list[str]:
    """Prompt by prompt for every pair (all suites): adaptive's speedup, the
    best fixed γ's for that prompt, and adaptive ÷ that fixed γ."""
    lines = []
    samples = int(report.get("samples", 1))
    each = f" (each prompt over its {samples} sampled replies per mode)" if samples > 1 else ""
    for pair in report["pairs"]:
        figures = pair.get("suites", {}).get("ALL", {})
        rows = figures.get("per_prompt")
        if not rows:
            continue
        name = f"{pair.get('label', pair['target'])} + {drafter_label(pair)}"
        alone = figures.get("adaptive_vs_model_alone")
        if alone:
            interval = figures.get("adaptive_vs_model_alone_interval")
            lines.append(
                f"{name}: adaptive ÷ the same policy with the draft model alone, "
                f"alternated on this engine: {_ratio(alone, interval)}"
                + _of_ceiling(alone, figures.get("lookup_ceiling"))
            )
        after = figures.get("adaptive_vs_best_fixed_after_first_token")
        speedup = figures.get("adaptive_after_first_token")
        if speedup is not None:
            lines.append(
                f"{name}: after the first token, a draft model's reading of the prompt "
                f"counted, over the suite: adaptive {speedup:.2f}x target-only"
                + (
                    f", {after:.2f} of {figures['after_first_token_best_fixed']}"
                    if after is not None
                    else ""
                )
            )
        lines.append(
            f"{name}, prompt by prompt: adaptive, the best fixed γ for the prompt, adaptive ÷ it"
            + (" (and as judged after the first token)" if speedup is not None else "")
            + (", adaptive ÷ the draft model alone (÷ its ceiling)" if alone else "")
            + each
        )
        for row in rows:
            best = row["best_fixed"]
            versus = row["vs_best_fixed"]
            vs_alone = row.get("vs_model_alone")
            waited = row.get("after_first_token")
            lines.append(
                f"  {row['prompt']:<12} {row['speedup']:.2f}x  "
                + (f"{best} {row['best_fixed_speedup']:.2f}x  {versus:.2f}" if best else "-")
                + (f" ({_judged(waited)})" if waited else "")
                + (f"  {vs_alone:.2f}" if vs_alone is not None else "")
                + (
                    f" ({vs_alone / row['lookup_ceiling']:.2f} of {row['lookup_ceiling']:.2f})"
                    if vs_alone is not None and "lookup_ceiling" in row
                    else ""
                )
            )
    return lines


def _of_ceiling(ratio: float, ceiling: float | None) -> str:
    """What a ratio over the draft model alone is of the most lookup could
    add with perfect foresight (gambit.bench.foresight)."""
    if not ceiling:
        return ""
    return f"; {ratio / ceiling:.2f} of the ceiling of {ceiling:.2f}x the replies allowed"


def drafter_label(pair: dict[str, Any]) -> str:
    """ "draft", or with the draft model named where it is another network's:
    "draft gemma.gguf (through text)"."""
    draft, how = pair.get("draft"), pair.get("draft_how")
    if not draft or (how == "tokens" and draft == pair.get("source")):
        return str(pair["drafter"])
    return f"{pair['drafter']} {draft}" + (" (through text)" if how == "through text" else "")


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per target × drafter × suite, the cost-scaled (realistic) rows first."""
    rows = []
    pairs = sorted(report["pairs"], key=lambda p: not p.get("scaled", False))
    for pair in pairs:
        if "skipped" in pair:
            continue
        for suite, f in pair["suites"].items():
            modes = f["modes"]
            plain, adaptive = modes[TARGET_ONLY], modes["adaptive"]
            eff = f["round_efficiency"].get("4")
            t5 = pair["costs"]["t_ratio"]["5"]
            draft = pair["costs"].get("draft_ratio", 0.0)
            bound = f["bound"]
            gaps = (
                f"{_ms(plain['p99_ms'])} / {_ms(adaptive['p99_ms'])}"
                f" / {_ms(adaptive.get('p99_shown_ms'))}"
            )
            rows.append(
                [
                    f"{pair.get('label', pair['target'])} ({pair['regime']}, t5/t1 {t5:.2f}"
                    + (f", draft {draft:.2f}" if draft else "")
                    + ")",
                    drafter_label(pair),
                    suite,
                    f"{plain['tokens_per_s']:.1f}",
                    _ratio(adaptive["speedup"], f.get("adaptive_speedup_interval"), "x"),
                    f"{f['best_fixed']} {f['best_fixed_speedup']:.2f}x" if f["best_fixed"] else "-",
                    _ratio(f["adaptive_vs_best_fixed"], f.get("adaptive_vs_best_fixed_interval")),
                    _ratio(f.get("adaptive_vs_held_out_fixed"), None),
                    _worst(f.get("worst_prompt")),
                    _ratio(bound, None, "x"),
                    _ratio(adaptive["speedup"] / bound if bound else None, None),
                    _ratio(f["adaptive_end_to_end"], None, "x"),
                    _ratio(f.get("best_fixed_end_to_end"), None, "x"),
                    _ratio(f.get("ttft_ratio"), None),
                    gaps,
                    f"{adaptive['acceptance_rate']:.0%}",
                    f"{adaptive.get('mean_gamma', 0.0):.1f}",
                    f"{eff:.2f}" if eff else "-",
                    f["divergence"] or "-",
                ]
            )
    return rows


HEADER = [
    "target (regime)", "drafter", "suite", "plain tok/s", "adaptive", "best fixed",
    "adapt/best (95 %)", "adapt/held-out best",
    "worst prompt", "bound", "adapt/bound", "adaptive e2e",
    "best fixed e2e", "TTFT adapt/plain",
    "p99 gap ms plain / adapt / shown", "accept", "mean γ", "round eff γ4", "diverged",
]  # fmt: skip


def markdown_table(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    per_prompt = per_prompt_lines(report)
    if per_prompt:
        lines += ["", "```", *per_prompt, "```"]
    return "\n".join(lines)


def text_table(report: dict[str, Any]) -> str:
    rows = [HEADER, *table_rows(report)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.insert(1, "-" * len(out[0]))
    per_prompt = per_prompt_lines(report)
    return "\n".join(out + (["", *per_prompt] if per_prompt else []))


def save_chart(report: dict[str, Any], path: Path) -> None:
    """A bar chart (adaptive, best fixed, bound) per target × drafter, rendered offscreen."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCharts import (
        QBarCategoryAxis,
        QBarSeries,
        QBarSet,
        QChart,
        QChartView,
        QValueAxis,
    )
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QPainter
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    pairs = [p for p in report["pairs"] if "skipped" not in p]
    series = QBarSeries()
    names = ("adaptive", "best fixed", "cost-model bound")
    sets = {n: QBarSet(n) for n in names}
    categories = []
    top = 1.0
    for p in pairs:
        f = p["suites"]["ALL"]
        categories.append(f"{p['target']} + {drafter_label(p)}")
        # a policy not run (--fixed none) is a bar of height 0: no bar
        values = (f["adaptive_speedup"], f["best_fixed_speedup"] or 0.0, f["bound"] or 0.0)
        for n, v in zip(names, values, strict=True):
            sets[n].append(v)
        top = max(top, *values)
    for s in sets.values():
        series.append(s)
    chart = QChart()
    chart.addSeries(series)
    machine = report["machine"]
    chart.setTitle(
        f"Speedup over target-only, all suites — {machine.get('cpu_model', machine['cpu'])}, "
        f"{counted(machine['threads'], 'thread')}"
    )
    x = QBarCategoryAxis()
    x.append(categories)
    y = QValueAxis()
    y_max = math.ceil(top * 4) / 4
    y.setRange(0.0, y_max)
    y.setTickCount(int(y_max * 4) + 1)  # a line every 0.25x
    y.setLabelFormat("%.2f")
    y.setTitleText("speedup (×)")
    chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
    chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
    series.attachAxis(x)
    series.attachAxis(y)
    view = QChartView(chart)
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
    view.resize(max(900, 150 * len(categories)), 520)
    path.parent.mkdir(parents=True, exist_ok=True)
    view.grab().save(str(path))
    del app
