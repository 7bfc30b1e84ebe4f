"""Which llama.cpp CPU kernels a model runs on, chosen by measurement, never by crash.

Two knobs change llama.cpp's kernels without changing the model:

- weight repacking ("extra buffer types", ``use_extra_bufts``): faster
  matmuls on most CPUs, but on some (measured: AVX-512 + AMX machines) every
  batch larger than one token dies inside the AMX kernels (SIGILL/SIGSEGV),
  and for some weight types the batched and single-token results differ;
- the KV cache type: a Q8_0 cache keeps single-token and batched attention on
  the same kernel (see docs/adr/0001), an F16 cache can be a little faster.

A configuration may crash the process, so each one is tried in a child
process (``python -I -m gambit.engine.machine.kernel_child``): a prefill batch, every
verification batch size 1..k_max, batched against single-token logits, and
the speed of both. A child that dies by a signal, hangs or fails marks the
configuration it was running unusable; the survivors are compared.

The answer depends on weight types, shapes and the CPU, not on depth or on
the weights' values. So the probe runs on a miniature of the model where one
is much smaller (``gambit.formats.probe_model``: the same tensors, a few of
the blocks): a few seconds whatever the model's size (a 1.8 GB target took
33 s probed whole). The verdict is cached per llama.cpp build, CPU, threads
and GPU layers, under the model file and under its layout: the probe runs
once per layout (a fine-tune, another chat template or a cost-scaled copy
shares it) and again only when one of those changes. A repacking load whose
weights land in the same buffers as a plain one (F32 weights: llama.cpp has
nothing to repack them into) runs the same kernels, so it stands for the
plain configuration instead of being measured again (``ProbeResult.same_as``).

- ``KernelVerdict.exact()``: the fastest configuration whose batched logits
  equal the single-token ones, so greedy speculation reproduces plain
  decoding token for token (the target's default);
- ``KernelVerdict.fastest()``: the fastest that runs ("fast kernels", and
  always the draft's: a draft's numerics cannot change what the target
  accepts, only how often).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import llama_cpp as ll

from gambit.engine.machine.llama_lib import ensure_backend
from gambit.errors import GambitError
from gambit.formats.probe_model import layout_digest, write_probe_model
from gambit.fsutil import remove_stale, write_atomic

log = logging.getLogger(__name__)

KVType = Literal["q8_0", "f16"]


@dataclass(frozen=True)
class KernelConfig:
    """One way to run a model's kernels."""

    repack: bool  # llama.cpp's repacked weight kernels ("extra buffer types")
    kv_type: KVType

    @property
    def key(self) -> str:
        return f"{'repack' if self.repack else 'plain'}+{self.kv_type}"

    def describe(self) -> str:
        weights = "repacked weights" if self.repack else "plain weights"
        return f"{weights}, {self.kv_type.upper()} KV cache"

    @classmethod
    def from_key(cls, key: str) -> KernelConfig:
        weights, _, kv = key.partition("+")
        if weights not in ("repack", "plain") or kv not in ("q8_0", "f16"):
            raise ValueError(f"unknown kernel configuration {key!r}")
        return cls(repack=weights == "repack", kv_type=kv)  # type: ignore[arg-type]


# Batch-invariant on every CPU measured so far (docs/adr/0001): the safe default.
EXACT = KernelConfig(repack=False, kv_type="q8_0")
# What llama.cpp does by default.
LLAMA_DEFAULT = KernelConfig(repack=True, kv_type="f16")


def implied_kernels(exact: bool) -> KernelConfig:
    """The kernels a model runs on when no probe chose them: EXACT when exact
    (batch-invariant) kernels are asked for, else llama.cpp's own. The one
    place that says which KV-cache type the "exact kernels" setting implies."""
    return EXACT if exact else LLAMA_DEFAULT


