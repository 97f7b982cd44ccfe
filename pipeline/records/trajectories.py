"""What the training builders (sft, dpo, kto, prm, step_dpo) share: turns and paths.

* `user_turn` / `assistant_turn`: the training prompt (`records.prompt`, the same
  user turn in every table) and one assistant message;
* `distinct_trajectories`: the first node of every distinct training text, and
  with a similarity below 1 the first of every group of near duplicates
  (rapidfuzz's normalised Indel similarity of the texts);
* `trajectory_columns`: the columns an sft and a kto row share;
* `answers_in_path` (the self-correction rule counts them), `common_prefix`,
  `lowest_step_value` and `has_empty_step`: questions about one path that the gates
  (`pipeline.records.paths`) and the pair builders ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rapidfuzz.distance import Indel

from pipeline.records.grading import GradedTree
from pipeline.records.schema import Row
from pipeline.records.tree_paths import answers_on_path
from search.tree import Node, Tree


def user_turn(graded: GradedTree) -> list[dict[str, str]]:
    return [{"role": "user", "content": graded.user_prompt}]


def assistant_turn(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def distinct_trajectories(
    nodes: Iterable[Node], graded: GradedTree, similarity: float = 1.0
) -> list[Node]:
    """The first node of every distinct training text, order kept.

    `similarity` < 1 also drops a text whose normalised similarity to a kept one
    is at least `similarity` (a near duplicate: the same solution reworded).
    """
    seen: set[str] = set()
    kept: list[str] = []
    out: list[Node] = []
    for n in nodes:
        text = graded.training(n).text
        if text in seen:
            continue
        if similarity < 1 and any(
            Indel.normalized_similarity(text, k, score_cutoff=similarity) for k in kept
        ):
            continue
        seen.add(text)
        kept.append(text)
        out.append(n)
    return out


def trajectory_columns(graded: GradedTree, node: Node, answers: int) -> Row:
    """The columns an sft and a kto row share: the user turn, the trajectory ending at
    `node` as one assistant message, its node, answer and score, and `answers` on its path."""
    return {
        "prompt": user_turn(graded),
        "completion": assistant_turn(graded.training(node).text),
        "node_id": node.id,
        "answer": node.answer,
        "score": node.q,
        "answers_in_path": answers,
    }


def answers_in_path(graded: GradedTree, node: Node) -> int:
    return len(answers_on_path(graded.result.tree, node))


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading items (characters of two texts, lines of two paths) `a` and `b` share."""
    k = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        k += 1
    return k


def lowest_step_value(tree: Tree, node: Node) -> float:
    """The lowest Q of the steps on the path to `node` (the root, the problem, aside)."""
    return min(step.q for step in tree.path(node) if step.parent_id is not None)


def has_empty_step(tree: Tree, node: Node) -> bool:
    """Does the path to `node` hold a step with no text (the root, the problem, aside)?"""
    return any(step.empty for step in tree.path(node) if step.parent_id is not None)


__all__ = [
    "answers_in_path",
    "assistant_turn",
    "common_prefix",
    "distinct_trajectories",
    "has_empty_step",
    "lowest_step_value",
    "trajectory_columns",
    "user_turn",
]
