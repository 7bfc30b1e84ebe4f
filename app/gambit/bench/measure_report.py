"""What a measurement on the user's chats says: the kind of each turn, this
machine's regime in a sentence, the recommendation and its reason, and the
CSV export. Pure functions of the report (``gambit.bench.measure``), no engine, so
an earlier measurement read back from disk is explained the same way.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gambit.bench.costs import BANDWIDTH_BOUND_BELOW
from gambit.bench.runner import TARGET_ONLY
from gambit.engine.gamma.policy import SWITCH_ON_ABOVE
from gambit.words import counted

# Speculation has to beat plain decoding by the controller's own switch-on
# margin before it is worth recommending: below it, noise could be the gain.
PAYS_FROM = SWITCH_ON_ABOVE
# An adaptive policy within this share of the best fixed γ of the same drafter
# is recommended instead: it follows the user's chats as they change.
ADAPTIVE_SLACK = 0.02

KINDS = ("code", "rewriting", "chat")

_CODE = re.compile(
    r"```|#include|=>|\bdef \w+\(|\bclass \w+[:(]|\bimport \w+|\bfunction\b|"
    r"\b(code|python|javascript|typescript|rust|golang|java|sql|regex|script|compile[rd]?|"
    r"bug|stack ?trace|exception|snippet)\b|[{};]\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_REWRITING = re.compile(
    r"\b(rewrite|re-write|rephrase|paraphrase|reword|summari[sz]e|summary|translate|"
    r"proofread|shorten|simplify|edit|polish|correct|fix (the|my|this) (grammar|spelling|text))",
    re.IGNORECASE,
)


def turn_kind(text: str) -> str:
    """ "code", "rewriting" or "chat": a rough label to tell which chats profit
    (drafters that copy, like prompt lookup, gain most where the reply repeats
    its input)."""
    if _CODE.search(text):
        return "code"
    if _REWRITING.search(text):
        return "rewriting"
    return "chat"


def regime_sentence(t_ratio_5: float, target: str) -> tuple[str, str]:
    """(regime, one sentence) from the measured t(5)/t(1) of ``target``."""
    if t_ratio_5 < BANDWIDTH_BOUND_BELOW:
        return "bandwidth-bound", (
            f"This machine is bandwidth-bound with {target}: checking 5 tokens at once costs "
            f"only {t_ratio_5:.2f}× one token (measured t(5)/t(1)), so even drafts that are "
            "often wrong can pay."
        )
    return "compute-bound", (
        f"This machine is compute-bound with {target}: checking 5 tokens at once costs "
        f"{t_ratio_5:.2f}× one token (measured t(5)/t(1)), so a draft pays only when most "
        "of its tokens are accepted."
    )


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _claims(all_modes: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The configurations with a speedup to claim: those that had a draft accepted."""
    return [
        m for m in all_modes
        if m != TARGET_ONLY and m in info and all_modes[m].get("speedup") is not None
    ]  # fmt: skip


def _choose(all_modes: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The fastest configuration, or the adaptive one of its drafter when that
    is within ADAPTIVE_SLACK of it."""
    candidates = _claims(all_modes, info)
    if not candidates:
        return None
    best = max(candidates, key=lambda m: all_modes[m]["speedup"])
    b = info[best]
    if b["policy"] != "adaptive":
        for m in candidates:
            i = info[m]
            same = (i["drafter"], i["tree"], i.get("draft")) == (
                b["drafter"],
                b["tree"],
                b.get("draft"),
            )
            if (
                same
                and i["policy"] == "adaptive"
                and (all_modes[m]["speedup"] >= all_modes[best]["speedup"] - ADAPTIVE_SLACK)
            ):
                return m
    return best


def recommend(report: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration to use, with its reason, or speculation off.

    Reads ``suites`` (kinds and "ALL"), ``modes`` (what each mode is) and
    the turns replayed; returns ``headline``, ``reason`` and what to set
    (``off``; else ``drafter``, ``policy``, ``gamma``, ``tree``).
    """
    all_modes = report["suites"].get("ALL", {})
    info = {m["name"]: m for m in report["modes"]}
    chosen = _choose(all_modes, info)
    base: dict[str, Any] = {
        "threshold": PAYS_FROM, "mode": None, "off": True, "speedup": 1.0, "apply": True,
    }  # fmt: skip
    if not any(m != TARGET_ONLY and m in info for m in all_modes):
        return {
            **base,
            "headline": "Speculation off",
            "reason": "no drafter was compared: there is nothing that could pay",
        }
    if chosen is None or float(all_modes[chosen]["speedup"]) < PAYS_FROM:
        return {**base, "headline": "Speculation off", "reason": _off_reason(all_modes, info)}
    speedup = float(all_modes[chosen]["speedup"])
    mode = info[chosen]
    label = mode["label"]
    noise = float(report.get("noise") or 0.0)
    if speedup - 1.0 <= noise:
        return {
            **base,
            "apply": False,
            "headline": "Not enough evidence yet: measure more turns",
            "reason": (
                f"the best, {label}, ran at {speedup:.2f}x plain decoding, but plain decoding "
                f"itself varied by {noise:.0%} between two runs of the same turns"
                + _busy_clause(report)
            ),
        }
    reason = _kinds_reason(report, chosen, speedup)
    reason += _busy_clause(report)
    divergence = all_modes[chosen].get("divergence_rate") or 0.0
    if divergence:
        reason += (
            f"; {divergence:.0%} of its greedy replies differed from plain decoding "
            "(batched kernels round differently at near-ties)"
        )
    return {
        **base,
        "off": False,
        "mode": chosen,
        "speedup": speedup,
        "drafter": mode["drafter"],
        "draft_model": mode.get("draft"),  # a candidate draft of the library (None: the loaded one)
        "policy": "adaptive" if mode["policy"] == "adaptive" else "fixed",
        "gamma": mode["gamma"],
        "tree": mode["tree"],
        "headline": f"{label[:1].upper()}{label[1:]}: {speedup:.2f}x on your chats",
        "reason": reason,
    }


def _busy_clause(report: Mapping[str, Any]) -> str:
    """ "; the machine was busy during 12 of 40 replays (...)" or ""."""
    busy = report.get("busy") or {}
    n, of = int(busy.get("replays", 0)), int(busy.get("of", 0))
    if not n:
        return ""
    cores = float(busy.get("other_cores", 0.0))
    return (
        f"; other programs kept the machine busy during {n} of {of} replays "
        f"({cores:.1f} cores on average), which makes every figure less certain"
    )


def _off_reason(all_modes: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]]) -> str:
    """Why nothing pays: the best that had drafts accepted, and those that never
    did (they claim no speedup: nothing they drafted was used)."""
    modes = [m for m in all_modes if m != TARGET_ONLY and m in info]
    drafted = _claims(all_modes, info)
    idle = [info[m]["label"] for m in modes if m not in drafted]
    bar = (
        f"speculation has to reach {PAYS_FROM:.2f}x ({PAYS_FROM - 1:.0%} faster) "
        "to be worth switching on"
    )
    if not drafted:
        return f"no configuration had a draft accepted on your chats ({_and(idle)}); {bar}"
    best = max(drafted, key=lambda m: all_modes[m]["speedup"])
    text = (
        f"nothing paid on your chats: the best with drafts accepted, {info[best]['label']}, ran at "
        f"{float(all_modes[best]['speedup']):.2f}x plain decoding"
    )
    if idle:
        text += f" ({_and(idle)} had no draft accepted)"
    return f"{text}, and {bar}"


