"""The ``sft`` record: TRL prompt-completion rows from the trajectories labelled correct.

The answered nodes labelled correct (by reference or pseudo label) with
Q >= ``min_score``, best Q first, through the gates (each counts its drops):

* ``ungraded``: answered nodes whose comparison with the reference was cut off have no
  label, so none is a candidate; they are counted here (`pipeline.records.grading`);
* ``truncated``: the token cap cut the node inside its answer sentence
  (`gates.drop_truncated`);
* ``false_equation`` / ``low_step_value``: the process gates: the text states
  arithmetic that does not hold (`gates.false_equation`, on by default: a right
  answer reached through a wrong step), or a node on the path has a Q below
  `gates.min_step_value` (off by default);
* ``duplicate``: with ``dedupe``, only the best-Q node of identical or near
  duplicate training texts (`gates.near_duplicate`) is kept;
* ``self_correction``: by default only *clean* paths (the node's answer is
  the only one on its path and its text states one answer).  A path that
  answered earlier and went on with the continuation prompt ("But wait, let
  me think about the problem again.") is a self-correction trace; most such
  traces state a wrong answer first, so SFT on them teaches answering wrong
  first.  ``records.self_correction: include`` keeps them too, ``only`` keeps
  only them;
* ``top_k``: at most `gates.sft_top_k` rows per problem, the best Q
  (rStar-Math keeps 2).  `sft_candidates` are the rows before this cap (the
  data yield counts them: the cap is a choice of the export, not a property of
  the search); `capped` applies it.

The completion is the training text (`pipeline.records.training_text`): it
ends right after its answer statement.  Nobody in this project reads a
``messages`` column, so there is none: TRL trains on every token of
``messages`` data (SmolLM2's template has no ``{% generation %}`` markers for
``assistant_only_loss``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.context import BuildContext, Built, Drops, count, note
from pipeline.records.grading import GradedTree
from pipeline.records.paths import GatedPaths, gated, ordered, ungraded_paths
from pipeline.records.schema import (
    ANSWERS_IN_PATH_DOC,
    MESSAGES_TYPE,
    doc_field,
    record_schema,
    shared_fields,
)
from pipeline.records.trajectories import trajectory_columns

SFT_SCHEMA = record_schema(
    "sft",
    [
        doc_field(
            "prompt",
            MESSAGES_TYPE,
            "TRL conversational prompt-completion format: the training user turn (one "
            "message, `records.prompt`; the same in every table)",
        ),
        doc_field(
            "completion",
            MESSAGES_TYPE,
            "one assistant message: the trajectory up to the end of its answer statement "
            "(TRL trains on these tokens only)",
        ),
        *shared_fields("problem_id"),
        doc_field("node_id", pa.int64(), "the answered node the trajectory ends at"),
        doc_field("answer", pa.string(), "its extracted answer", nullable=True),
        doc_field("score", pa.float64(), "its PRM score Q"),
        doc_field("depth", pa.int64(), "steps in the trajectory"),
        doc_field("answers_in_path", pa.int64(), ANSWERS_IN_PATH_DOC),
        *shared_fields("reference", "truncated", "difficulty", "split", "label_source", "run_id"),
    ],
)
"""`sft`: supervised fine-tuning rows from correct answered nodes."""


def sft_rows(graded: GradedTree, context: BuildContext, paths: GatedPaths | None = None) -> Built:
    """The `sft` table's rows: `sft_candidates` `capped` at `gates.sft_top_k`."""
    return capped(sft_candidates(graded, context, paths), context.config.gates.sft_top_k)


def sft_candidates(
    graded: GradedTree, context: BuildContext, paths: GatedPaths | None = None
) -> Built:
    """`sft` rows from the nodes labelled correct with Q >= `min_sft_score`, best Q first,
    through every gate but the per-problem cap (the module docstring says which); `paths`:
    the tree's paths judged once for every table (`pipeline.records.paths`)."""
    config = context.config
    dropped: Drops = Counter()
    correct = [n for n in graded.answered() if graded.label(n)]
    picked = ordered([n for n in correct if n.q >= config.min_sft_score])
    count(dropped, "sft.min_score", len(correct) - len(picked))
    for n in correct:
        if n.q < config.min_sft_score:
            note("sft.min_score", n.id)
    dropped += ungraded_paths(graded, "sft")
    selected, gated_out = gated(graded, context, paths).select(picked, "sft")
    shared = context.shared_columns(graded, SFT_SCHEMA)
    rows = [
        trajectory_columns(graded, n, answers)
        | {"depth": n.depth, "truncated": graded.training(n).truncated}
        | shared
        for n, answers in selected
    ]
    return Built(rows, dropped_paths=dropped + gated_out)


def capped(candidates: Built, top_k: int) -> Built:
    """At most `top_k` of the (best-first) candidates, the rest counted as ``sft.top_k``
    dropped paths; 0: every one."""
    if not top_k:
        return candidates
    dropped = candidates.dropped_paths.copy()
    count(dropped, "sft.top_k", len(candidates.rows) - top_k)
    for row in candidates.rows[top_k:]:
        note("sft.top_k", row["node_id"])
    return replace(candidates, rows=candidates.rows[:top_k], dropped_paths=dropped)


__all__ = ["SFT_SCHEMA", "capped", "sft_candidates", "sft_rows"]
