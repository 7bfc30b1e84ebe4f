"""The most draft tokens of one round: one rule for the engine, the
measurements and the models dialog's cost curve."""

from __future__ import annotations

from gambit.engine.session import TREE_NODES_MAX, TREE_NODES_MIN, most_draft_tokens


def test_a_chain_drafts_at_most_gamma_max() -> None:
    assert most_draft_tokens(gamma_max=8, tree_nodes=4, tree=False) == 8
    assert most_draft_tokens(gamma_max=1, tree_nodes=16, tree=False) == 1


def test_a_tree_drafts_at_most_its_node_budget_whatever_gamma_max() -> None:
    for nodes in range(TREE_NODES_MIN, TREE_NODES_MAX + 1):
        assert most_draft_tokens(gamma_max=8, tree_nodes=nodes, tree=True) == nodes
