"""Labels for every answered node of a search tree: `grade_result` and its `GradedTree`.

With a reference answer each *distinct* extracted answer of the tree is
compared once with math-verify (`common.grading.compare_all`: all at once, the
whole batch bounded by ``timeout_s``; a timeout or a parse failure is "incorrect"),
and every node carrying it gets that verdict: ``label_source = "reference"``.
Without a reference the labels are pseudo labels (``pseudo_label = true``):

* ``prm_threshold``: an answered node is labelled correct when its Q >= threshold;
* ``majority``: the distinct answers are grouped by math-verify equivalence
  and the nodes of the largest group are labelled correct; ties go to the
  group with the higher best Q, then to the group reached first.  Every
  distinct answer is compared with each of the `MAJORITY_ANCHORS` most frequent
  ones, all comparisons at once in the grading pool under one time limit
  (`common.grading.compare_all`), so a tree's grading ends within one limit as
  the reference path does; groups are the connected answers.

An answered node without an extractable ``\\boxed{}`` answer is always incorrect.

`GradedTree` also holds each answered node's training text (cut after its
answer, `pipeline.records.training_text`) and, with a reference, which of those
texts state the reference anywhere (every answer statement and the whole
text's extraction are verified, so a wrong trajectory that said the right
answer on the way is known): the quality gates read both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from actors.prompts import POLICY_INSTRUCTION
from common.grading import Verdict, compare_all
from pipeline.records.config import PseudoLabel, RecordsConfig
from pipeline.records.splits import split_of
from pipeline.records.training_text import TrainingText, training_text
from search.answer_choice import normalize_answer
from search.answers import AnswerExtraction, stated_answers
from search.driver import SearchResult
from search.tree import Node

LabelSource = Literal["reference", "prm_threshold", "majority"]
# (answer, reference) pairs and a time limit -> one verdict each: `compare_all` (math-verify)
# by default; the simulated environment passes exact match (its ground truth).
Compare = Callable[[Sequence[tuple[str | None, str]], float], Awaitable[list[Verdict]]]
Difficulty = Literal["all_correct", "mixed", "none_correct", "unanswered"]


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
    # the user turn of every training row (`records.prompt`); None: the bare problem
    prompt: str | None = None
    split: str = "train"  # `pipeline.records.splits.split_of` of the problem id
    fold_blank_lines: bool = True  # how `texts` were made (`records.fold_blank_lines`)
    texts: Mapping[int, TrainingText] = field(default_factory=dict)  # answered id -> text
    # answered ids whose training text states the reference (empty without one)
    states_reference: frozenset[int] = frozenset()

    @property
    def pseudo(self) -> bool:
        return self.label_source != "reference"

    @property
    def user_prompt(self) -> str:
        """The training rows' user turn (the same in every table)."""
        return self.result.problem if self.prompt is None else self.prompt

    @property
    def difficulty(self) -> Difficulty:
        """all_correct / mixed / none_correct over the answered nodes' labels."""
        labels = set(self.labels.values())
        if not labels:
            return "unanswered"
        if labels == {True}:
            return "all_correct"
        return "mixed" if True in labels else "none_correct"

    def answered(self) -> list[Node]:
        return self.result.answered_nodes

    def trajectory(self, node: Node) -> str:
        """The raw assistant text (what `nodes` and `tree_nodes` keep)."""
        return self.result.tree.assistant_text(node)

    def training(self, node: Node) -> TrainingText:
        """The text a training row holds for the trajectory ending at answered `node`."""
        return self.texts[node.id]