CANDIDATES: tuple[KernelConfig, ...] = (
    EXACT,
    KernelConfig(repack=True, kv_type="q8_0"),
    KernelConfig(repack=False, kv_type="f16"),
    LLAMA_DEFAULT,
)

PROBE_CONTEXT = 300  # tokens: past 256, where llama.cpp's attention kernels change
# A configuration must be this much faster than EXACT to be preferred to it.
SPEED_MARGIN = 0.05
# Rows of the largest batch compared with single-token decodes.
COMPARED_ROWS = 9
PROBE_TIMEOUT_S = 120.0  # per configuration, for the largest models; small ones take ~1 s


@dataclass(frozen=True)
class ProbeResult:
    """How one configuration fared in the probe."""

    config: KernelConfig
    ok: bool
    error: str = ""  # why it is unusable: "crashed (SIGSEGV)", "hung", "failed: ..."
    t1_s: float = 0.0  # one token
    tk_s: float = 0.0  # a batch of k_max tokens
    k_max: int = 0
    max_diff: float = 0.0  # batched vs single-token logits, largest |difference|
    argmax_flips: int = 0  # rows whose top token differs between the two
    # The buffer types llama.cpp put the weights in ("CPU_Mapped", "AMX", "CPU_REPACK", ...).
    weight_buffers: tuple[str, ...] = ()
    # The configuration whose kernels this one runs on ("plain+q8_0"): a
    # repacking load whose weights landed in the same buffers as a plain one
    # repacked nothing (F32 weights, say), so it is the plain one's result.
    same_as: str = ""

    @property
    def batch_invariant(self) -> bool:
        return self.ok and self.max_diff == 0.0

    @property
    def cost_s(self) -> float:
        """What the speed comparison ranks by: a plain token plus one verification batch."""
        return self.t1_s + self.tk_s

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"] = self.config.key
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProbeResult:
        return cls(
            **{
                **d,
                "config": KernelConfig.from_key(str(d["config"])),
                "weight_buffers": tuple(d.get("weight_buffers", ())),
            }
        )

    def standing_for(self, config: KernelConfig) -> ProbeResult:
        """This result as ``config``'s, which runs on the same kernels."""
        return replace(self, config=config, same_as=self.config.key)


