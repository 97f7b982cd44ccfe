"""The ``dpo`` record: TRL preference pairs, a correct against an incorrect trajectory.

Per problem, correct trajectories (chosen) against incorrect ones
(rejected), both through the gates first (`pipeline.records.paths`: no path
whose answer is ungraded (its comparison was cut off), no truncated text, no
self-correction trace, near duplicates removed (the best-Q copy of a correct
one, the worst-Q copy of an incorrect one), and no rejected text that states
the reference anywhere; at most `PAIR_POOL` of each).  Every
candidate pair gets a type from where the two paths part in the tree
(`pipeline.records.tree_paths.divergence`): ``siblings`` (children of one node),
``cousins`` (they part at a non-root node, one or both deeper below it),
``root`` (no generated step in common) or ``prefix`` (one trajectory
extends the other: the rejected one answered past the chosen one, or the
reverse).  Only the types in ``dpo.pair_types`` are kept; ``prefix`` is
off by default because such a pair prefers *stopping* over an identical
text, not a better step.  Candidates are then taken greedily in the
rule's order, every node used at most once, at most
``max_pairs_per_problem`` pairs; a pair that would be taken but whose
texts differ by fewer than `gates.min_edit_distance` characters
(``edit_distance``) or whose Q gap is below `gates.min_q_margin`
(``q_margin``) is dropped and counted:

* ``shared_prefix`` (default): the longest shared prefix first (most
  shared steps), so the preference is about the part that differs; ties
  go to the larger Q gap, then to lower node ids;
* ``best_vs_worst``: the largest Q gap first (the highest-Q correct
  against the lowest-Q incorrect, then the next of each, ...);
* ``random``: an order shuffled with a generator seeded from
  ``(seed, problem_id)``; the same inputs give the same pairs.

The prompt is the training user turn (one message, `records.prompt`);
chosen and rejected are whole assistant turns, the shared prefix included,
each ending after its answer statement (TRL's conversational preference
format).
"""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa  # type: ignore[import-untyped]
from rapidfuzz.distance import Levenshtein

from pipeline.records.context import BuildContext, Built, Drops, count, note
from pipeline.records.grading import GradedTree
from pipeline.records.paths import GatedPaths, gated
from pipeline.records.schema import MESSAGES_TYPE, doc_field, record_schema, shared_fields
from pipeline.records.trajectories import (
    answers_in_path,
    assistant_turn,
    common_prefix,
    user_turn,
)
from pipeline.records.tree_paths import Divergence, divergence
from search.driver import derive_seed
from search.tree import Node

DPO_SCHEMA = record_schema(
    "dpo",
    [
        doc_field(
            "prompt",
            MESSAGES_TYPE,
            "TRL preference format: the training user turn (one message, the same in every table)",
        ),
        doc_field(
            "chosen",
            MESSAGES_TYPE,
            "one assistant message: a correct trajectory, up to the end of its answer statement",
        ),
        doc_field(
            "rejected",
            MESSAGES_TYPE,
            "one assistant message: an incorrect trajectory that never states the reference",
        ),
        doc_field("score_chosen", pa.float64(), "PRM score Q of the chosen node"),
        doc_field("score_rejected", pa.float64(), "PRM score Q of the rejected node"),
        doc_field("chosen_node_id", pa.int64(), "node id of the chosen trajectory"),
        doc_field("rejected_node_id", pa.int64(), "node id of the rejected trajectory"),
        doc_field("chosen_answer", pa.string(), "answer of the chosen node", nullable=True),
        doc_field("rejected_answer", pa.string(), "answer of the rejected node", nullable=True),
        doc_field(
            "pair_type",
            pa.string(),
            "siblings (children of one node), cousins (part at a deeper node), root (share "
            "no generated step) or prefix (one extends the other; off by default)",
        ),
        doc_field(
            "shared_steps", pa.int64(), "generated steps both trajectories share before they part"
        ),
        doc_field(
            "shared_prefix_chars",
            pa.int64(),
            "characters both texts share at their start",
        ),
        doc_field(
            "edit_distance", pa.int64(), "Levenshtein distance of the chosen and rejected texts"
        ),
        doc_field("chosen_answers_in_path", pa.int64(), "answers_in_path of the chosen node"),
        doc_field("rejected_answers_in_path", pa.int64(), "answers_in_path of the rejected node"),
        doc_field("pairing", pa.string(), "pairing rule: shared_prefix, best_vs_worst or random"),
        *shared_fields("reference", "difficulty", "split", "label_source", "problem_id", "run_id"),
    ],
)
"""`dpo`: preference pairs, a correct against an incorrect node of one problem."""


