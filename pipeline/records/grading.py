"""Labels for every answered node of a search tree: `grade_result` and its `GradedTree`.

With a reference answer each *distinct* extracted answer of the tree is
compared once with math-verify (`actors.grading.answers_match`, bounded by
``timeout_s`` per comparison; a timeout or a parse failure is "incorrect"),
and every node carrying it gets that verdict: ``label_source = "reference"``.
Without a reference the labels are pseudo labels (``pseudo_label = true``):

* ``prm_threshold``: an answered node is labelled correct when its Q >= threshold;
* ``majority``: the distinct answers are grouped by math-verify equivalence
  (each new answer is compared with one representative of every group) and
  the nodes of the largest group are labelled correct; ties go to the group
  with the higher best Q, then to the group reached first.

An answered node without an extractable ``\\boxed{}`` answer is always incorrect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from actors.grading import answers_match
from actors.prompts import POLICY_INSTRUCTION
from pipeline.records.config import PseudoLabel
from search.answer_choice import normalize_answer
from search.driver import SearchResult
from search.tree import Node

LabelSource = Literal["reference", "prm_threshold", "majority"]


@dataclass(frozen=True, slots=True)
class GradedTree:
    """A search result with a label for every answered node."""

    problem_id: str
    result: SearchResult
    reference: str | None
    label_source: LabelSource
    labels: Mapping[int, bool]  # answered node id -> label
    chosen_correct: bool | None  # null without a reference
    verified: Mapping[str, bool] = field(default_factory=dict)  # distinct answer -> verdict
    grade_timeouts: int = 0  # comparisons cut off by their limit (graded incorrect)
    # the policy's user-turn template the search ran with (`PromptConfig`): training
    # prompts must be the prompt the trajectories were generated from
    instruction: str = POLICY_INSTRUCTION

    @property
    def pseudo(self) -> bool:
        return self.label_source != "reference"

    def answered(self) -> list[Node]:
        return self.result.answered_nodes

    def trajectory(self, node: Node) -> str:
        return self.result.tree.assistant_text(node)


async def grade_result(
    result: SearchResult,
    reference: str | None,
    *,
    problem_id: str,
    timeout_s: float = 5.0,
    pseudo_label: PseudoLabel = "prm_threshold",
    threshold: float = 0.5,
) -> GradedTree:
    """Label every answered node of `result` (see the module docstring for the rules).

    With a reference, each distinct (whitespace-normalized) answer string is
    verified once; `GradedTree.verified` holds those verdicts.
    """
    nodes = result.answered_nodes
    keys = {n.id: answer_key(n.answer) for n in nodes}
    if reference is not None:
        candidates = [*keys.values(), answer_key(result.chosen_answer)]
        distinct = list(dict.fromkeys(k for k in candidates if k is not None))
        verdicts = await asyncio.gather(*(answers_match(d, reference, timeout_s) for d in distinct))
        verified = dict(zip(distinct, verdicts, strict=True))
        labels = {i: k is not None and verified.get(k, False) for i, k in keys.items()}
        chosen = answer_key(result.chosen_answer)
        chosen_correct = chosen is not None and verified.get(chosen, False)
        return GradedTree(
            problem_id, result, reference, "reference", labels, chosen_correct, verified
        )
    if pseudo_label == "prm_threshold":
        labels = {n.id: keys[n.id] is not None and n.q >= threshold for n in nodes}
    elif pseudo_label == "majority":
        winners = await _majority_answers(nodes, keys, timeout_s)
        labels = {n.id: keys[n.id] in winners for n in nodes}
    else:
        raise ValueError(f"unknown pseudo_label rule {pseudo_label!r}")
    return GradedTree(problem_id, result, None, pseudo_label, labels, None)


def answer_key(answer: str | None) -> str | None:
    if answer is None:
        return None
    key = normalize_answer(answer)
    return key or None


async def _majority_answers(
    nodes: Sequence[Node], keys: Mapping[int, str | None], timeout_s: float
) -> set[str]:
    """The answer strings of the largest math-verify-equivalence group."""
    groups: list[list[str]] = []  # first element: the representative
    count: dict[str, int] = {}
    best_q: dict[str, float] = {}
    for n in nodes:
        k = keys[n.id]
        if k is None:
            continue
        count[k] = count.get(k, 0) + 1
        best_q[k] = max(best_q.get(k, 0.0), n.q)
    for answer in count:  # first-reached order
        for group in groups:
            if await answers_match(answer, group[0], timeout_s):
                group.append(answer)
                break
        else:
            groups.append([answer])
    if not groups:
        return set()
    best = max(
        groups,
        key=lambda g: (sum(count[a] for a in g), max(best_q[a] for a in g)),
    )  # max() keeps the first group on full ties
    return set(best)


__all__ = ["GradedTree", "LabelSource", "answer_key", "grade_result"]
