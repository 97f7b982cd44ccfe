"""The ``prm`` record: TRL stepwise supervision, every step labelled from the tree below it.

One row per distinct answered trajectory (self-correction traces only with
``records.self_correction: include``, as in every training table).  Its steps
are the lines of its training text (cut after the answer,
`pipeline.records.training_text`), so joined with ``separator``
("\\n", TRL's PRM default) they give the trajectory back exactly and no step
contains the separator; a step is judged by the tree node whose text holds
the line's end (a node of several lines gives several steps with its label,
and a line never starts inside a node that the token cap cut and the search
continued).  A step's label comes from the tree below its node, as
Math-Shepherd's estimates do from rollouts: an unanswered node is good (hard
label) when at least one answered node in its subtree is labelled correct, and
its soft value is the fraction of the answered nodes in its subtree that are
correct; an answered node carries its own answer's label (value 1.0 or 0.0),
whatever continuations below it reached.  Every step of a path has at least
the path's own answer below it, so no value is undefined.  ``q_values`` holds
the PRM's own score Q of each step's node.

An answered node whose comparison with the reference was cut off has no label
(`pipeline.records.grading`): it counts neither way below a step, and a path whose
step label would rest on it is no row (``prm.ungraded``): the path ends at it, holds
it, or holds a step with no correct answer below but an ungraded one (that step may be
good).  A value is then the fraction of the *graded* answers below that are correct.

A step is judged by its own arithmetic too (``gates.false_equation``, on by
default): the first step that states a false equation (``7 - 9 = 1``,
`pipeline.records.equations`) and every step after it are labelled bad, value
0.0, whatever the tree below says (they build on the wrong number); counted as
``prm.false_equation``, the steps relabelled from good to bad (a count of steps,
`Built.relabelled_steps`: the rows stay).

Paths that never reached an answer have no value of their own: with
``prm.unanswered_branches`` every scored leaf's path becomes a row too, its
steps with nothing answered below labelled from the PRM's Q (>=
``pseudo_threshold``, value = Q) - the PRM's own opinion, so off by default.
Without a reference answer the labels would be pseudo labels (with
``prm_threshold``, the PRM's own scores): such problems give no prm rows
unless ``prm.pseudo_labels``.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.config import PrmConfig
from pipeline.records.context import (
    PRM_FALSE_EQUATION,
    BuildContext,
    Built,
    Drops,
    count,
    note,
)
from pipeline.records.equations import states_false_equation
from pipeline.records.grading import GradedTree
from pipeline.records.paths import GatedPaths, gated
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    Row,
    doc_field,
    list_of,
    record_schema,
    shared_fields,
)
from pipeline.records.training_text import line_owners, tidy
from pipeline.records.trajectories import has_empty_step
from pipeline.records.tree_paths import SubtreeAnswers, subtree_answers
from search.tree import Node

PRM_SCHEMA = record_schema(
    "prm",
    [
        doc_field(
            "prompt",
            pa.string(),
            "TRL stepwise-supervision format: the training user turn as plain text (the "
            "same text as the other tables' user message)",
        ),
        doc_field(
            "completions",
            list_of(pa.string()),
            "the steps of one path: the lines of its trajectory, up to the end of its answer "
            "statement; joined with `separator` they give the trajectory back exactly",
        ),
        doc_field(
            "labels",
            list_of(pa.bool_()),
            "one per step, from the step's node: an unanswered node is good when a correct "
            "answer is reached in the tree below it; an answered node carries its own label; "
            "with gates.false_equation a step stating a false equation and every later step "
            "are bad",
        ),
        doc_field(
            "values",
            list_of(pa.float64()),
            "one per step, soft Monte-Carlo value: the fraction of the graded answered nodes "
            "below the step's node that are correct (an answered node: its own label, 1.0 or "
            "0.0); 0.0 where a false equation made the label bad",
        ),
        doc_field("q_values", list_of(pa.float64()), "one per step: the PRM's Q of its node"),
        doc_field(
            "step_node_ids",
            list_of(pa.int64()),
            "the tree node of each step (the node whose text holds the line's end)",
        ),
        doc_field("separator", pa.string(), "what joins the steps into the trajectory"),
        doc_field(
            "ends_in_answer",
            pa.bool_(),
            "true: the path ends at an answered node; false: a scored path that never "
            "answered (prm.unanswered_branches)",
        ),
        *shared_fields("problem_id"),
        doc_field("node_id", pa.int64(), "the node the path ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        *shared_fields("reference", "split", "label_source", "run_id"),
    ],
)
"""`prm`: step-level labels of every answered path, from the subtree under each step."""


# Gates the prm table leaves open.  A wrong path that states the reference stays: its
# steps' labels say which step went wrong.  So does a path with a false equation (its steps
# are relabelled instead, `_false_equation_is_bad`), and one with a low Q: the PRM's own
# verdict is nothing new to train it on.  Near duplicates stay too (only identical paths
# are one row): two wordings of one path are two examples of its steps.
PRM_OPEN_GATES = frozenset({"states_reference", "false_equation", "low_step_value"})


def prm_rows(graded: GradedTree, context: BuildContext, paths: GatedPaths | None = None) -> Built:
    """`prm` rows: one per answered path (distinct trajectory), labels from the subtree.

    Without a reference the labels would be pseudo labels (for ``prm_threshold``,
    the PRM's own scores): the record is then empty unless `prm.pseudo_labels`.
    `pseudo_threshold` labels the unanswered-branch steps.  `paths`: the tree's paths
    judged once for every table (`pipeline.records.paths`).
    """
    config = context.config
    if graded.pseudo and not config.prm.pseudo_labels:
        return Built([])
    tree = graded.result.tree
    below = subtree_answers(tree, graded.labels)
    selected, dropped = gated(graded, context, paths).select(
        graded.answered(), "prm", near_duplicate=1.0, open_gates=PRM_OPEN_GATES
    )
    shared = context.shared_columns(graded, PRM_SCHEMA)
    threshold = config.pseudo_threshold
    # the paths to label, each as (its last node, its text, the answers along it)
    paths_to_label = [(node, graded.training(node).text, answers) for node, answers in selected]
    if config.prm.unanswered_branches:
        paths_to_label += _unanswered_branches(graded)
    rows: list[Row] = []
    for node, text, answers in paths_to_label:
        row = _row(graded, node, text, answers, below, threshold, config.prm)
        if row is None:
            count(dropped, "prm.ungraded", 1)
            note("prm.ungraded", node.id)
        else:
            rows.append(row | shared)
    relabelled: Drops = Counter()
    if config.gates.false_equation:
        count(relabelled, PRM_FALSE_EQUATION, sum(_false_equation_is_bad(row) for row in rows))
    return Built(rows, dropped_paths=dropped, relabelled_steps=relabelled)


def _unanswered_branches(graded: GradedTree) -> list[tuple[Node, str, int]]:
    """The scored paths that never answered (prm.unanswered_branches), as (the leaf they end
    at, their text, the answers along them): leaves that neither failed nor hold an empty
    step."""
    tree = graded.result.tree
    branches = []
    for leaf in tree.nodes:
        if leaf.parent_id is None or leaf.children or leaf.answered:
            continue
        if not leaf.expandable or has_empty_step(tree, leaf):  # failed, or holds no text
            continue
        text = tidy(tree.assistant_text(leaf), graded.fold_blank_lines)
        branches.append((leaf, text, sum(n.answered for n in tree.path(leaf))))
    return branches


def _false_equation_is_bad(row: Row) -> int:
    """Label the first step that states a false equation, and every step after it, bad
    (value 0): they build on a wrong number, whatever the answer they reach.  Returns how
    many steps went from good to bad."""
    steps: list[str] = row["completions"]
    labels: list[bool] = row["labels"]
    first = next((i for i, step in enumerate(steps) if states_false_equation(step)), None)
    if first is None:
        return 0
    relabelled = sum(labels[first:])
    for step, label in enumerate(labels[first:], start=first):
        if label:  # one note per step relabelled, on the node whose text holds it
            note(PRM_FALSE_EQUATION, row["step_node_ids"][step])
    row["labels"] = labels[:first] + [False] * (len(steps) - first)
    row["values"] = row["values"][:first] + [0.0] * (len(steps) - first)
    return relabelled


def _row(
    graded: GradedTree,
    node: Node,
    text: str,
    answers: int,
    below: list[SubtreeAnswers],
    threshold: float,
    config: PrmConfig,
) -> Row | None:
    """The row of the path to `node`; None when a step's label is not known (it rests on
    an ungraded answer: the module docstring)."""
    tree = graded.result.tree
    owners = line_owners(tree, node, text)
    labels: list[bool] = []
    values: list[float] = []
    for step in owners:
        reached = below[step.id]
        if step.answered:
            label = graded.label(step)
            if label is None:
                return None
            labels.append(label)
            values.append(float(label))
        elif reached.correct:
            labels.append(True)
            values.append(reached.correct / reached.answered)
        elif reached.ungraded:  # no correct answer known below, but one may be
            return None
        elif reached.answered:
            labels.append(False)
            values.append(0.0)
        else:  # nothing answered below (unanswered_branches rows only): the PRM's Q
            labels.append(step.q >= threshold)
            values.append(step.q)
    return {
        "prompt": graded.user_prompt,
        "completions": text.split(config.separator),
        "labels": labels,
        "values": values,
        "q_values": [step.q for step in owners],
        "step_node_ids": [step.id for step in owners],
        "separator": config.separator,
        "ends_in_answer": node.answered,
        "node_id": node.id,
        "answer": node.answer,
        "answers_in_path": answers,
    }


__all__ = ["PRM_OPEN_GATES", "PRM_SCHEMA", "prm_rows"]
