"""Finished searches of a long (services) grid, saved as they complete: a crash loses
only the searches in flight, and rerunning the same evaluation skips what is saved.

Each flush writes `parts/nodes-<id>.parquet` and then `parts/trees-<id>.parquet`; a
part counts only once its trees file exists, so a crash between the two leaves an
orphan nodes file that is ignored (and never a tree without its nodes).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from pipeline.evaluation.schema import EVAL_NODES_SCHEMA, EVAL_TREES_SCHEMA
from pipeline.records import to_table

Key = tuple[str, int, int, str]  # method, budget, seed, problem_id


def tree_key(row: dict[str, Any]) -> Key:
    return (str(row["method"]), int(row["budget"]), int(row["seed"]), str(row["problem_id"]))


class PartStore:
    def __init__(self, run_dir: Path) -> None:
        self.folder = run_dir / "parts"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.trees: list[dict[str, Any]] = []
        self.nodes: list[dict[str, Any]] = []

    def _complete(self) -> list[str]:
        return sorted(p.stem.removeprefix("trees-") for p in self.folder.glob("trees-*.parquet"))

    def done(self) -> set[Key]:
        keys: set[Key] = set()
        for part in self._complete():
            table = pq.read_table(
                self.folder / f"trees-{part}.parquet",
                columns=["method", "budget", "seed", "problem_id"],
            )
            keys.update(tree_key(r) for r in table.to_pylist())
        return keys

    def add(self, tree: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        self.trees.append(tree)
        self.nodes.extend(nodes)

    def flush(self) -> None:
        if not self.trees:
            return
        part = uuid.uuid4().hex
        pq.write_table(
            to_table(self.nodes, EVAL_NODES_SCHEMA), self.folder / f"nodes-{part}.parquet"
        )
        pq.write_table(
            to_table(self.trees, EVAL_TREES_SCHEMA), self.folder / f"trees-{part}.parquet"
        )
        self.trees, self.nodes = [], []

    def tables(self) -> tuple[Any, Any]:
        """Every saved search, as the two final tables."""
        parts = self._complete()
        trees = [pq.read_table(self.folder / f"trees-{p}.parquet") for p in parts]
        nodes = [pq.read_table(self.folder / f"nodes-{p}.parquet") for p in parts]
        return (
            pa.concat_tables(trees) if trees else EVAL_TREES_SCHEMA.empty_table(),
            pa.concat_tables(nodes) if nodes else EVAL_NODES_SCHEMA.empty_table(),
        )
