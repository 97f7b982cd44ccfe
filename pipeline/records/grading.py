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

Ungraded answers
    A comparison the time limit cut off (`Verdict.TIMEOUT`) says nothing about the
    answer: on a loaded machine a cold grading pool's start alone can make an ordinary
    correct answer time out.  Its answer is *ungraded*: the nodes that carry it have no
    label (`GradedTree.ungraded`, absent from `GradedTree.labels`), so no training row
    uses them, as positive or as negative, and the tree's other nodes keep theirs.  A
    comparison refused before sympy (`Verdict.REJECTED`, `common.grading.too_costly`)
    is ungraded too when the *reference* is the refused text (the grader never looked
    at the answer); when only the answer is, the answer stays incorrect: it is text
    built to explode (a tower of powers, a 300-digit literal, a factorial of a computed
    number), which no reference that passes the filter is written as, so no row
    rewards it.  With ``majority`` an answer outside the winning group whose comparison
    with a member of that group was cut off is ungraded (it may belong to the group).

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
from common.grading import Verdict, compare_all, pool_ready, too_costly
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
Difficulty = Literal["all_correct", "mixed", "none_correct", "unanswered", "ungraded"]


@dataclass(frozen=True, slots=True)
class GradedTree:
    """A search result with a label for every answered node."""

    problem_id: str
    result: SearchResult
    reference: str | None
    label_source: LabelSource
    # answered node id -> label; an ungraded node (its comparison was cut off) has none
    labels: Mapping[int, bool]
    chosen_correct: bool | None  # null without a reference, or when its answer is ungraded
    # distinct answer -> verdict, for the answers the mathematics decided
    verified: Mapping[str, bool] = field(default_factory=dict)
    # comparisons the limit decided: cut off (their answers ungraded) or refused as too costly
    grade_timeouts: int = 0
    # the user turn of every training row (`records.prompt`); None: the bare problem
    prompt: str | None = None
    split: str = "train"  # `pipeline.records.splits.split_of` of the problem id
    fold_blank_lines: bool = True  # how `texts` were made (`records.fold_blank_lines`)
    texts: Mapping[int, TrainingText] = field(default_factory=dict)  # answered id -> text
    # answered ids whose training text states the reference (empty without one)
    states_reference: frozenset[int] = frozenset()
    # answered ids without a label: their answer's comparison was cut off (module docstring)
    ungraded: frozenset[int] = frozenset()
    # answered ids whose training text states an answer whose comparison was cut off: it
    # may state the reference (the rejected side's `states_reference` gate keeps them out)
    may_state_reference: frozenset[int] = frozenset()
    ungraded_answers: frozenset[str] = frozenset()  # distinct answers left ungraded

    @property
    def pseudo(self) -> bool:
        return self.label_source != "reference"

    @property
    def user_prompt(self) -> str:
        """The training rows' user turn (the same in every table)."""
        return self.result.problem if self.prompt is None else self.prompt

    @property
    def difficulty(self) -> Difficulty:
        """all_correct / mixed / none_correct over the answered nodes' labels (ungraded
        nodes have none: ``ungraded`` when no answered node has one)."""
        labels = set(self.labels.values())
        if not labels:
            return "ungraded" if self.ungraded else "unanswered"
        if labels == {True}:
            return "all_correct"
        return "mixed" if True in labels else "none_correct"

    def answered(self) -> list[Node]:
        return self.result.answered_nodes

    def label(self, node: Node) -> bool | None:
        """The label of answered `node`; None when it is ungraded (module docstring)."""
        return self.labels.get(node.id)

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
    may_say_reference: frozenset[int] = frozenset()
    unknown: set[str] = set()  # answers whose comparison was cut off
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
        for d, v in zip(distinct, verdicts, strict=True):
            if undecided(v, reference):
                unknown.add(d)
            else:
                verified[d] = v is Verdict.MATCH
        labels = {i: k is not None and verified.get(k, False) for i, k in keys.items()}
        chosen = answer_key(result.chosen_answer)
        chosen_correct = None if chosen in unknown else chosen is not None and verified[chosen]
        says_reference = frozenset(
            i for i, ks in stated.items() if any(verified.get(k, False) for k in ks)
        )
        may_say_reference = frozenset(i for i, ks in stated.items() if unknown.intersection(ks))
    elif pseudo_label == "prm_threshold":
        source = pseudo_label
        labels = {n.id: keys[n.id] is not None and n.q >= threshold for n in nodes}
    elif pseudo_label == "majority":
        source = pseudo_label
        winners, unknown, timeouts = await _majority_answers(nodes, keys, timeout_s)
        labels = {n.id: keys[n.id] in winners for n in nodes}
    else:
        raise ValueError(f"unknown pseudo_label rule {pseudo_label!r}")
    ungraded = frozenset(i for i, k in keys.items() if k is not None and k in unknown)
    labels = {i: label for i, label in labels.items() if i not in ungraded}
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
        ungraded=ungraded,
        may_state_reference=may_say_reference,
        ungraded_answers=frozenset(unknown),
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
    if reference is not None or config.pseudo_label == "majority":
        # The comparisons' limit is for the answers, not for the grading pool's start: a
        # cold start on a busy machine would time them out and leave them ungraded, so
        # the rows would depend on the load.
        await pool_ready()
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
    """Comparisons the limit decided, not the mathematics (cut off or refused)."""
    return sum(v.bounded for v in verdicts)


def undecided(verdict: Verdict, reference: str) -> bool:
    """Whether `verdict` on an answer against `reference` leaves the answer ungraded: the
    comparison was cut off, or refused because the reference itself is too costly for
    sympy (an answer refused on its own text stays incorrect: the module docstring)."""
    if verdict is Verdict.TIMEOUT:
        return True
    return verdict is Verdict.REJECTED and too_costly(reference) is not None


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
) -> tuple[set[str], set[str], int]:
    """The answer strings of the largest math-verify-equivalence group, those outside it
    whose comparison with one of its answers was left undecided (they may belong to it:
    ungraded), and how many comparisons the limit decided."""
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
        return set(), set(), 0
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
    winners = set(best)
    unknown = {
        other
        for (a, b), verdict in zip(pairs, verdicts, strict=True)
        for member, other in ((a, b), (b, a))
        if member in winners and other not in winners and undecided(verdict, member)
    }
    return winners, unknown, _timeouts(verdicts)


__all__ = [
    "Compare",
    "Difficulty",
    "GradedTree",
    "LabelSource",
    "answer_key",
    "grade_for_records",
    "grade_result",
]
