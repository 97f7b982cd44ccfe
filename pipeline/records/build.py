"""`records_for`: one search result graded and turned into every record type's rows.

`rows_for` judges the tree's answered paths by the gates once (`GatedPaths`) and runs
every builder once on them; each builder counts its own drops, and the `trees` row's
``gate_drops`` holds them all (`gate_counts`).  The data yield (`trees`' yield columns)
is read off the rows it built (`pipeline.records.yields.counts`).

Decontamination
    `records_for` takes the benchmark a problem overlaps (found by
    `pipeline.problems.decontamination`): such a problem keeps its nodes, trees and
    tree_nodes rows (``trees.contaminated`` names the benchmark) and gives no
    sft, dpo, step_dpo, prm or kto rows.
"""

from __future__ import annotations

from collections import Counter

from pipeline.records.context import BuildContext, Built, Drops, gate_counts
from pipeline.records.dpo import dpo_rows
from pipeline.records.grading import GradedTree
from pipeline.records.kto import kto_rows
from pipeline.records.nodes import node_rows
from pipeline.records.paths import GatedPaths
from pipeline.records.prm import prm_rows
from pipeline.records.schema import Row
from pipeline.records.sft import capped, sft_candidates
from pipeline.records.spec import RecordsSpec
from pipeline.records.step_dpo import step_dpo_rows
from pipeline.records.tree_nodes import tree_node_rows
from pipeline.records.trees import tree_row
from pipeline.records.yields import NO_YIELD, counts
from search.driver import SearchResult


async def records_for(
    result: SearchResult, reference: str | None, spec: RecordsSpec
) -> dict[str, list[Row]]:
    """Grade one result and build every record type's rows as `spec` says (its config,
    prompt, answer extraction, models and contamination: `RecordsSpec`)."""
    return rows_for(await spec.grade(result, reference), spec.context, spec.contamination)


def rows_for(
    graded: GradedTree, context: BuildContext, contamination: str | None = None
) -> dict[str, list[Row]]:
    """Every record type's rows of one graded tree: the paths gated once, each builder run
    once on them."""
    records: dict[str, list[Row]] = {
        "nodes": node_rows(graded, context),
        "tree_nodes": tree_node_rows(graded, context),
    }
    drops: Drops = Counter()
    yields = NO_YIELD
    if contamination is None:
        paths = GatedPaths(graded, context.config)
        candidates = sft_candidates(graded, context, paths)
        built: dict[str, Built] = {
            "sft": capped(candidates, context.config.gates.sft_top_k),
            "dpo": dpo_rows(graded, context, paths),
            "step_dpo": step_dpo_rows(graded, context, paths),
            "prm": prm_rows(graded, context, paths),
            "kto": kto_rows(graded, context, paths),
        }
        records |= {name: b.rows for name, b in built.items()}
        drops = gate_counts(built.values())
        yields = counts(candidates, built["dpo"], built["step_dpo"], built["prm"])
    records["trees"] = [
        tree_row(graded, context, contaminated=contamination, gate_drops=drops, yields=yields)
    ]
    return records


__all__ = ["records_for", "rows_for"]
