"""The γ policy's decisions in words a user follows (the statistics panel's
"controller:" line, the command line's summary, the server's figures).

Pure functions of what the controller decided and the figures behind it, so
each sentence can be read and tested apart from the policy that makes it
(``gambit.engine.gamma.controller`` decides; this module explains).
"""

from __future__ import annotations

from gambit.engine.estimates import CostModel


def percent(speedup: float) -> str:
    """How far ``speedup`` is from 1, in per cent: "2 %", "4.9 %", "38 %"."""
    p = abs(speedup - 1.0) * 100
    return f"{p:.0f} %" if p >= 10 or round(p, 1) == round(p) else f"{p:.1f} %"


def fixed_reason(gamma: int, side: int, speedup: float, off_below: float) -> str:
    shape = f"γ={gamma}" + (f" + {side} side" if side else "")
    slower = ", slower than plain decoding" if speedup < off_below else ""
    return f"fixed {shape}: expected {speedup:.2f}x{slower}"


def on_reason(gamma: int, side: int, best: float, off_below: float, cut: bool = False) -> str:
    """``cut``: the draft stops early where it is unsure (``ConfidenceCut``)."""
    shape = f"γ={gamma}" + (f" with {side} side nodes" if side else "")
    if cut:
        shape = f"up to {shape}, less where the draft is unsure"
    return f"on: drafting {shape}, expected {best:.2f}x; off if that falls below {off_below:.2f}x"


def off_reason(best: float, on_above: float, off_below: float) -> str:
    need = percent(on_above)
    if best < off_below:
        return (
            f"off: a draft would lose {percent(best)} (expected {best:.2f}x); "
            f"on once it would gain more than {need}"
        )
    gain = f"off: a draft would gain {percent(best)}"
    if best <= on_above:
        return f"{gain}, below the {need} needed to switch on"
    return f"{gain}, more than the {need} needed: switching on"


def probe_reason(gamma: int, on_above: float) -> str:
    return (
        f"probing: trying γ={gamma} to re-measure acceptance "
        f"(on if a draft would gain more than {percent(on_above)})"
    )


def cannot_pay_reason(
    ceiling: float, gamma: int, costs: CostModel, off_below: float, every: int
) -> str:
    """Why even drafts of ``gamma`` tokens that always land would (hardly) pay
    (``ceiling``: their expected speedup): the batch and draft costs, and how
    many tokens pass before they are measured again (``every``)."""
    batch = costs.verify_cost(gamma + 1) / costs.verify_cost(1)
    why = f"verifying {gamma + 1} tokens costs {batch:.2f} plain steps"
    if costs.draft_ratio > 0:
        why += f" and each draft step {costs.draft_ratio:.2f}"
    if ceiling < off_below:
        head, best = "cannot pay here", f"would reach only {ceiling:.2f}x"
    else:
        head, best = "little to gain here", f"would gain only {percent(ceiling)}"
    return (
        f"off: {head}: even if every draft were accepted, γ={gamma} {best} ({why}); "
        f"measured again every {every:,} tokens"
    )