@dataclass(frozen=True)
class KernelVerdict:
    results: tuple[ProbeResult, ...]
    probed_at: float = field(default_factory=time.time)
    # What ran: "" for the model itself, else its miniature ("8 of 120 blocks").
    probed_on: str = ""

    def result(self, config: KernelConfig) -> ProbeResult | None:
        return next((r for r in self.results if r.config == config), None)

    def usable(self, config: KernelConfig) -> bool:
        r = self.result(config)
        return r is not None and r.ok

    def fastest(self) -> KernelConfig:
        """The fastest configuration that runs (EXACT if none did: nothing better is known)."""
        return self._quickest([r for r in self.results if r.ok])

    def exact(self) -> KernelConfig:
        """The fastest batch-invariant configuration; failing that, the fastest
        of those with the fewest greedy flips and the smallest differences."""
        ok = [r for r in self.results if r.ok]
        invariant = [r for r in ok if r.batch_invariant]
        if invariant or not ok:
            return self._quickest(invariant)
        fewest = min((r.argmax_flips, r.max_diff) for r in ok)
        return self._quickest([r for r in ok if (r.argmax_flips, r.max_diff) == fewest])

    @staticmethod
    def _quickest(results: Sequence[ProbeResult]) -> KernelConfig:
        """The fastest of ``results``, but EXACT unless another is clearly faster:
        the probe's timings carry a few per cent of noise, and EXACT is the
        configuration known to be safe and batch-invariant on most CPUs."""
        if not results:
            return EXACT
        best = min(results, key=lambda r: r.cost_s)
        exact = next((r for r in results if r.config == EXACT), None)
        if exact is not None and best.cost_s > exact.cost_s * (1 - SPEED_MARGIN):
            return EXACT
        return best.config

    def to_json(self) -> dict[str, Any]:
        return {
            "probed_at": self.probed_at,
            "probed_on": self.probed_on,
            "results": [r.to_json() for r in self.results],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelVerdict:
        return cls(
            results=tuple(ProbeResult.from_json(r) for r in d["results"]),
            probed_at=float(d.get("probed_at", 0.0)),
            probed_on=str(d.get("probed_on", "")),
        )


@dataclass(frozen=True)
class KernelChoice:
    """The configuration a model runs on, and what the user should know about it."""

    config: KernelConfig
    wanted: Literal["exact", "fast"]
    verdict: KernelVerdict | None  # None: not probed (the configuration was given)
    not_probed: str = "not probed"  # why, where there is no verdict

    def describe(self) -> str:
        """One line for the stats panel, ``--about`` and the CLI."""
        text = self.config.describe()
        if self.verdict is None:
            return f"{text} ({self.not_probed})"
        r = self.verdict.result(self.config)
        if r is None:
            return text
        if r.batch_invariant:
            exactness = "batch-invariant: greedy output as plain decoding"
        else:
            on = f" on {self.verdict.probed_on}" if self.verdict.probed_on else ""
            rows = min(r.k_max, COMPARED_ROWS)
            exactness = (
                f"not batch-invariant (logits differ by up to {r.max_diff:.2g}; "
                f"{r.argmax_flips} greedy flip(s) of {rows} in the probe{on})"
            )
        refused = [x for x in self.verdict.results if not x.ok]
        skipped = "; not used on this CPU: " + ", ".join(
            f"{x.config.describe()} ({refusal_words(x.error)})" for x in refused
        )
        return f"{text}, {exactness}" + (skipped if refused else "")


def refusal_words(error: str) -> str:
    """Why the probe refused a configuration, in words for a user: the probe's
    own test process failed on llama.cpp's kernels, not the app (``error`` is
    the probe's record: "crashed (SIGSEGV)", "hung (...)", "failed (...)")."""
    kind, _, detail = error.partition(" ")
    detail = detail.strip("()")
    if kind == "crashed":
        return f"llama.cpp's kernels fail here: its test run stopped with {detail}"
    if kind == "hung":
        return "llama.cpp's kernels hang here" + (f": {detail}" if detail else "")
    return f"llama.cpp's kernels fail here: {error}" if error else "llama.cpp's kernels fail here"


def build_id() -> str:
    """The llama.cpp build: llama-cpp-python's version and the backend's feature line."""
    ensure_backend()
    raw = ll.llama_print_system_info()
    info = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return f"{ll.__version__} {hashlib.sha256(info.encode()).hexdigest()[:16]}"


def cpu_id() -> str:
    """The CPU's model name and features: machines of one kind differ here."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    model = flags = ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name in ("flags", "Features") and not flags:
            flags = value.strip()
    return f"{model} {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


class KernelProbe:
    """Runs and caches probes. ``cache_dir`` None: remember in this process only."""

    _memory: ClassVar[dict[str, KernelVerdict]] = {}  # shared by every probe in the process
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        cache_dir: Path | None = None,
        timeout_s: float = PROBE_TIMEOUT_S,
        command: Sequence[str] | None = None,
    ):
        """``command``: how to start a child (default ``child_command()``)."""
        self.cache_dir = cache_dir
        self.timeout_s = timeout_s
        self.command = list(command) if command is not None else child_command()

    def verdict(
        self,
        model: Path,
        n_threads: int,
        n_gpu_layers: int = 0,
        k_max: int = 9,
        configs: Sequence[KernelConfig] = CANDIDATES,
    ) -> KernelVerdict:
        """The verdict for ``model`` here: as found before for this file, or for
        another of the same layout (``layout_digest``); else probed now."""
        keys = _Keys(model, n_threads, n_gpu_layers, k_max)
        with self._lock:
            found = self._lookup(keys)
            if found is None:
                log.info("probing llama.cpp kernels for %s", model.name)
                found = self._probe(model, n_threads, n_gpu_layers, k_max, configs)
            self._remember(keys, found)
            return found

    def cached(
        self, model: Path, n_threads: int, n_gpu_layers: int = 0, k_max: int = 9
    ) -> KernelVerdict | None:
        """The verdict an earlier probe found for this model (or its layout) and
        machine, or None. Never probes: for estimates that must not cost a wait."""
        with self._lock:
            return self._lookup(_Keys(model, n_threads, n_gpu_layers, k_max))

    # ---------------------------------------------------------------- the cache
    def _lookup(self, keys: _Keys) -> KernelVerdict | None:
        """Under the file's key, else under its layout's (read only then)."""
        on_disk = self._read_all()
        for key in keys:
            found = self._memory.get(f"{key} {self.command}") or _verdict_of(on_disk.get(key))
            if found is not None:
                return found
        return None

    def _remember(self, keys: _Keys, verdict: KernelVerdict) -> None:
        every = list(keys)
        for key in every:
            self._memory[f"{key} {self.command}"] = verdict
        path = self._file()
        if path is None:
            return
        data = self._read_all()
        if all(key in data for key in every):
            return
        data.update({key: verdict.to_json() for key in every})
        try:
            write_atomic(path, json.dumps(data, indent=1))
        except OSError as exc:  # a full disk costs a re-probe next time, nothing more
            log.warning("could not save the kernel verdict to %s: %s", path, exc)

    def _file(self) -> Path | None:
        return self.cache_dir / "kernels.json" if self.cache_dir is not None else None

    def _read_all(self) -> dict[str, Any]:
        path = self._file()
        if path is None or not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("ignoring an unreadable kernel cache %s: %s", path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    # ---------------------------------------------------------------- the probe
    def _probe(
        self,
        model: Path,
        n_threads: int,
        n_gpu_layers: int,
        k_max: int,
        configs: Sequence[KernelConfig],
    ) -> KernelVerdict:
        """Every configuration, in as few children as crashes allow: one child
        runs them in turn, announcing each before it starts, so when it dies
        the culprit is known and a new child goes on with the rest. They run
        the model's miniature where there is one (``_stand_in``)."""
        with self._stand_in(model) as (probed, probed_on):
            results = self._probe_file(probed, n_threads, n_gpu_layers, k_max, configs)
        return KernelVerdict(tuple(results[c] for c in configs), probed_on=probed_on)

    @contextlib.contextmanager
    def _stand_in(self, model: Path) -> Iterator[tuple[Path, str]]:
        """(the file to probe, what it is): a miniature of ``model`` written for
        the probe and removed after it, or the model itself where a miniature
        would not be much smaller or cannot be written (a full disk, a layout
        it cannot copy: the probe then takes longer, nothing worse)."""
        folder = (self.cache_dir or Path(tempfile.gettempdir())) / "probe-models"
        remove_stale(folder, _STAND_IN_NAME)  # left by a probing process that was killed
        dst = folder / f"{model.stem[:64]}.{os.getpid()}-{threading.get_ident()}.probe.gguf"
        try:
            written = write_probe_model(model, dst)
        except (GambitError, OSError, ValueError) as exc:
            log.info("probing %s whole: no miniature (%s)", model.name, exc)
            written = None
        if written is None:
            yield model, ""
            return
        try:
            yield written.path, written.describe()
        finally:
            written.path.unlink(missing_ok=True)

    def _probe_file(
        self,
        model: Path,
        n_threads: int,
        n_gpu_layers: int,
        k_max: int,
        configs: Sequence[KernelConfig],
    ) -> dict[KernelConfig, ProbeResult]:
        results: dict[KernelConfig, ProbeResult] = {}
        remaining = list(configs)
        while remaining:
            done, started, error = self._run_child(model, n_threads, n_gpu_layers, k_max, remaining)
            results.update({r.config: r for r in done})
            if started is not None:
                results[started] = ProbeResult(started, ok=False, error=error)
            elif error:  # the child failed before any configuration: nothing can run
                for c in remaining:
                    results.setdefault(c, ProbeResult(c, ok=False, error=error))
            remaining = [c for c in remaining if c not in results]
        return results

    def _run_child(
        self,
        model: Path,
        n_threads: int,
        n_gpu_layers: int,
        k_max: int,
        configs: Sequence[KernelConfig],
    ) -> tuple[list[ProbeResult], KernelConfig | None, str]:
        """Returns (finished results, the configuration running when it stopped
        abnormally, why)."""
        cmd = [
            *self.command, str(model), str(n_threads), str(n_gpu_layers), str(k_max),
            *(c.key for c in configs),
        ]  # fmt: skip
        done: list[ProbeResult] = []
        started: KernelConfig | None = None
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=self.timeout_s * len(configs),
                stdin=subprocess.DEVNULL,
            )
            out, rc, why = proc.stdout, proc.returncode, ""
        except subprocess.TimeoutExpired as exc:
            raw = exc.stdout or b""
            out = raw.decode() if isinstance(raw, bytes) else raw
            rc, why = None, f"hung (no answer in {self.timeout_s * len(configs):.0f} s)"
        except OSError as exc:
            return [], None, f"the probe could not start: {exc}"
        for line in out.splitlines():
            if line.startswith("start "):
                started = KernelConfig.from_key(line.split()[1])
            elif line.startswith("result "):
                done.append(ProbeResult.from_json(json.loads(line[len("result ") :])))
                started = None
        if rc is not None:
            if rc == 0:
                return done, None, ""
            why = _exit_reason(rc)
        if started is None and not done:
            log.warning("kernel probe failed before any configuration: %s", why)
        return done, started, why


