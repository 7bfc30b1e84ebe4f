"""Token trees: several candidate continuations verified in one target batch.

A tree is a main chain (what a chain drafter would have proposed: nodes
0..depth-1, each the child of the one before) plus *side nodes*: other
candidates for some position, hung off the main chain's nodes. Verification
walks it from the root (the last committed token): at each node it tries the
children in index order, main child first, with recursive rejection sampling,
and follows the first one accepted.

Nodes are stored in topological order (a parent before its children), so the
tree goes into a llama.cpp batch as it is: node i is batch row i + 1, row 0
being the root.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gambit.engine.verification.sampling import Distribution


@dataclass(frozen=True)
class DraftTree:
    tokens: tuple[int, ...]
    parents: tuple[int, ...]  # parent node of each node; -1: the root
    # q[i]: the distribution node i was drawn from, given its earlier siblings
    # (for sampling without replacement: the drafter's distribution with those
    # siblings removed). None: every node is a deterministic proposal, a point
    # mass.
    q: tuple[Distribution, ...] | None
    main_depth: int  # nodes 0..main_depth-1 form the main chain
    n_synced: int = 0  # tokens the drafter decoded to catch up (as Draft.n_synced)
    t_synced_s: float = 0.0  # and the seconds that took (as Draft.t_synced_s)

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.tokens):
            raise ValueError("a tree needs one parent per node")
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i}: parent {parent} must come before it")
        for i in range(self.main_depth):
            if self.parents[i] != i - 1:
                raise ValueError("nodes 0..main_depth-1 must form a chain")
        if self.main_depth and self.main_depth - 1 in self.parents:
            # The main chain's leaf ends KV sequence 0 in a tree batch.
            raise ValueError("the main chain's last node must be a leaf")
        if self.q is not None and len(self.q) != len(self.tokens):
            raise ValueError("a tree needs one proposal distribution per node")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_side(self) -> int:
        return len(self.tokens) - self.main_depth

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """children[i + 1]: the children of node i in trial order; children[0]: the root's."""
        kids: list[list[int]] = [[] for _ in range(len(self.tokens) + 1)]
        for i, parent in enumerate(self.parents):
            kids[parent + 1].append(i)
        return tuple(tuple(k) for k in kids)


def chain_tree(
    tokens: tuple[int, ...],
    q: list[Distribution] | None,
    n_synced: int,
    t_synced_s: float = 0.0,
) -> DraftTree:
    """A chain as a tree with no side nodes."""
    return DraftTree(
        tokens=tokens,
        parents=tuple(range(-1, len(tokens) - 1)),
        q=tuple(q) if q is not None else None,
        main_depth=len(tokens),
        n_synced=n_synced,
        t_synced_s=t_synced_s,
    )
