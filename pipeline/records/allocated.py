"""The records of a problem searched twice under the night allocator (`pipeline.run.allocation`):
its probe tree's, and its second tree's built against the probe's committed records.

* `probe_records`: the tree's records as a run builds them (`rows_for`), its `trees` row
  tagged ``tree: probe`` with its place in the selection and what the allocator reads of
  it (`n_incorrect`, `kept_rows`).
* `second_records`: the second tree joins the probe (rebuilt from its committed
  ``tree_nodes`` and ``trees`` rows) under one root (`problem_trees.forest`), so its
  nodes continue the probe's node ids and a right answer of one tree pairs with a wrong
  one of the other; the forest's rows are built with the per-problem caps lifted and
  `problem_trees.further_rows` keeps those that are no near duplicate of a probe row,
  up to what the probe left of each cap.  Its ``nodes`` and ``tree_nodes`` rows are the
  forest's nodes of the second tree; its ``trees`` row is the second tree's own (graded
  alone: its answer, counts, tokens and B), tagged ``tree: second``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actors.prompts import POLICY_INSTRUCTION
from pipeline.records.build import rows_for
from pipeline.records.config import RecordsConfig
from pipeline.records.context import BuildContext
from pipeline.records.grading import GradedTree, grade_for_records
from pipeline.records.problem_trees import forest, further_rows, uncapped
from pipeline.records.rebuild import rebuild_result
from pipeline.records.schema import Row
from search.answers import AnswerExtraction
from search.driver import SearchResult

TRAINING = ("sft", "dpo", "step_dpo", "prm", "kto")


def _tag(tree: Row, kind: str, index: int, graded: GradedTree, rows: Mapping[str, Any]) -> Row:
    return dict(
        tree,
        tree=kind,
        source_index=index,
        n_incorrect=sum(1 for label in graded.labels.values() if not label),
        kept_rows=[{"table": t, "rows": len(rows.get(t, ()))} for t in TRAINING],
    )


async def probe_records(
    result: SearchResult,
    reference: str | None,
    *,
    index: int,
    problem_id: str,
    run_id: str,
    config: RecordsConfig,
    policy_model: str | None = None,
    prm_model: str | None = None,
    contamination: str | None = None,
    instruction: str = POLICY_INSTRUCTION,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
) -> dict[str, list[Row]]:
    """A probe tree's records (module docstring)."""
    graded = await grade_for_records(
        result,
        reference,
        problem_id=problem_id,
        config=config,
        instruction=instruction,
        extraction=extraction,
    )
    records = rows_for(graded, BuildContext(config, run_id, policy_model, prm_model), contamination)
    records["trees"] = [_tag(records["trees"][0], "probe", index, graded, records)]
    return records


async def second_records(
    result: SearchResult,
    probe: Mapping[str, Sequence[Row]],
    reference: str | None,
    *,
    index: int,
    problem_id: str,
    run_id: str,
    config: RecordsConfig,
    policy_model: str | None = None,
    prm_model: str | None = None,
    contamination: str | None = None,
    instruction: str = POLICY_INSTRUCTION,
    extraction: AnswerExtraction = AnswerExtraction.BOXED,
) -> dict[str, list[Row]]:
    """A second tree's records against its probe's committed ones (module docstring)."""
    first = rebuild_result(probe["tree_nodes"], probe["trees"][0])
    both = forest(first, result)
    later = uncapped(config)

    async def graded(tree: SearchResult, rules: RecordsConfig) -> GradedTree:
        return await grade_for_records(
            tree,
            reference,
            problem_id=problem_id,
            config=rules,
            instruction=instruction,
            extraction=extraction,
        )

    rows = rows_for(
        await graded(both, later),
        BuildContext(later, run_id, policy_model, prm_model),
        contamination,
    )
    own = await graded(result, config)
    alone = rows_for(own, BuildContext(config, run_id, policy_model, prm_model), contamination)
    # the second tree's node k (k >= 1) is the forest's node k + offset
    offset = len(first.tree) - 1

    def forest_id(node: int | None) -> int | None:
        return None if node is None else node + offset

    chosen = forest_id(result.chosen_node_id)
    kept = (
        further_rows({t: probe.get(t, ()) for t in TRAINING}, rows, config)
        if contamination is None
        else {t: [] for t in TRAINING}
    )
    tree = dict(alone["trees"][0], chosen_node_id=chosen)
    return {
        "nodes": [
            dict(r, is_chosen=r["node_id"] == chosen)
            for r in rows["nodes"]
            if r["node_id"] > offset
        ],
        "tree_nodes": [r for r in rows["tree_nodes"] if r["node_id"] > offset],
        "trees": [_tag(tree, "second", index, own, kept)],
        **{t: list(kept.get(t, ())) for t in TRAINING},
    }


__all__ = ["probe_records", "second_records"]