def _kinds_reason(report: Mapping[str, Any], mode: str, speedup: float) -> str:
    kinds = {
        k: float(v[mode]["speedup"])
        for k, v in report["suites"].items()
        if k != "ALL" and mode in v and v[mode].get("speedup") is not None
    }
    turns = report.get("turns", 0)
    if len(kinds) <= 1:
        kind = next(iter(kinds), "chat")
        return f"measured on {counted(turns, kind + ' turn')} of yours"
    ranked = sorted(kinds, key=lambda k: -kinds[k])
    gaining = [k for k in ranked if kinds[k] >= speedup][:2] or ranked[:1]
    rest = [f"{k} {kinds[k]:.2f}x" for k in ranked if k not in gaining]
    text = f"{_and(gaining)} gain{'s' if len(gaining) == 1 else ''} most"
    text += " (" + ", ".join(f"{kinds[k]:.2f}x" for k in gaining) + ")"
    return text + (f"; {', '.join(rest)}" if rest else "")


# Top-level fields repeated on every CSV row, so that rows from several
# measurements can be put in one sheet and still be told apart.
CSV_CONTEXT = ("started", "target", "draft", "drafter", "temperature", "seed", "max_tokens")


def report_csv(report: Mapping[str, Any]) -> str:
    """One row per suite × mode with every figure (the ``suites`` of
    ``gambit-cli bench --json``), and the context columns first."""
    rows = [
        (suite, mode, figures)
        for suite, by_mode in report["suites"].items()
        for mode, figures in by_mode.items()
    ]
    keys: list[str] = []
    for _, _, figures in rows:
        keys += [k for k in figures if k not in keys]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_CONTEXT, "suite", "mode", *keys])
    context = [report.get(k, "") for k in CSV_CONTEXT]
    for suite, mode, figures in rows:
        writer.writerow([*context, suite, mode, *(_cell(figures.get(k)) for k in keys)])
    return out.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, Mapping):  # accepted tokens by source: "70 prompt lookup; 26 draft model"
        return "; ".join(f"{n} {name}" for name, n in value.items())
    return f"{value:.6g}" if isinstance(value, float) else value


def baseline_noise(pairs: Sequence[tuple[tuple[int, float], tuple[int, float]]]) -> float:
    """How far two target-only runs of the same turns differ, as a share: the
    difference of their overall rates, plus twice the standard error of the
    per-turn ratios (few turns: wide). A gain must clear it to count."""
    if not pairs:
        return 0.0
    first = sum(a[0] for a, _ in pairs) / max(sum(a[1] for a, _ in pairs), 1e-9)
    again = sum(b[0] for _, b in pairs) / max(sum(b[1] for _, b in pairs), 1e-9)
    overall = abs(again / first - 1.0) if first > 0 else 0.0
    ratios = [
        math.log((b[0] / b[1]) / (a[0] / a[1]))
        for a, b in pairs
        if min(a[0], b[0]) > 0 and min(a[1], b[1]) > 0
    ]
    error = statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else 0.0
    return overall + 2.0 * (math.exp(error) - 1.0)
