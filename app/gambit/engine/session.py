"""An engine session: target + drafter loaded, checked and ready to chat.

This is the one object the CLI, the benchmark and the GUI worker drive.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gambit.engine.decoder import SpeculativeDecoder
from gambit.engine.draft_candidates import DraftCandidates
from gambit.engine.drafters.base import Drafter, Option
from gambit.engine.drafters.history import HistoryIndex
from gambit.engine.drafters.registry import (
    TREE_DRAFTERS,
    BuildInput,
    DrafterKind,
    spec,
)
from gambit.engine.estimates import CostModel
from gambit.engine.gamma.baseline import Baselines, time_plain_step
from gambit.engine.gamma.calibration import CALIBRATION_FILLER, CostStore, calibrate

# Public through this module: the policies Engine.new_controller makes, which
# callers hold (one per mode in the bench) and hand back to use_controller.
from gambit.engine.gamma.controller import UNNAMED
from gambit.engine.gamma.controller import GammaController as GammaController
from gambit.engine.gamma.metrics import (
    GenerationStats,
    MetricsSnapshot,
    MetricsTracker,
    plain_tokens_per_s,
    reply_baseline,
)
from gambit.engine.gamma.policy import (
    DEFAULT_GAMMA,
    DEFAULT_GAMMA_MAX,
    Decision,
    FixedGamma,
    PolicyMode,
)
from gambit.engine.machine.kernels import KernelChoice, KernelProbe
from gambit.engine.machine.model_loading import Progress, choose_kernels, load_draft_runtime
from gambit.engine.machine.placement import TargetPlacement
from gambit.engine.machine.runtime import ModelRuntime, RuntimeOptions
from gambit.engine.machine.target_host import HostedRuntime, open_target
from gambit.engine.machine.threads import ThreadCount
from gambit.engine.text.chat import ChatPrompt, ChatPromptBuilder, Message
from gambit.engine.text.completion import completion_tokens
from gambit.engine.text.continuation import KeptTokens, resume_tokens
from gambit.engine.text.reply import GenerationConfig, Round, StopReason
from gambit.engine.text.template_sandbox import RenderCancelledError
from gambit.errors import ModelFileError

if TYPE_CHECKING:
    from gambit.formats.layerskip_file import LayerSkipInfo

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineConfig", "most_draft_tokens"]
TREE_NODES_MIN, TREE_NODES_MAX = 2, 16
DEFAULT_TREE_NODES = 8


def most_draft_tokens(*, gamma_max: int, tree_nodes: int, tree: bool) -> int:
    """Most draft tokens in one round: γ_max for chains, the node budget (chain
    and side nodes together) for trees. Verifying them is a batch of one more."""
    return tree_nodes if tree else gamma_max


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    drafter: DrafterKind = "none"
    draft: Path | None = None  # with a drafter that loads a model (spec(drafter).loads_model)
    target_options: RuntimeOptions = field(default_factory=RuntimeOptions)
    draft_options: RuntimeOptions | None = None  # default: the target's
    policy: PolicyMode = "adaptive"
    gamma: int = DEFAULT_GAMMA  # draft length of the "fixed" policy
    gamma_max: int = DEFAULT_GAMMA_MAX  # the most the "adaptive" policy drafts
    lookup_ngram_max: int = 3
    # Token trees: draft a main chain plus side candidates, verified in one
    # batch; tree_nodes bounds the draft tokens of a round (chain and side).
    tree: bool = False
    tree_nodes: int = DEFAULT_TREE_NODES
    fixed_side: int = 0  # side nodes of the "fixed" policy, with tree=True
    # Where kernel probe verdicts and measured costs are kept (None: in this
    # process only; costs are then calibrated at every load).
    kernel_cache: Path | None = None

    def __post_init__(self) -> None:
        # (a drafter whose file is derived may leave it to be found or derived
        # at load: gambit.models.drafter_files.resolve_drafter_file)
        if spec(self.drafter).file == "chosen" and self.draft is None:
            raise ValueError(f"a draft model path is needed for drafter={self.drafter!r}")
        if not TREE_NODES_MIN <= self.tree_nodes <= TREE_NODES_MAX:
            raise ValueError(f"tree_nodes must be between {TREE_NODES_MIN} and {TREE_NODES_MAX}")
        if not 0 <= self.gamma <= self.gamma_max:
            raise ValueError(f"gamma must be between 0 and gamma_max ({self.gamma_max})")
        if self.gamma_max < 1:
            raise ValueError("gamma_max must be 1 or more")


class Replay(Protocol):
    """Replies decoded apart from the engine's own (``Engine.replay``)."""

    def generate(
        self, prompt: list[int], config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[Round]: ...


class Engine:
    """Loads the models, checks the pair, measures costs, and streams replies.

    ``controller`` decides γ every round; its mode can change between rounds
    (the settings toggle), and ``set_speculation`` is the one switch that
    pauses speculation without touching what the controller has learned.
    """

    def __init__(self, config: EngineConfig, progress: Progress | None = None) -> None:
        """``progress`` hears what the load is doing while it takes a while."""
        self.config = config
        self._ready = False
        self.drafter: Drafter | None = None  # (built below, after the models load)
        self._candidates: DraftCandidates | None = None
        say = progress or (lambda _: None)
        target_options = config.target_options
        if self.tree:
            # One KV sequence per tree leaf: at most one per side node, plus the main chain's.
            target_options = dataclasses.replace(
                target_options, n_seq_max=max(target_options.n_seq_max, config.tree_nodes)
            )
        probe = KernelProbe(config.kernel_cache)
        target_options, self.target_kernels = choose_kernels(
            probe, config.target, target_options, self.node_max + 1, progress=progress
        )
        say(f"Loading {config.target.name}…")
        self.target = open_target(config.target, target_options)
        # Where the target's layers live when workers hold some (None: all here).
        self.placement: TargetPlacement | None = (
            self.target.placement if isinstance(self.target, HostedRuntime) else None
        )
        self.draft_kernels: KernelChoice | None = None
        self.draft_runtime: ModelRuntime | None = None
        self.layer_skip: LayerSkipInfo | None = None
        drafter: Drafter | None = None
        kind = spec(config.drafter)
        try:
            if kind.loads_model:
                self.draft_runtime = self._load_draft(probe, progress)
            built = kind.build(
                BuildInput(self.target, self.draft_runtime, config.draft, config.lookup_ngram_max)
            )
            drafter, self.layer_skip = built.drafter, built.layer_skip
            self.drafter = drafter
            # A target on workers is left out: its costs are the network's of the day.
            self._cost_store = CostStore(config.kernel_cache if self.placement is None else None)
            self.costs = self.measure_costs(progress)
            # What sessions before learned of this pair: each controller starts from it.
            self.kept_learning: dict[str, Any] | None = None
            if drafter is not None:
                self._learned_at = CostStore.learned_key(self.target, self.draft_runtime, kind.kind)
                self.kept_learning = self._cost_store.load_learned(self._learned_at)
        except BaseException:  # (a Cancel raised by ``progress`` too): no model left open
            self.close()
            raise
        # The CPU threads of both models: as set, or following the load (0).
        runtimes = [rt for rt in (self.target, self.draft_runtime) if rt is not None]
        self.threads = ThreadCount(
            config.target_options.n_threads,
            runtimes,
            mid_reply=self.target.kernels.kv_type == "q8_0",
        )
        self.controller = self.new_controller(config.policy)
        self.decoder = SpeculativeDecoder(self.target, drafter, self.controller, self.threads)
        self._chat: ChatPromptBuilder | None = None
        # Plain decoding's rate as the last reply on each thread count measured
        # it (finish_reply); until then the load's at its count (none without
        # a drafter: replies are plain).
        self.baselines = Baselines()
        self.baselines.keep(self.threads.current, self.controller.baseline_tokens_per_s)
        self._ready = True

    def _load_draft(self, probe: KernelProbe, progress: Progress | None) -> ModelRuntime:
        """The draft model's runtime, for a drafter that loads one."""
        config = self.config
        if config.draft is None:  # a derived draft that was not derived (layer skip)
            raise ModelFileError(
                str(config.target),
                "no layer-skip draft was derived for this model yet; run "
                "`gambit-cli models layerskip` or load it from the app",
            )
        runtime, self.draft_kernels = load_draft_runtime(
            config.draft, config.draft_options or config.target_options, probe,
            self.node_max + 1, progress,
        )  # fmt: skip
        return runtime

    @property
    def tree(self) -> bool:
        """Whether rounds may draft token trees (asked for, and the drafter can:
        a draft through text drafts chains)."""
        return (
            self.config.tree
            and self.config.drafter in TREE_DRAFTERS
            and not self.drafts_through_text
        )

    @property
    def drafts_through_text(self) -> bool:
        """Whether the draft model drafts through text (its tokenizer is not the target's)."""
        return self.drafter is not None and self.drafter.through_text

    @property
    def drafter_detail(self) -> str | None:
        """The drafter's shape in a line: tree budget, skipped blocks."""
        parts: list[str] = []
        if self.layer_skip is not None:
            parts.append(self.layer_skip.describe())
        if self.drafter is not None:
            parts.append(f"tree, up to {self.config.tree_nodes} nodes" if self.tree else "chain")
        return " · ".join(parts) or None

    @property
    def decode_seconds(self) -> float:
        """Time spent inside llama.cpp so far, target and draft together."""
        total = self.target.decode_seconds
        if self.draft_runtime is not None:
            total += self.draft_runtime.decode_seconds
        return total

    def measure_costs(self, progress: Progress | None = None) -> CostModel:
        """t_target(k) and the draft step on this machine: as the last session
        with this pair left them (``CostStore``), else calibrated now (a second
        or so for small models); nothing without a drafter, where rounds
        themselves measure t_target(1)."""
        k_max = self.node_max + 1
        if self.drafter is None:
            return CostModel(k_max)
        key = self._costs_key()
        kept = self._cost_store.load(key, k_max)
        if kept is not None:
            return kept
        say = progress or (lambda _line: None)
        timing = "Timing this machine for the pair (first load only)"
        say(f"{timing}…")

        def step(done: int, total: int) -> None:  # (a large pair takes a while: it moves)
            say(f"{timing}: {100 * done // total}%")

        costs = self.calibrate(k_max, step=step)
        self._cost_store.save(key, costs)
        return costs

    def calibrate(
        self,
        k_max: int,
        *,
        context: int = CALIBRATION_FILLER,
        draft: Path | None = None,
        step: Callable[[int, int], None] | None = None,
    ) -> CostModel:
        """Time t_target(k) and a draft step now (``calibrate``) with the loaded
        draft model, or with ``draft``, a candidate (``replay(draft=...)``); a
        step priced per target token (a draft through text takes more or
        fewer steps per target token than one)."""
        drafter, runtime = self.drafter, self.draft_runtime
        if draft is not None and not self._is_loaded_draft(draft):
            drafter, runtime = self.candidates.drafter(draft), self.candidates.runtime(draft)
        costs = calibrate(self.target, runtime, k_max, context=context, step=step)
        costs.draft_ratio *= drafter.steps_per_token if drafter is not None else 1.0
        return costs

    @property
    def candidates(self) -> DraftCandidates:
        """Draft models besides the loaded one, for replays (loaded on demand)."""
        if self._candidates is None:
            base = self.config.draft_options or self.config.target_options
            self._candidates = DraftCandidates(
                self.target, base, KernelProbe(self.config.kernel_cache),
                self.node_max + 1, self.config.lookup_ngram_max,
            )  # fmt: skip
        return self._candidates

    def _is_loaded_draft(self, path: Path) -> bool:
        loaded = self.config.draft
        return loaded is not None and os.path.realpath(loaded) == os.path.realpath(path)

    def keep_costs(self) -> None:
        """Keep what the controller has measured for the next load of this pair,
        at each thread count it ran on, and what it learned of its acceptance."""
        if self.drafter is not None:
            for threads, costs in self.controller.costs_by_threads().items():
                self._cost_store.save(self._costs_key(threads), costs)
            self._cost_store.save_learned(self._learned_at, self.controller.learning.kept())

    def _costs_key(self, threads: int | None = None) -> str:
        """Where the pair's costs at ``threads`` (default: the count now) are kept."""
        return CostStore.key(self.target, self.draft_runtime, self.node_max + 1, threads)

    def _stored_costs(self, threads: int) -> CostModel | None:
        """The costs a session before kept for this pair at ``threads``, if any."""
        return self._cost_store.load(self._costs_key(threads), self.node_max + 1)

    def new_controller(
        self,
        mode: PolicyMode,
        fixed_gamma: int | None = None,
        fixed_side: int | None = None,
        *,
        chain: bool = False,
    ) -> GammaController:
        """A controller starting from this engine's calibration and what
        sessions before learned of the pair (``kept_learning``); ``chain``:
        drafting chains only, even where trees could be."""
        tree = self.tree and not chain
        side = self.config.fixed_side if fixed_side is None else fixed_side
        return self._controller(
            self.drafter,
            self.config.drafter,
            self.costs,
            mode,
            fixed_gamma=self.config.gamma if fixed_gamma is None else fixed_gamma,
            fixed_side=side if tree else 0,
            tree=tree,
            node_max=self.node_max,
        )

    def _controller(
        self,
        drafter: Drafter | None,
        kind: DrafterKind,
        costs: CostModel,
        mode: PolicyMode,
        *,
        fixed_gamma: int,
        fixed_side: int,
        tree: bool,
        node_max: int,
    ) -> GammaController:
        """A controller for ``drafter`` (of ``kind``) from a copy of ``costs``."""
        own = costs.copy()
        if spec(kind).free:
            own.t_draft = 0.0  # (prompt lookup: a dictionary look-up next to a decode)
        return GammaController(
            own,
            mode=mode,
            gamma_max=self.config.gamma_max,
            fixed_gamma=fixed_gamma,
            side_max=self.config.tree_nodes - 1 if tree else 0,
            fixed_side=fixed_side,
            node_max=node_max,
            option=Option((drafter.draft_model or drafter).name) if drafter else UNNAMED,
            threads=self.target.n_threads,
            stored_costs=self._stored_costs,
            kept=self.kept_learning,
        )

    @property
    def node_max(self) -> int:
        """Most draft tokens in one round: γ_max for chains, the node budget for trees."""
        cfg = self.config
        return most_draft_tokens(gamma_max=cfg.gamma_max, tree_nodes=cfg.tree_nodes, tree=self.tree)

    def finish_reply(self, stats: GenerationStats, *, remeasure: bool = True) -> float:
        """The baseline of the reply just streamed (``stats``), as
        ``gambit.engine.gamma.metrics`` defines it: its own rate if it drafted
        nothing, else plain decoding on its context, from a plain step
        re-timed now (``time_plain_step``; the last baseline with
        ``remeasure`` False, when nobody waits for the figure, or when the
        cache went elsewhere and there is nothing to re-time on). It becomes
        ``baseline_tokens_per_s`` on the threads in use until the next reply
        ends, so that a reply's baseline never moves while it streams. The
        controller's t_target(1) moves towards the step
        (``CostModel.observe_plain_step``), and its other costs with it."""
        measured = self.baseline_tokens_per_s
        timed = stats.n_drafted and remeasure
        step = time_plain_step(self.target, self.decoder.context) if timed else 0.0
        if step > 0:
            self.controller.costs.observe_plain_step(step)
            measured = plain_tokens_per_s(step, stats)
        baseline = reply_baseline(stats, measured)
        self.baselines.keep(self.threads.current, baseline, stats)
        return baseline

    def replay(
        self,
        drafter: DrafterKind | None,
        costs: CostModel,
        *,
        gamma: int | None = None,
        tree: bool = False,
        draft: Path | None = None,
    ) -> Replay:
        """A decoder of its own on the loaded models, whose policy starts from
        ``costs`` and teaches this engine's controller nothing (Measure on my
        chats replays turns on several side by side). ``drafter`` None decodes
        plainly; prompt lookup gets a fresh index, not the engine's; "draft"
        is the loaded draft model (alone, also out of draft model + lookup);
        ``gamma`` None: the adaptive policy, else fixed γ; ``tree``: token trees
        within the configured node budget."""
        if drafter is None:
            return SpeculativeDecoder(self.target, None, FixedGamma(0), self.threads)
        kind = spec(drafter)
        chosen: Drafter | None
        if draft is not None and not self._is_loaded_draft(draft):
            chosen = self.candidates.drafter(draft)  # (a candidate: drafter "draft")
            drafter, tree = "draft", False
        elif not kind.loads_model:
            given = BuildInput(self.target, None, None, self.config.lookup_ngram_max)
            chosen = kind.build(given).drafter
        elif drafter == "draft":  # (out of draft model + lookup: the model alone)
            chosen = (self.drafter.draft_model if self.drafter else None) or self.drafter
        else:
            chosen = self.drafter
        cfg = self.config
        policy = self._controller(
            chosen,
            drafter,
            costs,
            "adaptive" if gamma is None else "fixed",
            fixed_gamma=gamma or cfg.gamma,
            fixed_side=0,
            tree=tree,
            node_max=most_draft_tokens(
                gamma_max=cfg.gamma_max, tree_nodes=cfg.tree_nodes, tree=tree
            ),
        )
        return SpeculativeDecoder(self.target, chosen, policy, self.threads)

    def use_controller(self, controller: GammaController) -> None:
        self.controller = controller
        self.decoder.policy = controller

    def set_speculation(self, enabled: bool) -> None:
        """Speculation on or off from the next round (mid-reply included; any
        thread: a bool the engine's thread reads once per round). Off, rounds
        decode plainly and the controller keeps what it has learned."""
        self.decoder.speculation_enabled = enabled

    @property
    def copies_text(self) -> bool:
        """Whether the drafter copies text (prompt lookup), so that a memory
        of earlier conversations (``set_history``) can help it."""
        return self.drafter is not None and self.drafter.copies_text

    def set_history(self, history: HistoryIndex | None) -> None:
        """Let prompt lookup copy from ``history`` too, from the next round
        (None: from the current conversation only)."""
        if self.drafter is not None:
            self.drafter.set_history(history)

    @property
    def tokenizer_fingerprint(self) -> str:
        """Equal for targets that turn text into the same tokens: the GGUF's
        tokenizer digest, or the vocabulary's size and a sample's tokens."""
        if self.target.tokenizer_digest:
            return self.target.tokenizer_digest
        sample = self.tokenize_text("Gambit: 0123 ÄÖÜ — def f(x):\n\treturn x")
        return f"v{self.target.n_vocab}-" + "-".join(map(str, sample))[:200]

    def tokenize_text(self, text: str) -> list[int]:
        """``text`` as the target's tokens, as it occurs inside a message (no BOS;
        special tokens' names as plain text)."""
        return self.target.tokenize(text, add_special=False, parse_special=False)

    @property
    def decision(self) -> Decision:
        """What the policy decided for the coming round, and why (the
        statistics' γ and their "controller:" sentence)."""
        return self.controller.decision

    @property
    def baseline_tokens_per_s(self) -> float:
        """Plain decoding's rate on the threads in use now, as the last reply
        on them measured it (``finish_reply``), or the load's before any (0.0:
        never measured on them): what a reply that drafts is compared with
        while it streams. It changes only when a reply ends."""
        return self.baselines.at(self.threads.current)

    def snapshot(
        self,
        tracker: MetricsTracker,
        baseline: float | None = None,
        *,
        busy: str | None = None,
        gamma: int = 0,
        reason: str = "",
        side_nodes: int = 0,
    ) -> MetricsSnapshot:
        """A reply's figures (``MetricsTracker.snapshot``) against plain decoding
        on the threads in use now: ``baseline`` as the reply's end measured it,
        or while it streams the engine's (``baseline_tokens_per_s``)."""
        return tracker.snapshot(
            self.baseline_tokens_per_s if baseline is None else baseline,
            gamma,
            reason,
            tree=self.tree,
            side_nodes=side_nodes,
            busy=busy,
            baseline_threads=self.threads.current,
            threads=self.threads.choice.describe(),
        )

    @property
    def speculating(self) -> bool:
        """Whether rounds may draft: a drafter is loaded and speculation is on."""
        return self.drafter is not None and self.decoder.speculation_enabled

    @property
    def context(self) -> list[int]:
        """The tokens the target holds now (the last reply's prompt and reply)."""
        return self.decoder.context

    @property
    def chat_builder(self) -> ChatPromptBuilder:
        if self._chat is None:
            self._chat = ChatPromptBuilder(self.target)
        return self._chat

    def resume_tokens(self, text: str, kept: KeptTokens | None) -> list[int]:
        """The tokens the cut reply ``text`` continues from (``continuation``):
        ``kept`` where they are this target's and spell ``text``, else ``text``'s."""
        return resume_tokens(self.target, self.tokenizer_fingerprint, text, kept)

    def chat(
        self,
        messages: Sequence[Message],
        config: GenerationConfig,
        cancel: threading.Event | None = None,
        *,
        reply: Sequence[int] = (),
    ) -> Iterator[Round]:
        """Stream the assistant's reply to ``messages``, one round at a time.
        ``reply``: Continue a reply to them that was cut, from its tokens
        (``resume_tokens``), its turn left open (``gambit.engine.text.continuation``)."""
        builder = self.chat_builder
        try:
            prompt = builder.build(messages, config.max_tokens, cancel, reply=reply)
        except RenderCancelledError:  # stopped while the chat template rendered
            yield Round(0, (), "", 0, 0, 0, (), 0.0, 0.0, 0.0, stop=StopReason.CANCELLED)
            return
        if prompt.n_dropped:
            log.info("left out the %d oldest messages to fit the context", prompt.n_dropped)
        yield from self.reply_to(prompt, config, cancel)

    def reply_to(
        self, prompt: ChatPrompt, config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[Round]:
        """Stream the reply to a prompt already built with ``chat_builder``
        (for a caller that must see it first: the local server refuses one
        that left turns out)."""
        try:
            yield from self._generate(prompt.tokens, config, cancel, prompt.n_reply)
        finally:
            self.chat_builder.remember(prompt, self.decoder.context)

    def complete(
        self, text: str | list[int], config: GenerationConfig, cancel: threading.Event | None = None
    ) -> Iterator[Round]:
        """Plain completion of ``text`` (base models, no chat template), its
        start left out where it does not fit; or of a prompt already built
        with ``completion_tokens`` (the middle between two texts included)."""
        if isinstance(text, str):
            text = completion_tokens(self.target, text, None, config.max_tokens)
        yield from self._generate(text, config, cancel)

    def _generate(
        self,
        tokens: list[int],
        config: GenerationConfig,
        cancel: threading.Event | None,
        continues: int = 0,
    ) -> Iterator[Round]:
        # A target on workers watches Stop during every call, not only the
        # prompt: a worker that stops answering mid-round must not hang it.
        hosted = self.target if isinstance(self.target, HostedRuntime) else None
        if hosted is not None:
            hosted.cancel = cancel
        try:
            yield from self.decoder.generate(tokens, config, cancel, continues=continues)
        finally:
            if hosted is not None:
                hosted.cancel = None

    def close(self) -> None:
        if self._ready:  # (not when a load failed half-way: nothing was measured)
            self.keep_costs()
        if self._candidates is not None:
            self._candidates.close()
        if self.draft_runtime is not None:
            self.draft_runtime.close()
        self.target.close()
