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
from dataclasses import replace
from typing import Any

from pipeline.records.build import rows_for
from pipeline.records.grading import GradedTree
from pipeline.records.problem_trees import forest, further_rows, uncapped
from pipeline.records.rebuild import rebuild_result
from pipeline.records.schema import Row
from pipeline.records.spec import RecordsSpec
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
    result: SearchResult, reference: str | None, spec: RecordsSpec, *, index: int
) -> dict[str, list[Row]]:
    """A probe tree's records (module docstring)."""
    graded = await spec.grade(result, reference)
    records = rows_for(graded, spec.context, spec.contamination)
    records["trees"] = [_tag(records["trees"][0], "probe", index, graded, records)]
    return records


async def second_records(
    result: SearchResult,
    probe: Mapping[str, Sequence[Row]],
    reference: str | None,
    spec: RecordsSpec,
    *,
    index: int,
) -> dict[str, list[Row]]:
    """A second tree's records against its probe's committed ones (module docstring)."""
    first = rebuild_result(probe["tree_nodes"], probe["trees"][0])
    both = forest(first, result)
    later = replace(spec, config=uncapped(spec.config))
    rows = rows_for(await later.grade(both, reference), later.context, spec.contamination)
    own = await spec.grade(result, reference)
    alone = rows_for(own, spec.context, spec.contamination)
    # the second tree's node k (k >= 1) is the forest's node k + offset
    offset = len(first.tree) - 1

    def forest_id(node: int | None) -> int | None:
        return None if node is None else node + offset

    chosen = forest_id(result.chosen_node_id)
    kept = (
        further_rows({t: probe.get(t, ()) for t in TRAINING}, rows, spec.config)
        if spec.contamination is None
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