# The pair search looks at |correct| x |incorrect| candidates: at most this many of
# each (the first in the rule's order) keep it bounded on very large trees.
PAIR_POOL = 64


def dpo_rows(graded: GradedTree, context: BuildContext, paths: GatedPaths | None = None) -> Built:
    """`dpo` pairs of one problem (rules in the module docstring); `paths`: the tree's paths
    judged once for every table (`pipeline.records.paths`)."""
    config = context.config
    pools = gated(graded, context, paths).pools("dpo")
    pairs, dropped_pairs = _pairs(graded, context, pools.chosen, pools.rejected)
    shared = context.shared_columns(graded, DPO_SCHEMA)
    rows = []
    for c, r, div, distance in pairs:
        chosen, rejected = graded.training(c).text, graded.training(r).text
        rows.append(
            {
                "prompt": user_turn(graded),
                "chosen": assistant_turn(chosen),
                "rejected": assistant_turn(rejected),
                "score_chosen": c.q,
                "score_rejected": r.q,
                "chosen_node_id": c.id,
                "rejected_node_id": r.id,
                "chosen_answer": c.answer,
                "rejected_answer": r.answer,
                "pair_type": div.pair_type,
                "shared_steps": div.shared_steps,
                "shared_prefix_chars": common_prefix(chosen, rejected),
                "edit_distance": distance,
                "chosen_answers_in_path": answers_in_path(graded, c),
                "rejected_answers_in_path": answers_in_path(graded, r),
                "pairing": config.pairing,
                **shared,
            }
        )
    return Built(rows, dropped_paths=pools.dropped_paths, dropped_pairs=dropped_pairs)


def _pairs(
    graded: GradedTree, context: BuildContext, good: list[Node], bad: list[Node]
) -> tuple[list[tuple[Node, Node, Divergence, int]], Drops]:
    """(chosen, rejected, where they part, edit distance) in the pairing rule's order,
    each node at most once, and the pairs each pair gate kept out."""
    config = context.config
    gates, pairing = config.gates, config.pairing
    tree = graded.result.tree
    rng = random.Random(derive_seed(config.seed, "dpo", graded.problem_id))
    if pairing == "random":
        rng.shuffle(good)
        rng.shuffle(bad)
    elif pairing not in ("shared_prefix", "best_vs_worst"):
        raise ValueError(f"unknown pairing rule {pairing!r}")
    allowed = set(config.dpo.pair_types)
    candidates = [
        (c, r, div)
        for c in good[:PAIR_POOL]
        for r in bad[:PAIR_POOL]
        if (div := divergence(tree, c, r)).pair_type in allowed
    ]
    if pairing == "shared_prefix":
        candidates.sort(key=lambda t: (-t[2].shared_steps, t[1].q - t[0].q, t[0].id, t[1].id))
    elif pairing == "best_vs_worst":
        candidates.sort(key=lambda t: (t[1].q - t[0].q, t[0].id, t[1].id))
    else:
        rng.shuffle(candidates)
    pairs: list[tuple[Node, Node, Divergence, int]] = []
    dropped: Drops = Counter()
    used: set[int] = set()  # every node (so every trajectory) is used at most once
    for c, r, div in candidates:
        if len(pairs) >= max(0, config.max_pairs_per_problem):
            break
        if c.id in used or r.id in used:
            continue
        if gates.min_q_margin is not None and c.q - r.q < gates.min_q_margin:
            count(dropped, "dpo.q_margin", 1)
            note("dpo.q_margin", c.id, r.id)
            continue
        distance = Levenshtein.distance(graded.training(c).text, graded.training(r).text)
        if distance < gates.min_edit_distance:
            count(dropped, "dpo.edit_distance", 1)
            note("dpo.edit_distance", c.id, r.id)
            continue
        used.update((c.id, r.id))
        pairs.append((c, r, div, distance))
    return pairs, dropped


__all__ = ["DPO_SCHEMA", "PAIR_POOL", "dpo_rows"]