async def grade_result(
    result: SearchResult,
    reference: str | None,
    *,
    problem_id: str,
    timeout_s: float = 5.0,
    pseudo_label: PseudoLabel = "prm_threshold",
    threshold: float = 0.5,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
    fold_blank_lines: bool = True,
    compare: Compare = compare_all,
    prompt: str | None = None,
    split: str = "train",
) -> GradedTree:
    """Label every answered node of `result` (see the module docstring for the rules).

    With a reference, each distinct (whitespace-normalized) answer string is
    verified once, those the nodes state and those their training texts state;
    `GradedTree.verified` holds the verdicts.  `extraction` is the search's
    `answer_extraction` (where a training text is cut).  `compare` decides the
    reference verdicts (default: math-verify, `compare_all`).  `prompt` (the training
    user turn; None: the bare problem) and `split` are kept for the rows.
    """
    nodes = result.answered_nodes
    keys = {n.id: answer_key(n.answer) for n in nodes}
    texts = {n.id: training_text(result.tree, n, extraction, fold_blank_lines) for n in nodes}
    source: LabelSource = "reference"
    verified: dict[str, bool] = {}
    chosen_correct: bool | None = None
    says_reference: frozenset[int] = frozenset()
    timeouts = 0
    if reference is not None:
        stated = {
            i: [k for a in stated_answers(t.text, extraction) if (k := answer_key(a))]
            for i, t in texts.items()
        }
        candidates = [
            *keys.values(),
            answer_key(result.chosen_answer),
            *(k for ks in stated.values() for k in ks),
        ]
        distinct = list(dict.fromkeys(k for k in candidates if k is not None))
        verdicts = await compare([(d, reference) for d in distinct], timeout_s)
        timeouts = _timeouts(verdicts)
        verified = {d: v is Verdict.MATCH for d, v in zip(distinct, verdicts, strict=True)}
        labels = {i: k is not None and verified.get(k, False) for i, k in keys.items()}
        chosen = answer_key(result.chosen_answer)
        chosen_correct = chosen is not None and verified.get(chosen, False)
        says_reference = frozenset(i for i, ks in stated.items() if any(verified[k] for k in ks))
    elif pseudo_label == "prm_threshold":
        source = pseudo_label
        labels = {n.id: keys[n.id] is not None and n.q >= threshold for n in nodes}
    elif pseudo_label == "majority":
        source = pseudo_label
        winners, timeouts = await _majority_answers(nodes, keys, timeout_s)
        labels = {n.id: keys[n.id] in winners for n in nodes}
    else:
        raise ValueError(f"unknown pseudo_label rule {pseudo_label!r}")
    return GradedTree(
        problem_id,
        result,
        reference,
        source,
        labels,
        chosen_correct,
        verified,
        grade_timeouts=timeouts,
        prompt=prompt,
        split=split,
        fold_blank_lines=fold_blank_lines,
        texts=texts,
        states_reference=says_reference,
    )


async def grade_for_records(
    result: SearchResult,
    reference: str | None,
    *,
    problem_id: str,
    config: RecordsConfig,
    instruction: str = POLICY_INSTRUCTION,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
) -> GradedTree:
    """`grade_result` under the records config: its grading rules, the training prompt
    (`instruction`, the search's user-turn template, with `prompt.search_prompt`; else
    `prompt.template`) and the problem's held-out split."""
    template = instruction if config.prompt.search_prompt else config.prompt.template
    return await grade_result(
        result,
        reference,
        problem_id=problem_id,
        timeout_s=config.grade_timeout_s,
        pseudo_label=config.pseudo_label,
        threshold=config.pseudo_threshold,
        extraction=extraction,
        fold_blank_lines=config.fold_blank_lines,
        prompt=template.format(problem=result.problem),
        split=split_of(problem_id, config.test_fraction),
    )


def _timeouts(verdicts: Sequence[Verdict]) -> int:
    """Comparisons the limit decided, not the mathematics (graded incorrect)."""
    return sum(v.bounded for v in verdicts)


def answer_key(answer: str | None) -> str | None:
    if answer is None:
        return None
    key = normalize_answer(answer)
    return key or None


# Majority grading compares every distinct answer with this many of the most frequent
# ones (not every pair: a tree of a thousand distinct answers would be half a million).
MAJORITY_ANCHORS = 16


async def _majority_answers(
    nodes: Sequence[Node], keys: Mapping[int, str | None], timeout_s: float
) -> tuple[set[str], int]:
    """The answer strings of the largest math-verify-equivalence group, and how many
    comparisons the limit decided."""
    count: dict[str, int] = {}
    best_q: dict[str, float] = {}
    for n in nodes:
        k = keys[n.id]
        if k is None:
            continue
        count[k] = count.get(k, 0) + 1
        best_q[k] = max(best_q.get(k, 0.0), n.q)
    answers = list(count)  # first-reached order
    if not answers:
        return set(), 0
    order = {a: i for i, a in enumerate(answers)}
    anchors = set(sorted(answers, key=lambda a: (-count[a], order[a]))[:MAJORITY_ANCHORS])
    # every pair (earlier reached, later reached) with at least one anchor in it
    pairs = [
        (a, b) for j, b in enumerate(answers) for a in answers[:j] if a in anchors or b in anchors
    ]
    verdicts = await compare_all(pairs, timeout_s)
    parent = {a: a for a in answers}  # union-find over equivalent answers

    def root(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for (a, b), verdict in zip(pairs, verdicts, strict=True):
        if verdict is Verdict.MATCH:
            ra, rb = root(a), root(b)
            if ra != rb:  # the earlier-reached answer represents the group
                parent[max(ra, rb, key=order.__getitem__)] = min(ra, rb, key=order.__getitem__)
    groups: dict[str, list[str]] = {}
    for a in answers:
        groups.setdefault(root(a), []).append(a)
    best = max(
        groups.values(),
        key=lambda g: (sum(count[a] for a in g), max(best_q[a] for a in g), -order[g[0]]),
    )
    return set(best), _timeouts(verdicts)


__all__ = [
    "Compare",
    "Difficulty",
    "GradedTree",
    "LabelSource",
    "answer_key",
    "grade_for_records",
    "grade_result",
]
