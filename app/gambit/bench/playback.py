"""``bench --regimes --playback``: the γ policies played on recorded replies, no clock.

``bench --regimes`` times every policy on the machine, so two runs of one
policy differ: on the Xeon, identical rounds read ±3 % apart prompt by
prompt. A change to the policy worth 1-2 % is below that. Here each prompt's
greedy target-only reply is recorded once, with what the draft model guesses
at each position: its greedy choice, teacher-forced on the reply, and its
confidence there (``foresight.model_guesses``). The real controllers then
play every round on it:

- a chain starting at a position lands as many tokens as the draft guesses
  right in a row from there (exact for a greedy draft of the target's
  tokenizer), and stops where the controller's ``ConfidenceCut`` says;
- each round, the prompt's reading and a catch-up cost what the pair's
  measured costs say (``CostModel``; the reading at the rate measured while
  recording).

No clock is read, so a policy's figures are the same on every run, and two
versions of the policy (another checkout on ``PYTHONPATH``) compare exactly.
``batch_scale`` stretches what a batch costs beyond one token, to play the
same replies on another CPU kind's costs (t(5)/t(1) is 1.5 on the Xeon and
1.7-2.0 on an AVX2 EPYC: docs/performance.md).

A draft through text (a model of another tokenizer, ``TextDraftDrafter``)
cannot be teacher-forced in the target's tokens: its chain from a position
is drafted there for real, the whole γ_max of it, and recorded with its
confidence in each of its tokens (``RecordedReply.chains``; its text is the
draft's own greedy continuation, so it is the chain the policy would get).
Its cut stops the chain at the first target token whose confidence (the
product over the draft steps that wrote it) it refuses; the drafter cuts at
the draft step, writes that step as its lookahead and proposes the tokens
before it, so as a rule at the same token.

Not played: sampling above temperature 0, and copies (prompt lookup). The
figures are the policy's arithmetic on measured costs, not the machine's:
the bench times the machine.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gambit.bench.foresight import model_guesses, runs_of, text_chains
from gambit.bench.runner import TARGET_ONLY, BenchPrompt, run_once
from gambit.engine.drafters.base import Option
from gambit.engine.estimates import SHORT_CATCH_UP, CostModel
from gambit.engine.gamma.policy import PolicyMode
from gambit.engine.session import Engine, GammaController
from gambit.engine.text.reply import GenerationConfig, Round, StopReason
from gambit.engine.verification.sampling import SamplingParams
from gambit.errors import GambitError

# The fixed γs played beside the adaptive policy.
FIXED_GAMMAS = (4, 8, 16)
# Sessions played from each order of the prompts (``play_orders``): the
# first from the recording's memory, each next from what the one before kept.
SESSIONS = 2
# Where no fixed γ makes this much on a prompt, adaptive is judged against
# target-only there (as ``bench --regimes`` judges it).
PAYS = 1.2


@dataclass(frozen=True)
class RecordedReply:
    """One prompt's greedy target-only reply, as the draft model sees it."""

    label: str  # "code #1"
    n_prompt: int  # tokens the draft model reads before it can draft
    runs: tuple[int, ...]  # per reply position: the draft's right guesses in a row from there
    confidence: tuple[float, ...]  # per reply position: the draft's top probability there
    # Per reply position, a draft through text: its confidence in each token
    # of the chain it drafts from there. Empty for a draft of the target's
    # tokenizer: its chain's tokens are the reply's while it guesses right.
    chains: tuple[tuple[float, ...], ...] = ()

    def chain(self, i: int) -> Sequence[float]:
        """The draft's confidence in each token of its chain from position ``i``
        (as far as the reply goes, or as its chain through text went)."""
        return self.chains[i] if self.chains else self.confidence[i:]


