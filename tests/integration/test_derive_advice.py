"""Advice before deriving a draft, on the real SmolLM2 files: which quantizations
are offered, why the others are not, and the estimated gain with its assumptions
(``gambit.models.derive_advice``, the ``models derive`` command, ``pair_report``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gambit.engine.machine.kernels import KernelProbe
from gambit.formats.gguf_info import inspect_model
from gambit.models.derive import requantize
from gambit.models.derive_advice import (
    ASSUMED_ACCEPTANCE,
    GAMMA_MAX,
    MIN_SAVING,
    CostCurve,
    advise,
    cached_curve,
)
from gambit.models.pairing import pair_report

STEEP = CostCurve(tuple(1.0 + 0.5 * (k - 1) for k in range(1, 10)), True, "measured: steep")


def test_a_q4_1_target_is_offered_nothing_and_told_why(smol_q4_1: Path) -> None:
    advice = advise(smol_q4_1)
    assert advice.target_type == "Q4_1"
    assert advice.offered == []  # nothing reads 25 % fewer bytes per token than Q4_1
    q4_0 = advice.option("Q4_0")
    assert q4_0 is not None and 0.85 < q4_0.read_ratio < 1.0  # cheaper, but barely
    missing = advice.missing()
    assert "Not offered for this Q4_1 model" in missing
    assert f"Q4_0 ({q4_0.read_bytes / 2**20:.0f} MiB read per token, the target " in missing
    assert f"only {(1 - q4_0.read_ratio) * 100:.0f} % fewer)" in missing
    assert "Q4_1 (the target's own quantization)" in missing
    assert "Q8_0 (" in missing and "no cheaper)" in missing
    assert f"at least {MIN_SAVING * 100:.0f} % fewer bytes per token" in missing


def test_an_f16_target_is_offered_what_is_clearly_cheaper(smol_f16: Path) -> None:
    advice = advise(smol_f16)
    offered = [o.ftype for o in advice.offered]
    assert offered[0] == "Q8_0" and set(offered) >= {"Q8_0", "Q4_1", "Q4_0", "Q2_K"}
    assert all(o.read_ratio <= 1 - MIN_SAVING for o in advice.offered)
    assert [o.read_bytes for o in advice.offered] == sorted(
        (o.read_bytes for o in advice.offered), reverse=True
    )  # most faithful first
    assert "F16" not in offered and "F32" not in offered
    # No cost measured for this curve: the assumption is said, and it is the best case.
    assert not advice.curve.measured and "assumed" in advice.curve.source
    q8 = advice.option("Q8_0")
    assert q8 is not None and q8.break_even is not None
    assert 1.0 < q8.at_assumed < q8.ceiling
    text = q8.estimate()
    assert text.startswith(f"A Q8_0 draft step should cost about {q8.read_ratio:.2f} of a target")
    assert "assumed until measured" in text
    assert f"At most {q8.ceiling:.2f}x if every guess were accepted" in text
    assert f"more than {q8.break_even * 100:.0f} % of its guesses" in text
    assert f"at {ASSUMED_ACCEPTANCE * 100:.0f} %, about {q8.at_assumed:.2f}x" in text
    assert q8.label() == f"Q8_0  ·  about {q8.file_bytes / 2**20:.0f} MiB"


def test_a_costly_verification_says_it_cannot_pay(smol_q8_0: Path) -> None:
    advice = advise(smol_q8_0, STEEP)  # each extra token in a batch costs half a step
    option = advice.offered[0]
    assert option.ceiling < 1.0 and option.break_even is None
    assert option.estimate().endswith(
        f"drafting would reach only {option.ceiling:.2f}x here: it cannot pay on this machine."
    )
    flat = advise(smol_q8_0).option(option.ftype)
    assert flat is not None and flat.ceiling > option.ceiling  # the measurement matters


def test_the_cost_curve_comes_from_the_kernel_probe_when_cached(
    tmp_path: Path, smol_q8_0: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache of its own, and none of the verdicts this process found for the
    # same layout (they are shared by layout): nothing is known of it yet.
    monkeypatch.setattr(KernelProbe, "_memory", {})
    model = tmp_path / "own.Q8_0.gguf"
    try:
        os.link(smol_q8_0, model)
    except OSError:
        shutil.copy(smol_q8_0, model)
    assert cached_curve(model, n_threads=1, cache_dir=tmp_path) is None  # never probed
    k = GAMMA_MAX + 1
    verdict = KernelProbe(tmp_path).verdict(model, 1, 0, k)
    curve = cached_curve(model, n_threads=1, cache_dir=tmp_path)
    assert curve is not None and curve.measured and len(curve.ratios) == k
    probed = verdict.result(verdict.exact())
    assert probed is not None
    assert curve.ratios[-1] == pytest.approx(probed.tk_s / probed.t1_s)
    assert "measured on this machine" in curve.source
    assert f"{probed.tk_s / probed.t1_s:.2f}x" in curve.source


def test_pairing_says_when_a_draft_is_too_close_in_cost(tmp_path: Path, smol_q4_1: Path) -> None:
    close = requantize(smol_q4_1, tmp_path / "close.Q4_0.gguf", "Q4_0")
    report = pair_report(inspect_model(smol_q4_1), inspect_model(close))
    assert report.compatible
    (note,) = report.notes
    assert note.startswith("the draft reads only ") and "% fewer bytes per token" in note
    assert "too close in cost to pay for the guesses it gets wrong" in note


def gambit(*args: str | Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GAMBIT_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "gambit", "models", *map(str, args)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_cli_lists_what_pays_and_refuses_the_rest(
    tmp_path: Path, smol_q4_1: Path, smol_f16: Path
) -> None:
    listing = gambit("derive", smol_f16, home=tmp_path)
    assert listing.returncode == 0, listing.stderr
    out = listing.stdout
    assert "Drafts worth deriving (estimates; measure after deriving):" in out
    assert "Q8_0" in out and "at most" in out and "pays from" in out
    assert f"gambit-cli models derive {smol_f16} --type Q8_0" in out

    nothing = gambit("derive", smol_q4_1, home=tmp_path)
    assert nothing.returncode == 0, nothing.stderr
    assert "No quantization is meaningfully cheaper than this model" in nothing.stdout
    assert "Q4_0 (" in nothing.stdout and "only" in nothing.stdout

    refused = gambit("derive", smol_q4_1, "--type", "Q4_0", home=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith("gambit-cli: Q4_0 is not worth deriving as a draft of ")
    assert "--anyway" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "data").exists() or not list((tmp_path / "data").rglob("*.gguf"))