class _Keys:
    """Where a verdict for a model is kept, in the order to look: under the
    file (path, size, time), then under its layout (``layout_digest``: its
    header is read only when the file's key found nothing), each with the
    llama.cpp build, the CPU, threads, GPU layers and batch sizes."""

    def __init__(self, model: Path, n_threads: int, n_gpu_layers: int, k_max: int) -> None:
        self.model = model
        self.machine = [build_id(), cpu_id(), str(n_threads), str(n_gpu_layers), str(k_max)]

    def _key(self, where: list[str]) -> str:
        return hashlib.sha256("\n".join(where + self.machine).encode()).hexdigest()

    def __iter__(self) -> Iterator[str]:
        st = self.model.stat()
        yield self._key([str(self.model.resolve()), str(st.st_size), str(st.st_mtime_ns)])
        try:
            layout = layout_digest(self.model)
        except (GambitError, OSError, ValueError):
            return  # an unreadable header: the load says what is wrong with it
        yield self._key(["layout", layout])


def _verdict_of(entry: object) -> KernelVerdict | None:
    if not isinstance(entry, dict):
        return None
    try:
        return KernelVerdict.from_json(entry)
    except (KeyError, TypeError, ValueError):
        return None


_STAND_IN_NAME = re.compile(r".+\.(?P<pid>\d+)-\d+\.probe\.gguf")


def _exit_reason(rc: int) -> str:
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"crashed ({signal.Signals(-rc).name})"
        return f"crashed (signal {-rc})"
    return f"failed (exit code {rc})"


CHILD_FLAG = "--gambit-kernel-probe"


def child_command() -> list[str]:
    """How to start a probe child: this very installation's module, never one
    found through the working directory (-I), or the bundled app itself."""
    if getattr(sys, "frozen", False):
        return [sys.executable, CHILD_FLAG]
    return [sys.executable, "-I", "-m", "gambit.engine.machine.kernel_child"]
