"""What the training builders (sft, dpo, kto, prm, step_dpo) share: turns, paths, gates.

* `user_turn` / `assistant_turn`: the training prompt (`records.prompt`, the same
  user turn in every table) and one assistant message;
* `distinct_trajectories`: the first node of every distinct training text, and
  with a similarity below 1 the first of every group of near duplicates
  (rapidfuzz's normalised Indel similarity of the texts);
* `answers_in_path` and `select_paths`: the self-correction rule (a path that
  answered before its last node, or whose text states more than one answer, is a
  self-correction trace) and the gates every training table applies, each gate's
  drops counted per record and gate (``"sft.truncated"``), the process gates of
  correct paths (a false equation, a low step value) among them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from rapidfuzz.distance import Indel

from pipeline.records.config import GatesConfig, SelfCorrection
from pipeline.records.context import Drops, count
from pipeline.records.equations import states_false_equation
from pipeline.records.grading import GradedTree
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


def answers_in_path(graded: GradedTree, node: Node) -> int:
    return len(answers_on_path(graded.result.tree, node))


def select_paths(
    graded: GradedTree,
    nodes: Sequence[Node],
    dedupe: bool,
    self_correction: SelfCorrection,
    *,
    record: str = "",
    gates: GatesConfig | None = None,
) -> tuple[list[tuple[Node, int]], Drops]:
    """(node, answers_in_path) of `nodes` after the gates, and what each gate dropped.

    First, always, ``empty_step``: a path with a step of no text but white space
    (`Node.empty`, an engine that answered with nothing) is never a training row.
    Then, with `gates` (`records.gates`): ``truncated`` (`drop_truncated`) and
    ``no_statement`` (`require_statement`: the text states no answer); then the
    process gates of correct paths: ``false_equation`` (`false_equation`: the text
    states arithmetic that does not hold) and ``low_step_value`` (`min_step_value`:
    a node on the path has a Q below it); then
    ``duplicate`` (with `dedupe`; near duplicates by `gates.near_duplicate`, exact
    copies without gates); then the self-correction rule (``self_correction``): a
    path is a self-correction trace when an earlier node on it answered or its
    training text states more than one answer; last, with
    `gates.rejected_states_reference`, ``states_reference``: an incorrect path whose
    text states the reference.
    """
    if self_correction not in ("exclude", "include", "only"):
        raise ValueError(f"unknown self_correction rule {self_correction!r}")
    drops: Drops = Counter()

    def gate(name: str, nodes: list[Node], keep: Callable[[Node], bool]) -> list[Node]:
        kept = [n for n in nodes if keep(n)]
        count(drops, f"{record}.{name}", len(nodes) - len(kept))
        return kept

    tree = graded.result.tree
    picked = gate("empty_step", list(nodes), lambda n: not has_empty_step(tree, n))
    if gates is not None and gates.drop_truncated:
        picked = gate("truncated", picked, lambda n: not graded.training(n).truncated)
    if gates is not None and gates.require_statement:
        picked = gate("no_statement", picked, lambda n: graded.training(n).statements > 0)
    # the process gates: a correct path is a good example only when its steps are; a wrong
    # path is a bad example whatever its steps, so the negative side is left alone
    if gates is not None and gates.false_equation:
        picked = gate(
            "false_equation",
            picked,
            lambda n: not graded.labels[n.id] or not states_false_equation(graded.training(n).text),
        )
    if gates is not None and gates.min_step_value is not None:
        floor = gates.min_step_value
        picked = gate(
            "low_step_value",
            picked,
            lambda n: not graded.labels[n.id] or lowest_step_value(tree, n) >= floor,
        )
    if dedupe:
        similarity = 1.0 if gates is None else gates.near_duplicate
        kept = distinct_trajectories(picked, graded, similarity)
        count(drops, f"{record}.duplicate", len(picked) - len(kept))
        picked = kept
    many = {n.id for n in picked if graded.training(n).statements > 1}
    answers = {n.id: answers_in_path(graded, n) for n in picked}
    if self_correction == "exclude":
        picked = gate("self_correction", picked, lambda n: answers[n.id] == 1 and n.id not in many)
    elif self_correction == "only":
        picked = gate("self_correction", picked, lambda n: answers[n.id] > 1 or n.id in many)
    if gates is not None and gates.rejected_states_reference:
        picked = gate(
            "states_reference",
            picked,
            lambda n: graded.labels[n.id] or n.id not in graded.states_reference,
        )
    return [(n, answers[n.id]) for n in picked], drops


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
    "select_paths",
    "user_turn",
]
