"""The ``step_dpo`` record: step-level preference pairs, in the columns Step-DPO publishes.

A correct and an incorrect trajectory of one problem (from the same gated pools dpo
pairs, `pipeline.records.paths`) that share their first steps and then part: the
prompt, the shared steps (``initial_reason_steps``), the first step where each goes
its own way (``chosen`` / ``rejected``), both whole texts
(``full_chosen`` / ``full_rejected``) and the reference ``answer`` - the column
shape of Step-DPO's public sets (prompt / initial_reason_steps / chosen /
rejected / full_chosen / full_rejected / answer).  A step is a line of the
training text (as in ``prm``), so ``initial_reason_steps + chosen`` is the start
of ``full_chosen``.  Pairs with the most shared steps come first; every
trajectory and every distinct (shared steps, rejected step) is used once, at
most ``max_pairs_per_problem`` pairs.  Only problems with a reference (the
pairs are about the right answer) give rows.  The first differing step is not
always the wrong one (a correct step whose continuations all went wrong), so
the rejected step must be a dead end as Math-Shepherd's labels read the tree:
no correct answer anywhere below the node that holds it, and no ungraded one
either (its comparison with the reference was cut off: it may be correct)
(``rejected_step``);
a pair whose Q gap is below `gates.min_q_margin` is dropped (``q_margin``).
The edit-distance gate is DPO's only: a step pair differs by one step by
construction.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa  # type: ignore[import-untyped]

from pipeline.records.context import BuildContext, Built, Drops, count, note
from pipeline.records.grading import GradedTree
from pipeline.records.paths import GatedPaths, gated
from pipeline.records.schema import Row, doc_field, record_schema, shared_fields
from pipeline.records.training_text import line_owners
from pipeline.records.trajectories import common_prefix
from pipeline.records.tree_paths import subtree_answers
from search.tree import Node

STEP_DPO_SCHEMA = record_schema(
    "step_dpo",
    [
        doc_field("prompt", pa.string(), "the training user turn as plain text (as prm's prompt)"),
        doc_field(
            "initial_reason_steps",
            pa.string(),
            "the steps both trajectories share, each ending in a line break (empty when they "
            "part at the first step)",
        ),
        doc_field("chosen", pa.string(), "the correct trajectory's first step of its own"),
        doc_field("rejected", pa.string(), "the incorrect trajectory's first step of its own"),
        doc_field("full_chosen", pa.string(), "the whole correct trajectory"),
        doc_field(
            "full_rejected",
            pa.string(),
            "the whole incorrect trajectory (never states the reference)",
        ),
        doc_field("answer", pa.string(), "the reference answer"),
        doc_field("chosen_node_id", pa.int64(), "the answered node of the correct trajectory"),
        doc_field("rejected_node_id", pa.int64(), "the answered node of the incorrect one"),
        doc_field("shared_steps", pa.int64(), "lines both trajectories share"),
        doc_field("score_chosen", pa.float64(), "PRM score Q of the chosen node"),
        doc_field("score_rejected", pa.float64(), "PRM score Q of the rejected node"),
        *shared_fields("difficulty", "split", "label_source", "problem_id", "run_id"),
    ],
)
"""`step_dpo`: the first differing step of a correct and an incorrect trajectory."""


def step_dpo_rows(
    graded: GradedTree, context: BuildContext, paths: GatedPaths | None = None
) -> Built:
    """`step_dpo` pairs of one problem (rules in the module docstring); `paths`: the tree's
    paths judged once for every table (`pipeline.records.paths`)."""
    if graded.reference is None:
        return Built([])
    config = context.config
    gates = config.gates
    pools = gated(graded, context, paths).pools("step_dpo")
    good, bad = pools.chosen, pools.rejected
    dropped_pairs: Drops = Counter()
    tree = graded.result.tree
    below = subtree_answers(tree, graded.labels)
    lines = {n.id: graded.training(n).lines for n in (*good, *bad)}
    owners = {n.id: line_owners(tree, n, graded.training(n).text) for n in (*good, *bad)}
    candidates: list[tuple[int, Node, Node]] = []
    for c in good:
        for r in bad:
            shared = common_prefix(lines[c.id], lines[r.id])
            if shared < len(lines[c.id]) and shared < len(lines[r.id]):
                candidates.append((shared, c, r))
    candidates.sort(key=lambda t: (-t[0], t[2].q - t[1].q, t[1].id, t[2].id))
    shared_columns = context.shared_columns(graded, STEP_DPO_SCHEMA)
    rows: list[Row] = []
    used: set[int] = set()
    seen: set[tuple[int, str]] = set()
    for shared, c, r in candidates:
        if len(rows) >= max(0, config.max_pairs_per_problem):
            break
        step = (shared, lines[r.id][shared])
        if c.id in used or r.id in used or step in seen:
            continue
        reached = below[owners[r.id][shared].id]
        if reached.correct or reached.ungraded:
            count(dropped_pairs, "step_dpo.rejected_step", 1)
            note("step_dpo.rejected_step", c.id, r.id)
            continue
        if gates.min_q_margin is not None and c.q - r.q < gates.min_q_margin:
            count(dropped_pairs, "step_dpo.q_margin", 1)
            note("step_dpo.q_margin", c.id, r.id)
            continue
        used.update((c.id, r.id))
        seen.add(step)
        prefix = "".join(line + "\n" for line in lines[c.id][:shared])
        rows.append(
            {
                "prompt": graded.user_prompt,
                "initial_reason_steps": prefix,
                "chosen": lines[c.id][shared],
                "rejected": lines[r.id][shared],
                "full_chosen": graded.training(c).text,
                "full_rejected": graded.training(r).text,
                "answer": graded.reference,
                "chosen_node_id": c.id,
                "rejected_node_id": r.id,
                "shared_steps": shared,
                "score_chosen": c.q,
                "score_rejected": r.q,
                **shared_columns,
            }
        )
    return Built(rows, dropped_paths=pools.dropped_paths, dropped_pairs=dropped_pairs)


__all__ = ["STEP_DPO_SCHEMA", "step_dpo_rows"]