@dataclass(frozen=True)
class Recording:
    """What playing needs, kept in ``playback.json``: the replies, the pair's
    measured costs and what the pair's memory held (``Engine.kept_learning``),
    so that a recording plays the same under any version of the policy."""

    title: str  # the pair, as the report names it
    option: str  # the draft model's name, as its controllers name their option
    gamma_max: int
    costs: dict[str, Any]  # CostModel.to_json
    kept: Any  # what the adaptive policy starts from (None: nothing)
    replies: tuple[RecordedReply, ...]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "replies": [asdict(r) for r in self.replies]}

    @classmethod
    def from_json(cls, d: Any) -> Recording:
        """A recording ``to_json`` wrote; ValueError where it is not one."""
        try:
            replies = tuple(
                RecordedReply(
                    str(r["label"]),
                    int(r["n_prompt"]),
                    tuple(int(x) for x in r["runs"]),
                    tuple(float(x) for x in r["confidence"]),
                    tuple(tuple(float(x) for x in c) for c in r.get("chains", ())),
                )
                for r in d["replies"]
            )
            recording = cls(
                str(d["title"]), str(d["option"]), int(d["gamma_max"]), dict(d["costs"]),
                d.get("kept"), replies,
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a playback recording ({exc})") from exc
        if recording.gamma_max < 1 or not replies or recording.cost_model() is None:
            raise ValueError("not a playback recording (no replies, or no sound costs)")
        for r in replies:
            counts = len(r.runs) == len(r.confidence) and len(r.chains) in (0, len(r.runs))
            beyond = any(run > len(c) for run, c in zip(r.runs, r.chains, strict=False))
            if not counts or beyond or r.n_prompt < 0 or min(r.runs, default=0) < 0:
                raise ValueError(f"not a playback recording ({r.label}: counts out of range)")
        return recording

    def cost_model(self) -> CostModel | None:
        return CostModel.from_json(self.costs, self.gamma_max + 1)


@dataclass(frozen=True)
class PlayedReply:
    """What a policy's rounds cost on one recorded reply, in seconds."""

    decoding: float  # after the first token: rounds and catch-ups
    reading: float  # the draft model's reading of the prompt
    tokens: int  # after the first

    def speedup(self, t1: float, *, after_first_token: bool) -> float:
        seconds = self.decoding + (self.reading if after_first_token else 0.0)
        return self.tokens * t1 / seconds if seconds > 0 else 1.0


def record(
    engine: Engine, prompts: Sequence[BenchPrompt], max_tokens: int, title: str, *, raw: bool
) -> Recording:
    """Each prompt's greedy reply, target-only, and the draft's guesses along
    it (``model_guesses``; through text, ``text_chains``), with the engine's
    costs, the draft model's reading of the prompts as timed here standing
    for its catch-up."""
    draft, drafter = engine.draft_runtime, engine.drafter
    if draft is None or drafter is None:
        raise ValueError("playback needs a draft model")
    through_text = engine.drafts_through_text
    config = GenerationConfig(max_tokens=max_tokens, sampling=SamplingParams(temperature=0.0))
    replies: list[RecordedReply] = []
    counts: dict[str, int] = {}
    read_s = read_n = 0.0
    for bp in prompts:
        _, reply = run_once(engine, bp.prompt, config, None, raw=raw)
        context = engine.context
        prompt = context[: len(context) - len(reply)]
        t0 = time.perf_counter()
        if through_text:
            drafter.prepare(prompt)  # (the prompt's text in the draft's tokens)
        else:
            draft.sync(prompt)
        read_s += time.perf_counter() - t0
        read_n += len(prompt)
        counts[bp.suite] = counts.get(bp.suite, 0) + 1
        label = f"{bp.suite} #{counts[bp.suite]}"
        if through_text:
            runs, chains = text_chains(drafter, prompt, reply, engine.config.gamma_max)
            first = tuple(c[0] if c else 0.0 for c in chains)
            replies.append(RecordedReply(label, len(prompt), runs, first, chains))
        else:
            hits, confidence = model_guesses(draft, prompt, reply)
            replies.append(RecordedReply(label, len(prompt), runs_of(hits), tuple(confidence)))
    costs = engine.costs.copy()
    if read_n and costs.t1 > 0:
        costs.catch_up_ratio = read_s / read_n / costs.t1
    option = draft_option_name(engine)
    kept = engine.kept_learning
    return Recording(title, option, engine.config.gamma_max, costs.to_json(), kept, tuple(replies))


def draft_option_name(engine: Engine) -> str:
    """The option the engine's controllers name the draft model's rounds by."""
    drafter = engine.drafter
    return (drafter.draft_model or drafter).name if drafter is not None else ""


def scaled(costs: CostModel, batch_scale: float) -> CostModel:
    """``costs`` with what each batch costs beyond one token times ``batch_scale``."""
    out = costs.copy()
    if batch_scale != 1.0 and out.t1 > 0:
        for k in range(2, out.k_max + 1):
            out.set_target(
                k, out.t1 * (1.0 + (costs.verify_cost(k) / costs.t1 - 1.0) * batch_scale)
            )
    return out


def play(rec: RecordedReply, policy: GammaController) -> PlayedReply:
    """``policy``'s rounds on ``rec``, each costing what its costs say
    (``policy.costs``: it learns from the same figures)."""
    costs = policy.costs
    n = len(rec.runs)
    policy.start_reply(rec.n_prompt)
    reading = 0.0
    if policy.decide_reading(rec.n_prompt, n):
        reading = costs.catch_up_cost(rec.n_prompt)
        policy.observe_reading(rec.n_prompt, reading)
    decoding = 0.0
    i = 1  # (the first token comes from the prompt's logits, in every mode)
    while i < n:
        gamma = min(policy.decide_gamma(), n - i)
        cut = policy.decided_cut()
        chain = rec.chain(i)
        drafted = 0
        while drafted < min(gamma, len(chain)) and (cut is None or cut.goes_on(chain[drafted])):
            drafted += 1
        landed = min(drafted, rec.runs[i])
        rnd = _round(costs, policy.learning.behind, drafted, landed, rec, i)
        policy.observe(rnd)
        decoding += rnd.t_draft_s + rnd.t_verify_s
        i += len(rnd.tokens)
    return PlayedReply(decoding, reading, max(0, n - 1))


def _round(
    costs: CostModel, behind: int, drafted: int, landed: int, rec: RecordedReply, i: int
) -> Round:
    """A round at reply position ``i`` that drafted ``drafted`` tokens, the
    first ``landed`` of them right, as its costs price it."""
    n = len(rec.runs)
    k = min(landed + 1, n - i)
    t_verify = costs.verify_cost(drafted + 1)
    t_draft = t_synced = 0.0
    n_synced = 0
    if drafted:
        steps = costs.round_cost(drafted, drafted + 1) - t_verify  # steps and a round's extra
        catch_up = costs.catch_up_cost(behind) if behind > SHORT_CATCH_UP else 0.0
        t_draft = steps + catch_up
        # (timed apart as the drafter times them: a long catch-up, or the first step)
        n_synced = behind if catch_up else 1
        t_synced = catch_up or steps - (drafted - 1) * costs.t_draft
    outcomes = (True,) * landed + ((False,) if landed < drafted else ())
    return Round(
        index=0, tokens=tuple(range(k)), text="", gamma=drafted, n_drafted=drafted,
        n_accepted=landed, outcomes=outcomes, t_draft_s=t_draft, t_verify_s=t_verify,
        elapsed_s=0.0, stop=StopReason.MAX_TOKENS if i + k >= n else None,
        n_draft_synced=n_synced, t_draft_synced_s=t_synced,
        confidence=tuple(rec.chain(i)[:drafted]),
    )  # fmt: skip


def _controller(
    recording: Recording, batch_scale: float, mode: PolicyMode, gamma: int = 0, kept: Any = None
) -> GammaController:
    """A policy of ``mode`` on the recording's costs (its batches × ``batch_scale``)."""
    measured = recording.cost_model()
    if measured is None:
        raise ValueError("the recording's costs are not sound")
    return GammaController(
        scaled(measured, batch_scale), mode=mode, gamma_max=recording.gamma_max,
        fixed_gamma=gamma, option=Option(recording.option), kept=kept,
    )  # fmt: skip


def play_policies(recording: Recording, batch_scale: float = 1.0) -> dict[str, list[PlayedReply]]:
    """Every policy over the recording's replies in order, each one controller
    for them all (a session): adaptive from what the pair's memory held,
    adaptive from nothing ("cold"), the fixed γs and target-only."""

    def policy(mode: PolicyMode, gamma: int = 0, kept: Any = None) -> GammaController:
        return _controller(recording, batch_scale, mode, gamma, kept)

    policies = {"adaptive": policy("adaptive", kept=recording.kept), "cold": policy("adaptive")}
    for g in FIXED_GAMMAS:
        if g <= recording.gamma_max:
            policies[f"fixed={g}"] = policy("fixed", g)
    policies[TARGET_ONLY] = policy("off")
    return {name: [play(rec, p) for rec in recording.replies] for name, p in policies.items()}


def play_orders(recording: Recording, batch_scale: float = 1.0) -> list[list[PlayedReply]]:
    """The adaptive policy over every rotation of the recording's prompts,
    SESSIONS sessions each, the first from the recording's memory and each
    next from what the one before kept (as a file keeps it): each session's
    replies in the recording's order. One order's figures lean on which
    reply comes first, where a session starts from its memory: the weaker
    draft's recorded suite read 1.032-1.059 of fixed γ = 4 by the order alone."""
    n = len(recording.replies)
    sessions: list[list[PlayedReply]] = []
    for start in range(n):
        order = [(start + k) % n for k in range(n)]
        kept = recording.kept
        for _ in range(SESSIONS):
            policy = _controller(recording, batch_scale, "adaptive", kept=kept)
            played = {i: play(recording.replies[i], policy) for i in order}
            kept = json.loads(json.dumps(policy.learning.kept()))
            sessions.append([played[i] for i in range(n)])
    return sessions


def figures(
    played: dict[str, list[PlayedReply]],
    t1: float,
    *,
    after_first_token: bool,
    orders: Sequence[Sequence[PlayedReply]] = (),
) -> dict[str, Any]:
    """Speedups over target-only, per prompt and over the suite (geometric
    mean), and adaptive's against the best fixed γ per prompt and over the
    suite; with ``orders`` (``play_orders``), the same over all its sessions."""
    speedups = {
        name: np.array([p.speedup(t1, after_first_token=after_first_token) for p in replies])
        for name, replies in played.items()
    }
    fixed = {name: s for name, s in speedups.items() if name.startswith("fixed=")}
    best_per_prompt = np.max(np.stack(list(fixed.values())), axis=0)
    judge = np.where(best_per_prompt >= PAYS, best_per_prompt, 1.0)

    def suite(s: np.ndarray) -> float:
        return float(np.exp(np.log(s).mean()))

    best_fixed = max(fixed, key=lambda name: suite(fixed[name]))
    out: dict[str, Any] = {
        "suite": {name: suite(s) for name, s in speedups.items()},
        "best_fixed": best_fixed,
        "adaptive_vs_best_fixed": suite(speedups["adaptive"]) / suite(fixed[best_fixed]),
        "per_prompt": {name: s.tolist() for name, s in speedups.items()},
        "adaptive_vs_judge": (speedups["adaptive"] / judge).tolist(),
        "judged_by": ["best fixed" if b >= PAYS else TARGET_ONLY for b in best_per_prompt],
    }
    if orders:
        rates = np.array(
            [[p.speedup(t1, after_first_token=after_first_token) for p in s] for s in orders]
        )
        ratios = np.exp(np.log(rates).mean(axis=1)) / suite(fixed[best_fixed])
        lowest = (rates / judge).min(axis=1)  # each session's lowest prompt
        out["orders"] = {
            "sessions": len(orders),
            "adaptive_vs_best_fixed": suite(ratios),
            "range": [float(ratios.min()), float(ratios.max())],
            "lowest_prompt_mean": float(lowest.mean()),
            "lowest_prompt_min": float(lowest.min()),
        }
    return out


def report_lines(title: str, replies: Sequence[RecordedReply], by: dict[str, Any]) -> list[str]:
    """What ``bench --regimes --playback`` prints for one pair."""
    lines = [f"{title}, played on {len(replies)} recorded replies (no clock):"]
    for label, key in (("decoding rate", "rate"), ("after the first token", "after_first")):
        f = by[key]
        suite = f["suite"]
        policies = "  ".join(f"{name} {x:.3f}x" for name, x in suite.items() if name != TARGET_ONLY)
        lines.append(
            f"  {label}: {policies}; adaptive ÷ {f['best_fixed']} {f['adaptive_vs_best_fixed']:.3f}"
        )
        per = "  ".join(
            f"{rec.label} {r:.3f}" + ("" if how == "best fixed" else " ÷ plain")
            for rec, r, how in zip(replies, f["adaptive_vs_judge"], f["judged_by"], strict=True)
        )
        lines.append(f"    adaptive ÷ each prompt's best fixed γ: {per}")
        if o := f.get("orders"):
            lo, hi = o["range"]
            mean, worst = o["lowest_prompt_mean"], o["lowest_prompt_min"]
            lines.append(
                f"    every order of the prompts, {SESSIONS} sessions each: adaptive ÷ "
                f"{f['best_fixed']} {o['adaptive_vs_best_fixed']:.3f} ({lo:.3f}-{hi:.3f}); "
                f"lowest prompt {mean:.3f} on average, {worst:.3f} at worst"
            )
    return lines


def play_report(recording: Recording, batch_scale: float = 1.0) -> dict[str, Any]:
    """Every policy played on ``recording``: the figures by decoding rate and
    after the first token, the lines to print, and the recording itself (to
    play again: ``bench --playback-from``)."""
    played = play_policies(recording, batch_scale)
    orders = play_orders(recording, batch_scale)
    t1 = played_t1(recording)
    by = {
        key: figures(played, t1, after_first_token=after, orders=orders)
        for key, after in (("rate", False), ("after_first", True))
    }
    title = recording.title + (f", batches ×{batch_scale:g}" if batch_scale != 1.0 else "")
    return {
        "title": title,
        "batch_scale": batch_scale,
        "prompts": [r.label for r in recording.replies],
        **by,
        "lines": report_lines(title, recording.replies, by),
        "recording": recording.to_json(),
    }


def played_t1(recording: Recording) -> float:
    costs = recording.cost_model()
    return costs.t1 if costs is not None else 0.0


def run_playback_cli(args: argparse.Namespace) -> int:
    """``gambit-cli bench --playback-from FILE``: play a recording that
    ``bench --regimes --playback --out DIR`` kept (``playback.json``), loading
    no model: the same figures under any version of the policy."""
    try:
        saved = json.loads(Path(args.playback_from).read_text(encoding="utf-8"))
        pairs = saved["pairs"] if isinstance(saved, dict) else None
        if not isinstance(pairs, list) or not pairs:
            raise ValueError("not a playback.json: no pairs")
        recordings = [Recording.from_json(pair.get("recording")) for pair in pairs]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, AttributeError) as exc:
        raise GambitError(f"cannot play {args.playback_from}: {exc}") from exc
    reports = [play_report(r, args.batch_scale) for r in recordings]
    if args.json:
        print(json.dumps({"pairs": reports}, indent=1))
    else:
        print("\n".join(line for report in reports for line in report["lines"]))
    return 0
