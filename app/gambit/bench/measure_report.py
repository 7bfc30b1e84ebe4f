"""What a measurement on the user's chats says: the kind of each turn, this
machine's regime in a sentence, the recommendation and its reason, and the
CSV export. Pure functions of the report (``gambit.measure``), no engine, so
an earlier measurement read back from disk is explained the same way.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gambit.bench import TARGET_ONLY
from gambit.bench_regimes import BANDWIDTH_BOUND_BELOW
from gambit.engine.controller import GammaController

# Speculation has to beat plain decoding by the controller's own switch-on
# margin before it is worth recommending: below it, noise could be the gain.
PAYS_FROM = GammaController.ON_ABOVE
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


def _choose(all_modes: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The fastest configuration, or the adaptive one of its drafter when that
    is within ADAPTIVE_SLACK of it."""
    candidates = [m for m in all_modes if m != TARGET_ONLY and m in info]
    if not candidates:
        return None
    best = max(candidates, key=lambda m: all_modes[m]["speedup"])
    b = info[best]
    if b["policy"] != "adaptive":
        for m in candidates:
            i = info[m]
            if (i["drafter"], i["tree"], i["policy"]) == (b["drafter"], b["tree"], "adaptive") and (
                all_modes[m]["speedup"] >= all_modes[best]["speedup"] - ADAPTIVE_SLACK
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
    base: dict[str, Any] = {"threshold": PAYS_FROM, "mode": None, "off": True, "speedup": 1.0}
    if chosen is None:
        return {
            **base,
            "headline": "Speculation off",
            "reason": "no drafter was compared: there is nothing that could pay",
        }
    speedup = float(all_modes[chosen]["speedup"])
    if speedup < PAYS_FROM:
        return {**base, "headline": "Speculation off", "reason": _off_reason(all_modes, info)}
    mode = info[chosen]
    label = mode["label"]
    reason = _kinds_reason(report, chosen, speedup)
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
        "policy": "adaptive" if mode["policy"] == "adaptive" else "fixed",
        "gamma": mode["gamma"],
        "tree": mode["tree"],
        "headline": f"{label[:1].upper()}{label[1:]}: {speedup:.2f}x on your chats",
        "reason": reason,
    }


def _off_reason(all_modes: Mapping[str, Any], info: Mapping[str, Mapping[str, Any]]) -> str:
    """Why nothing pays: the best that placed a bet, and those that never did
    (an adaptive policy that stayed off claims no speedup: 1.00x by definition)."""
    modes = [m for m in all_modes if m != TARGET_ONLY and m in info]
    drafted = [m for m in modes if all_modes[m].get("drafted_tokens", 1)]
    idle = [info[m]["label"] for m in modes if m not in drafted]
    bar = (
        f"speculation has to reach {PAYS_FROM:.2f}x ({PAYS_FROM - 1:.0%} faster) "
        "to be worth switching on"
    )
    if not drafted:
        return f"no configuration found drafts worth trying on your chats ({_and(idle)}); {bar}"
    best = max(drafted, key=lambda m: all_modes[m]["speedup"])
    text = (
        f"nothing paid on your chats: the best that drafted, {info[best]['label']}, ran at "
        f"{float(all_modes[best]['speedup']):.2f}x plain decoding"
    )
    if idle:
        text += f" ({_and(idle)} never drafted)"
    return f"{text}, and {bar}"


def _kinds_reason(report: Mapping[str, Any], mode: str, speedup: float) -> str:
    kinds = {
        k: float(v[mode]["speedup"])
        for k, v in report["suites"].items()
        if k != "ALL" and mode in v
    }
    turns = report.get("turns", 0)
    if len(kinds) <= 1:
        kind = next(iter(kinds), "chat")
        return f"measured on {turns} {kind} turn{'s' if turns != 1 else ''} of yours"
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
    return f"{value:.6g}" if isinstance(value, float) else value
