"""Shared builders for the search-core tests (no Ray, no model)."""

from __future__ import annotations

from search.protocols import FinishReason
from search.tree import Tree


def small_tree() -> Tree:
    """The tree of the hand-computed formula tests.

    root -> a (Q=0.8) -> c (Q=0.6)
                      -> d (Q=1.0, answered, "\\boxed{5}")
         -> b (Q=0.4)
    """
    tree = Tree("problem")
    stop = FinishReason.STOP_STRING
    a = tree.add_child(
        tree.root, text=" a", q=0.8, answered=False, answer=None, finish=stop, output_tokens=2
    )
    tree.add_child(
        tree.root, text=" b", q=0.4, answered=False, answer=None, finish=stop, output_tokens=2
    )
    tree.add_child(a, text=" c", q=0.6, answered=False, answer=None, finish=stop, output_tokens=2)
    tree.add_child(
        a,
        text=" answer is \\boxed{5}",
        q=1.0,
        answered=True,
        answer="5",
        finish=FinishReason.EOS,
        output_tokens=4,
    )
    return tree
