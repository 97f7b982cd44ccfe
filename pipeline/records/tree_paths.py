"""Questions about paths in one search tree that the training records ask.

* which answers a root-to-node path already holds (a path that answered before
  its last node is a self-correction trace: it went on with the continuation
  prompt after an earlier answer);
* where two trajectories part (their lowest common ancestor) and what kind of
  pair that makes (siblings, cousins, diverging at the root, or one the
  prefix of the other);
* what the subtree under each node reached: how many answered nodes, how many
  of them labelled correct (the Monte-Carlo estimate of a step's value used by
  Math-Shepherd-style process labels).

Node ids grow in creation order, so a parent's id is always below its
children's: one reverse sweep over the node list aggregates every subtree.
Pure functions over `search.tree.Tree`; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from search.tree import ROOT_ID, Node, Tree

PairType = Literal["siblings", "cousins", "root", "prefix"]
PAIR_TYPES: tuple[PairType, ...] = ("siblings", "cousins", "root", "prefix")


def answers_on_path(tree: Tree, node: Node) -> list[Node]:
    """The answered nodes from the root's child down to `node`, `node` included."""
    return [n for n in tree.path(node) if n.answered]


def common_ancestor(tree: Tree, a: Node, b: Node) -> Node:
    """The deepest node on both root paths (a node is its own ancestor)."""
    nodes = tree.nodes
    while a.depth > b.depth:
        a = nodes[a.parent_id]  # type: ignore[index]  # depth > 0: not the root
    while b.depth > a.depth:
        b = nodes[b.parent_id]  # type: ignore[index]
    while a.id != b.id:
        a = nodes[a.parent_id]  # type: ignore[index]
        b = nodes[b.parent_id]  # type: ignore[index]
    return a


@dataclass(frozen=True, slots=True)
class Divergence:
    """How two trajectories of one tree relate."""

    ancestor: Node  # where they part
    pair_type: PairType

    @property
    def shared_steps(self) -> int:
        """Generated steps both trajectories share (0 when they part at the root)."""
        return self.ancestor.depth


def divergence(tree: Tree, a: Node, b: Node) -> Divergence:
    """Where `a` and `b` part and the pair type.

    ``prefix``: one is an ancestor of the other (one trajectory extends the
    other); ``root``: they share no generated step; ``siblings``: they are
    children of one (non-root) node; ``cousins``: they part at a non-root node
    with at least one of them deeper below it.
    """
    ancestor = common_ancestor(tree, a, b)
    if ancestor.id in (a.id, b.id):
        kind: PairType = "prefix"
    elif ancestor.id == ROOT_ID:
        kind = "root"
    elif a.parent_id == b.parent_id:
        kind = "siblings"
    else:
        kind = "cousins"
    return Divergence(ancestor, kind)


@dataclass(frozen=True, slots=True)
class SubtreeAnswers:
    """Answered nodes with a label in a node's subtree (the node included), how many are
    correct, and how many answered nodes there have no label (ungraded: their comparison
    was cut off, so they count neither way)."""

    answered: int
    correct: int
    ungraded: int = 0

    @property
    def value(self) -> float | None:
        """The fraction of correct answers reached below: None when nothing below answered."""
        return self.correct / self.answered if self.answered else None


def subtree_answers(tree: Tree, labels: Mapping[int, bool]) -> list[SubtreeAnswers]:
    """`SubtreeAnswers` for every node, indexed by node id; `labels` maps answered ids (an
    answered node it does not map is ungraded)."""
    answered = [0] * len(tree)
    correct = [0] * len(tree)
    ungraded = [0] * len(tree)
    for node in reversed(tree.nodes):
        if node.answered:
            label = labels.get(node.id)
            if label is None:
                ungraded[node.id] += 1
            else:
                answered[node.id] += 1
                correct[node.id] += label
        if node.parent_id is not None:
            answered[node.parent_id] += answered[node.id]
            correct[node.parent_id] += correct[node.id]
            ungraded[node.parent_id] += ungraded[node.id]
    return [SubtreeAnswers(a, c, u) for a, c, u in zip(answered, correct, ungraded, strict=True)]


def path_steps(tree: Tree, node: Node) -> list[str]:
    """The steps of the root-to-`node` path as texts, one per node.

    The first step carries the response prefix ("Step 1:"); each later one
    starts with the boundary or continuation the search inserted.  Joined with
    no separator they give `tree.assistant_text(node)`; surrounding whitespace
    is stripped here because TRL's stepwise format joins steps with its own
    separator.
    """
    segments = tree.path_segments(node)
    steps = [tree.response_prefix + segments[0], *segments[1:]] if segments else []
    return [s.strip() for s in steps]


__all__ = [
    "PAIR_TYPES",
    "Divergence",
    "PairType",
    "SubtreeAnswers",
    "answers_on_path",
    "common_ancestor",
    "divergence",
    "path_steps",
    "subtree_answers",
]
