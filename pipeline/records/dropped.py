"""Which gate kept out which candidate row of one tree, not only how many.

``trees.gate_drops`` counts a tree's drops per gate (`pipeline.records.build`): "dpo
lost 16 pairs to duplicates".  A person reading the tree wants to see them on the nodes:
this path was a duplicate, that pair's Q gap was too small.  `rows_and_drops` builds the
rows exactly as `rows_for` does (the same function runs: the rows, the counts and the
golden rows do not change) while watching every drop the builders count
(`pipeline.records.context.note`), and returns each with the candidate it kept out.
`explain_stored_tree` does so for a tree a run stored (its ``trees`` row and
``tree_nodes`` rows), graded again as `pipeline.records.rebuild` does.

A `Dropped` names its gate as ``trees.gate_drops`` does (``sft.truncated``,
``dpo.chosen.duplicate``, ``dpo.q_margin``) and the candidate by its node ids: a path by
its answered node, a pair by (chosen, rejected), a prm step relabelled bad by the node
whose text holds the step.  Counted per gate (`drop_counts`), they are ``gate_drops``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.prompts import POLICY_INSTRUCTION
from pipeline.records.build import rows_for
from pipeline.records.config import RecordsConfig
from pipeline.records.context import BuildContext, Drops, watching
from pipeline.records.grading import GradedTree, grade_for_records
from pipeline.records.rebuild import rebuild_result
from pipeline.records.schema import Row
from search.answers import AnswerExtraction


@dataclass(frozen=True, slots=True)
class Dropped:
    """One candidate a gate kept out (or one prm step it relabelled bad)."""

    gate: str  # "<record>.<gate>" or "<record>.<side>.<gate>", as trees.gate_drops names it
    node_ids: tuple[int, ...]  # the path's answered node; a pair's (chosen, rejected)


def rows_and_drops(
    graded: GradedTree, context: BuildContext, contamination: str | None = None
) -> tuple[dict[str, list[Row]], list[Dropped]]:
    """`rows_for(graded, context, contamination)` and every drop it counted, in order."""
    with watching() as seen:
        records = rows_for(graded, context, contamination)
    return records, [Dropped(gate, node_ids) for gate, node_ids in seen]


def drop_counts(dropped: Sequence[Dropped]) -> Drops:
    """The drops per gate, as ``trees.gate_drops`` holds them."""
    return Counter(d.gate for d in dropped)


async def explain_stored_tree(
    tree: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    *,
    config: RecordsConfig,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
    instruction: str = POLICY_INSTRUCTION,
) -> tuple[dict[str, list[Row]], list[Dropped]]:
    """`rows_and_drops` of a tree a run stored: its ``trees`` row and its ``tree_nodes``
    rows, graded again under `config` with the run's `extraction` and policy
    `instruction` (what `pipeline.records.rebuild.rebuild_records` takes)."""
    graded = await grade_for_records(
        rebuild_result(nodes, tree),
        tree["reference"],
        problem_id=str(tree["problem_id"]),
        config=config,
        instruction=instruction,
        extraction=extraction,
    )
    context = BuildContext(config, str(tree["run_id"]), tree["policy_model"], tree["prm_model"])
    return rows_and_drops(graded, context, tree["contaminated"])


__all__ = ["Dropped", "drop_counts", "explain_stored_tree", "rows_and_drops"]
