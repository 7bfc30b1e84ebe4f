"""Which quantizations are worth deriving as a draft of a target, and what they
may gain: said before the user spends minutes deriving one.

A quantized self-draft is the target's own network with fewer bits, so it
drafts well but costs a good share of a target step. A decoding step costs
about the bytes of weights it streams (``memory.bytes_read_per_token``), so a
quantization reading less than ``MIN_SAVING`` fewer bytes per token than the
target (a Q4_0 draft of a Q4_1 target: ~7 % fewer) cannot pay for its
rejected guesses and is not offered; the advice says why for each one left out.

The gain is estimated with the controller's own model of a round
(``layerskip.expected_speedup``, the same arithmetic the adaptive policy runs):

- verification cost t(k)/t(1): measured on this machine when a kernel probe
  of the target is cached (``KernelProbe.cached``: t(k_max)/t(1), linear in
  between, as ``CostModel`` interpolates); otherwise assumed flat, a batch
  costing one token, as on memory-bound hardware (a GPU, a big model on a
  laptop), which is the best case and is said to be an assumption;
- a draft step: its share of the bytes read per token (an assumption: the
  draft does not exist yet);
- acceptance: unknown until measured, so the advice gives the most any draft
  could gain (every guess accepted), the acceptance it needs to pay at all,
  and the gain at ``ASSUMED_ACCEPTANCE``.

A quantized copy drafts with the target's own network: its step costs a
quarter to a half of a target step, and such pairs gain little (measured on a
CPU: 0.95-1.3x). A smaller model of the same family (a 0.5B draft for a 7B
target) drafts at about a tenth of a step, which is where speculation wins
(measured on a pair built with those costs: ~2.2x, docs/performance.md). The
advice says what such a draft would gain on the same cost curve
(``DeriveAdvice.small_model``), so the two are compared on one footing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gambit.engine.estimates import CostModel
from gambit.engine.gamma.policy import DEFAULT_GAMMA_MAX
from gambit.engine.machine.kernels import KernelProbe
from gambit.formats.gguf_file import check_model_file
from gambit.formats.gguf_info import quantization_name
from gambit.models.derive import estimate_output_size, estimate_tensor_bytes
from gambit.models.layerskip_search import expected_speedup
from gambit.models.memory import MIB, MIN_DRAFT_SAVING, bytes_read_per_token

# What may be derived as a draft, most faithful (most bits) first.
CANDIDATE_TYPES: tuple[str, ...] = ("Q8_0", "Q4_1", "Q4_0", "Q4_K_M", "Q3_K_M", "Q2_K")
MIN_SAVING = MIN_DRAFT_SAVING  # a draft must read at least this share fewer bytes per token
ASSUMED_ACCEPTANCE = 0.8  # for the "about N x" figure; the real one is measured after
GAMMA_MAX = DEFAULT_GAMMA_MAX
# A draft step of a smaller model of the family, as a share of a target step
# (a 0.5B draft for a 7B target; measured on the cost-scaled pair: 0.10-0.15).
SMALL_DRAFT_RATIO = 0.1


@dataclass(frozen=True)
class CostCurve:
    """t_target(k) / t_target(1) for k = 1..k_max, and where it comes from."""

    ratios: tuple[float, ...]
    measured: bool
    source: str  # one sentence for the user

    def cost_model(self, gamma_max: int = GAMMA_MAX) -> CostModel:
        k_max = max(len(self.ratios), gamma_max + 1)
        costs = CostModel(k_max)
        for k, ratio in enumerate(self.ratios, 1):
            costs.set_target(k, ratio)
        return costs


def assumed_curve(k_max: int = GAMMA_MAX + 1) -> CostCurve:
    return CostCurve(
        ratios=(1.0,) * k_max,
        measured=False,
        source=(
            "Verification assumed to cost about one token per batch, as on a GPU or with a "
            "large model; not measured here yet (load the model once and Gambit measures "
            "it), and on a CPU it often costs 2-3x more, which lowers the gain."
        ),
    )


def cached_curve(
    target: Path,
    *,
    n_threads: int,
    n_gpu_layers: int = 0,
    k_max: int = GAMMA_MAX + 1,
    exact: bool = True,
    cache_dir: Path | None = None,
) -> CostCurve | None:
    """The target's verification cost as the kernel probe measured it on this
    machine (the configuration the engine would run), or None if never probed."""
    verdict = KernelProbe(cache_dir).cached(target, n_threads, n_gpu_layers, k_max)
    if verdict is None:
        return None
    result = verdict.result(verdict.exact() if exact else verdict.fastest())
    if result is None or not result.ok or result.t1_s <= 0 or result.k_max < 2:
        return None
    top = result.tk_s / result.t1_s
    k = result.k_max
    ratios = tuple(1.0 + (top - 1.0) * (i - 1) / (k - 1) for i in range(1, k + 1))
    return CostCurve(
        ratios=ratios,
        measured=True,
        source=(
            f"Verification cost measured on this machine: a batch of {k} tokens takes "
            f"{top:.2f}x one token's time."
        ),
    )


@dataclass(frozen=True)
class DraftOption:
    """One quantization as a draft of the target."""

    ftype: str
    file_bytes: int  # about what the derived file will take
    read_bytes: int  # weights read per token
    read_ratio: float  # of the target's
    why_not: str | None  # None: offered
    best_gamma: int
    ceiling: float  # expected speedup if every guess were accepted
    break_even: float | None  # acceptance from which it pays; None: never here
    at_assumed: float  # expected speedup at ASSUMED_ACCEPTANCE

    @property
    def offered(self) -> bool:
        return self.why_not is None

    def label(self) -> str:
        """The choice as a list shows it: ``"Q2_K  ·  about 52 MiB"`` (``estimate`` says more)."""
        return f"{self.ftype}  ·  about {self.file_bytes / MIB:.0f} MiB"

    def estimate(self) -> str:
        """What it may gain, in a sentence or two (see the module docstring)."""
        step = (
            f"A {self.ftype} draft step should cost about {self.read_ratio:.2f} of a target "
            "step (its share of the bytes read per token; assumed until measured)."
        )
        if self.break_even is None:
            return (
                f"{step} Even if the target accepted every guess, drafting would reach only "
                f"{self.ceiling:.2f}x here: it cannot pay on this machine."
            )
        return (
            f"{step} At most {self.ceiling:.2f}x if every guess were accepted; it pays only "
            f"if the target accepts more than {_percent(self.break_even)} of its guesses; at "
            f"{_percent(ASSUMED_ACCEPTANCE)}, about {self.at_assumed:.2f}x. Measure it after "
            "deriving."
        )


@dataclass(frozen=True)
class DeriveAdvice:
    target: Path
    target_type: str
    target_read_bytes: int
    curve: CostCurve
    options: tuple[DraftOption, ...]

    small_model_speedup: float = 1.0  # at ASSUMED_ACCEPTANCE, a step of SMALL_DRAFT_RATIO

    @property
    def offered(self) -> list[DraftOption]:
        return [o for o in self.options if o.offered]

    def small_model(self) -> str:
        """What a smaller model of the same family would gain here, for comparison."""
        return (
            "A quantized copy drafts with this model's own network, so each step costs a "
            "good share of a target step and the gain is modest. A smaller model of the same "
            "family (a 0.5B draft for a 7B target) drafts at about a tenth of a step: on the "
            f"same costs, about {self.small_model_speedup:.2f}x at "
            f"{_percent(ASSUMED_ACCEPTANCE)} acceptance. Choose one under Draft model if "
            "you have it."
        )

    def option(self, ftype: str) -> DraftOption | None:
        return next((o for o in self.options if o.ftype == ftype), None)

    def missing(self) -> str:
        """Why the quantizations not offered are missing, one sentence; "" if none is."""
        left_out = [f"{o.ftype} ({o.why_not})" for o in self.options if not o.offered]
        if not left_out:
            return ""
        return (
            f"Not offered for this {self.target_type} model: " + "; ".join(left_out) + ". "
            f"A draft must read at least {_percent(MIN_SAVING)} fewer bytes per token than "
            "its target to pay for the guesses it gets wrong."
        )


def advise(
    target: str | Path, curve: CostCurve | None = None, gamma_max: int = GAMMA_MAX
) -> DeriveAdvice:
    """Every candidate quantization of ``target`` as a draft for it: offered or not
    (and why), with its estimated gain under ``curve`` (default: assumed flat)."""
    path = Path(target).expanduser()
    header = check_model_file(path)
    own = {t.name: t.n_bytes for t in header.tensors}
    target_read = bytes_read_per_token(own)
    target_type = quantization_name(header)
    curve = curve or assumed_curve(gamma_max + 1)
    costs = curve.cost_model(gamma_max)
    options = []
    for ftype in CANDIDATE_TYPES:
        read = bytes_read_per_token(estimate_tensor_bytes(header, ftype))
        ratio = read / target_read if target_read else 1.0
        gamma, ceiling = expected_speedup(costs, 1.0, ratio, gamma_max)
        options.append(
            DraftOption(
                ftype=ftype,
                file_bytes=estimate_output_size(header, ftype),
                read_bytes=read,
                read_ratio=ratio,
                why_not=_why_not(ftype, target_type, ratio, read, target_read),
                best_gamma=gamma,
                ceiling=ceiling,
                break_even=_break_even(costs, ratio, gamma_max) if ceiling > 1.0 else None,
                at_assumed=expected_speedup(costs, ASSUMED_ACCEPTANCE, ratio, gamma_max)[1],
            )
        )
    options.sort(key=lambda o: -o.read_bytes)
    small = expected_speedup(costs, ASSUMED_ACCEPTANCE, SMALL_DRAFT_RATIO, gamma_max)[1]
    return DeriveAdvice(path, target_type, target_read, curve, tuple(options), small)


def _why_not(ftype: str, target_type: str, ratio: float, read: int, target_read: int) -> str | None:
    if ftype == target_type:
        return "the target's own quantization"
    sizes = f"{read / MIB:.0f} MiB read per token, the target {target_read / MIB:.0f}"
    if ratio >= 1.0:
        return f"{sizes}: no cheaper"
    if ratio > 1.0 - MIN_SAVING:
        return f"{sizes}: only {_percent(1 - ratio)} fewer"
    return None


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def _break_even(costs: CostModel, draft_ratio: float, gamma_max: int) -> float:
    """The acceptance above which the best γ beats plain decoding (bisection:
    the expected speedup grows with acceptance)."""
    low, high = 0.0, 1.0
    for _ in range(30):
        mid = (low + high) / 2
        if expected_speedup(costs, mid, draft_ratio, gamma_max)[1] > 1.0:
            high = mid
        else:
            low = mid
    return high
