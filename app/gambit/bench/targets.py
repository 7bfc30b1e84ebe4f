"""The regime benchmark's targets, derived from one model into the cache.

- "F16", "F32", "Q8_0": the model re-quantized (llama.cpp's quantizer). Its
  own network drafts for it, so a draft step costs 0.2-0.6 of a target step:
  toy pairs, which no user runs, and where a draft model gains little.
- "F32x4", "F16x4", ...: cost-scaled targets (``gambit.formats.cost_scaled``),
  the type's blocks times the multiple, the added ones with zero outputs: the
  weight traffic of a model several times larger with the small model's
  logits, so the embedded Q4_1 model drafts at about a tenth of a target step,
  as a 0.5B draft does for a 7B target. The realistic rows.

Derived files stay in the benchmark's cache folder, never in the user's library.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gambit.errors import GambitError
from gambit.formats.cost_scaled import MULTIPLE_MAX, write_cost_scaled
from gambit.models.derive import requantize

TYPES = ("F16", "F32", "Q8_0")
_SPEC = re.compile(r"^(?P<ftype>F16|F32|Q8_0)(?:X(?P<multiple>\d+))?$")

Log = Callable[[str], None]


@dataclass(frozen=True)
class TargetSpec:
    ftype: str  # weight type, one of TYPES
    multiple: int = 1  # above 1: cost-scaled, with this many times the blocks

    @property
    def name(self) -> str:
        """As the command line and the report write it: "F32", "F32x4"."""
        return self.ftype if self.multiple == 1 else f"{self.ftype}x{self.multiple}"

    @property
    def scaled(self) -> bool:
        return self.multiple > 1

    def label(self) -> str:
        """For tables: "F32 ×4 (cost-scaled)"."""
        return f"{self.ftype} ×{self.multiple} (cost-scaled)" if self.scaled else self.ftype


def parse_targets(text: str) -> tuple[TargetSpec, ...]:
    """ "F32x4,F16,Q8_0" -> specs; GambitError naming what is wrong."""
    specs = []
    for part in (p.strip().upper() for p in text.split(",")):
        if not part:
            continue
        m = _SPEC.match(part)
        given = m.group("multiple") if m else None
        multiple = int(given) if given else 1
        if m is None or (given is not None and not 2 <= multiple <= MULTIPLE_MAX):
            raise GambitError(
                f"unknown target {part!r}: use F16, F32 or Q8_0, optionally scaled as "
                f"F32x4 (2 to {MULTIPLE_MAX} times the blocks)"
            )
        specs.append(TargetSpec(m.group("ftype"), multiple))
    if not specs:
        raise GambitError("no target types given")
    return tuple(specs)


def derive_targets(
    source: Path, specs: tuple[TargetSpec, ...], work_dir: Path, log: Log
) -> dict[TargetSpec, Path]:
    """Each target's file in ``work_dir``, derived from ``source`` where it is
    not there yet (so only the first run pays for it)."""
    stem = source.stem.rsplit(".", 1)[0]
    paths = {}
    for spec in specs:
        base = work_dir / f"{stem}.{spec.ftype}.gguf"
        if not base.is_file():
            log(f"deriving the {spec.ftype} target from {source.name}…")
            requantize(source, base, spec.ftype)
        path = base
        if spec.scaled:
            path = work_dir / f"{stem}.{spec.name}.gguf"
            if not path.is_file():
                log(f"writing the cost-scaled {spec.name} target ({spec.multiple}x the blocks)…")
                write_cost_scaled(base, path, spec.multiple)
        paths[spec] = path
    return paths
