"""Finished searches of a long (services) grid, saved as they complete: a crash loses
only the searches in flight, and rerunning the same evaluation skips what is saved.

Each flush commits one batch through the run sink's crash-safe writer
(`pipeline.store.sink.commit_batch`): `parts/nodes/part-<id>.parquet` and
`parts/trees/part-<id>.parquet`, then the marker `parts/_committed/<id>`.  A batch counts
only once its marker exists, so a crash mid-flush leaves parts that are ignored (and never
a tree without its nodes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from pipeline.evaluation.schema import EVAL_NODES_SCHEMA, EVAL_TREES_SCHEMA
from pipeline.records import to_table
from pipeline.store.filesystem import open_store
from pipeline.store.run_folder import MARKERS, RunFolder
from pipeline.store.sink import commit_batch

Key = tuple[str, int, int, str]  # method, budget, seed, problem_id


def tree_key(row: dict[str, Any]) -> Key:
    return (str(row["method"]), int(row["budget"]), int(row["seed"]), str(row["problem_id"]))


class PartStore:
    def __init__(self, run_dir: Path) -> None:
        # the marker folder exists from the start: parts without a marker never count
        (run_dir / "parts" / MARKERS).mkdir(parents=True, exist_ok=True)
        self.saved = RunFolder(open_store(run_dir / "parts"), run_id=run_dir.name)
        self.trees: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []

    def done(self) -> set[Key]:
        keys: set[Key] = set()
        for part in self.saved.parts("trees"):
            table = pq.read_table(part, columns=["method", "budget", "seed", "problem_id"])
            keys.update(tree_key(r) for r in table.to_pylist())
        return keys

    def add(self, tree: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        self.trees.append(tree)
        self.nodes.extend(nodes)

    def flush(self) -> None:
        if not self.trees:
            return
        tables = {
            "nodes": to_table(self.nodes, EVAL_NODES_SCHEMA),
            "trees": to_table(self.trees, EVAL_TREES_SCHEMA),
        }
        commit_batch(self.saved.store, tables)
        self.trees, self.nodes = [], []

    def tables(self) -> tuple[Any, Any]:
        """Every saved search, as the two final tables.  Parts saved by an older build (a
        column then declared never null, since nullable) join the others: their schemas are
        unified, not required to be equal."""
        trees = [pq.read_table(p) for p in self.saved.parts("trees")]
        nodes = [pq.read_table(p) for p in self.saved.parts("nodes")]
        return (
            pa.concat_tables(trees, promote_options="default")
            if trees
            else EVAL_TREES_SCHEMA.empty_table(),
            pa.concat_tables(nodes, promote_options="default")
            if nodes
            else EVAL_NODES_SCHEMA.empty_table(),
        )
