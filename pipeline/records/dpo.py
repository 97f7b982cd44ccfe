"""The ``dpo`` record: TRL preference pairs, a correct against an incorrect trajectory.

Per problem, correct trajectories (chosen) against incorrect ones
(rejected), both through the gates first (`preference_pools`: no truncated
text, no self-correction trace, near duplicates removed (the best-Q copy of a
correct one, the worst-Q copy of an incorrect one), and no rejected text that
states the reference anywhere; at most `PAIR_POOL` of each).  Every
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
from collections.abc import Iterable

import pyarrow as pa  # type: ignore[import-untyped]
from rapidfuzz.distance import Levenshtein

from pipeline.records.config import GatesConfig, Pairing, SelfCorrection
from pipeline.records.grading import GradedTree
from pipeline.records.schema import (
    DIFFICULTY_FIELD,
    LABEL_SOURCE_FIELD,
    MESSAGES_TYPE,
    PROBLEM_ID_FIELD,
    REFERENCE_FIELD,
    RUN_ID_FIELD,
    SPLIT_FIELD,
    Row,
    doc_field,
    record_schema,
)
from pipeline.records.trajectories import (
    Drops,
    answers_in_path,
    assistant_turn,
    common_prefix,
    count,
    select_paths,
    user_turn,
)
from pipeline.records.tree_paths import Divergence, PairType, divergence
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
        REFERENCE_FIELD,
        DIFFICULTY_FIELD,
        SPLIT_FIELD,
        LABEL_SOURCE_FIELD,
        PROBLEM_ID_FIELD,
        RUN_ID_FIELD,
    ],
)
"""`dpo`: preference pairs, a correct against an incorrect node of one problem."""


# The pair search looks at |correct| x |incorrect| candidates: at most this many of
# each (the first in the rule's order) keep it bounded on very large trees.
PAIR_POOL = 64


def dpo_rows(
    graded: GradedTree,
    *,
    run_id: str,
    max_pairs_per_problem: int = 4,
    pairing: Pairing = "shared_prefix",
    seed: int = 0,
    pair_types: Iterable[PairType] = ("siblings", "cousins", "root"),
    gates: GatesConfig | None = None,
    self_correction: SelfCorrection = "exclude",
    drops: Drops | None = None,
) -> list[Row]:
    """`dpo` pairs of one problem (rules in the module docstring)."""
    gates = gates or GatesConfig()
    tree = graded.result.tree
    good, bad = preference_pools(graded, gates, "dpo", drops, self_correction)
    rng = random.Random(derive_seed(seed, "dpo", graded.problem_id))
    if pairing == "random":
        rng.shuffle(good)
        rng.shuffle(bad)
    elif pairing not in ("shared_prefix", "best_vs_worst"):
        raise ValueError(f"unknown pairing rule {pairing!r}")
    allowed = set(pair_types)
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
    used: set[int] = set()  # every node (so every trajectory) is used at most once
    for c, r, div in candidates:
        if len(pairs) >= max(0, max_pairs_per_problem):
            break
        if c.id in used or r.id in used:
            continue
        if gates.min_q_margin is not None and c.q - r.q < gates.min_q_margin:
            count(drops, "dpo.q_margin", 1)
            continue
        distance = Levenshtein.distance(graded.training(c).text, graded.training(r).text)
        if distance < gates.min_edit_distance:
            count(drops, "dpo.edit_distance", 1)
            continue
        used.update((c.id, r.id))
        pairs.append((c, r, div, distance))
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
                "pairing": pairing,
                "reference": graded.reference,
                "difficulty": graded.difficulty,
                "split": graded.split,
                "label_source": graded.label_source,
                "problem_id": graded.problem_id,
                "run_id": run_id,
            }
        )
    return rows


def preference_pools(
    graded: GradedTree,
    gates: GatesConfig,
    record: str,
    drops: Drops | None = None,
    self_correction: SelfCorrection = "exclude",
) -> tuple[list[Node], list[Node]]:
    """(chosen candidates best Q first, rejected candidates worst Q first) after the gates.

    Both sides: no truncated text (`gates.drop_truncated`), the self-correction
    rule (`sft.self_correction`; by default no trace), no (near) duplicate; the
    rejected side also never states the reference
    (`gates.rejected_states_reference`).  Drops are counted under
    ``<record>.chosen.<gate>`` and ``<record>.rejected.<gate>``.
    """
    answered = graded.answered()
    good = sorted((n for n in answered if graded.labels[n.id]), key=lambda n: (-n.q, n.id))
    bad = sorted((n for n in answered if not graded.labels[n.id]), key=lambda n: (n.q, n.id))

    def pool(side: str, nodes: list[Node]) -> list[Node]:
        paths = select_paths(
            graded,
            nodes,
            True,
            self_correction,
            record=f"{record}.{side}",
            gates=gates,
            drops=drops,
        )
        return [n for n, _ in paths]

    return pool("chosen", good), pool("rejected", bad)


__all__ = ["DPO_SCHEMA", "PAIR_POOL", "dpo_rows", "preference_pools"]
