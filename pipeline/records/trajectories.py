"""What the training builders (sft, dpo, prm, kto) share: chat turns and which paths they take.

* `user_turn` / `assistant_turn`: the prompt (the policy's user turn, built from
  the instruction the search ran with) and one assistant message;
* `distinct_trajectories`: the first node of every distinct assistant text;
* `answers_in_path` and `select_paths`: the self-correction rule (a path that
  answered before its last node is a self-correction trace).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from actors.prompts import policy_messages
from pipeline.records.config import SelfCorrection
from pipeline.records.grading import GradedTree
from pipeline.records.tree_paths import answers_on_path
from search.tree import Node


def user_turn(graded: GradedTree) -> list[dict[str, str]]:
    return policy_messages(graded.result.problem, "", graded.instruction)[:1]


def assistant_turn(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def distinct_trajectories(nodes: Iterable[Node], graded: GradedTree) -> list[Node]:
    """The first node of every distinct trajectory, order kept."""
    seen: set[str] = set()
    out: list[Node] = []
    for n in nodes:
        text = graded.trajectory(n)
        if text not in seen:
            seen.add(text)
            out.append(n)
    return out


def answers_in_path(graded: GradedTree, node: Node) -> int:
    return len(answers_on_path(graded.result.tree, node))


def select_paths(
    graded: GradedTree, nodes: Sequence[Node], dedupe: bool, self_correction: SelfCorrection
) -> list[tuple[Node, int]]:
    """(node, answers_in_path) of `nodes` after dedupe and the self-correction rule."""
    if self_correction not in ("exclude", "include", "only"):
        raise ValueError(f"unknown self_correction rule {self_correction!r}")
    picked = distinct_trajectories(nodes, graded) if dedupe else list(nodes)
    counted = [(n, answers_in_path(graded, n)) for n in picked]
    if self_correction == "exclude":
        return [(n, k) for n, k in counted if k == 1]
    if self_correction == "only":
        return [(n, k) for n, k in counted if k > 1]
    return counted


__all__ = [
    "answers_in_path",
    "assistant_turn",
    "distinct_trajectories",
    "select_paths",
    "user_turn",
]
