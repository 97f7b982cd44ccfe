"""Reading an evaluation run folder: the two Parquet tables, the anytime traces, `meta.json`.

The nested `trace` column is not turned into Python objects (millions of
points in a full grid); it is flattened once into NumPy arrays, and tree row
``i`` of `RunData.trees` owns the slice ``offsets[i]:offsets[i + 1]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped, unused-ignore]
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

TREES_FILE = "eval_trees.parquet"
NODES_FILE = "eval_nodes.parquet"
META_FILE = "meta.json"

# what the report reads of a node (a full grid has millions of node rows)
NODE_COLUMNS = [
    "method",
    "budget",
    "seed",
    "problem_id",
    "node_id",
    "parent_id",
    "iteration",
    "q",
    "answered",
    "correct",
    "from_generative",
    "failed",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Trace:
    """Every tree's anytime trace, flattened; c_used is non-decreasing within a tree."""

    offsets: IntArray
    c_used: FloatArray
    any_answer: FloatArray  # 0/1, so means are rates
    correct: FloatArray
    max_depth: FloatArray
    max_width: FloatArray

    def state_at(self, row: int, budgets: FloatArray) -> dict[str, FloatArray]:
        """Tree `row`'s state at each budget: its last trace point with c_used <= budget.

        Before its first point a tree has spent nothing and holds only the root:
        no answer, depth 0, width 1.
        """
        lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
        index = np.searchsorted(self.c_used[lo:hi], budgets, side="right") - 1
        started = index >= 0
        at = lo + np.maximum(index, 0)

        def pick(values: FloatArray, before: float) -> FloatArray:
            if hi == lo:
                return np.full(budgets.shape, before)
            return np.where(started, values[at], before)

        return {
            "tokens": pick(self.c_used, 0.0),
            "accuracy": pick(self.correct, 0.0),
            "answered_rate": pick(self.any_answer, 0.0),
            "depth": pick(self.max_depth, 0.0),
            "width": pick(self.max_width, 1.0),
        }


@dataclass(frozen=True)
class RunData:
    """One evaluation run: trees (trace column dropped), nodes, traces and metadata."""

    trees: Any  # pandas.DataFrame with its default RangeIndex: row i <-> trace slice i
    nodes: Any  # pandas.DataFrame
    trace: Trace
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        """Method labels in the order the grid wrote them (the runner's order)."""
        return [str(m) for m in pd.unique(self.trees["method"])]

    @property
    def budgets(self) -> list[int]:
        return sorted(int(b) for b in pd.unique(self.trees["budget"]))


def _numeric(array: Any, name: str) -> FloatArray:
    column = array.field(name)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def flatten_trace(column: Any) -> Trace:
    """The `trace` column (a pyarrow list<struct> array, maybe chunked) as a `Trace`."""
    if isinstance(column, pa.ChunkedArray):
        column = (
            pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], type=column.type)
        )
    lengths = np.asarray(
        pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False),
        dtype=np.int64,
    )
    offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths, dtype=np.int64)])
    flat = column.flatten()  # respects slicing, unlike .values
    return Trace(
        offsets=offsets,
        c_used=_numeric(flat, "c_used"),
        any_answer=_numeric(flat, "any_answer"),
        correct=_numeric(flat, "correct"),
        max_depth=_numeric(flat, "max_depth"),
        max_width=_numeric(flat, "max_width"),
    )


def read_meta(run_dir: Path) -> dict[str, Any]:
    """`meta.json` when the runner wrote one (a JSON object), else an empty dict."""
    path = run_dir / META_FILE
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def read_trees(run_dir: Path) -> Any:
    """`eval_trees.parquet` as a DataFrame without the nested trace (for the table functions)."""
    schema = pq.read_schema(Path(run_dir) / TREES_FILE)
    columns = [name for name in schema.names if name != "trace"]
    return pq.read_table(Path(run_dir) / TREES_FILE, columns=columns).to_pandas()


def load_run(run_dir: Path) -> RunData:
    """Read `eval_trees.parquet`, `eval_nodes.parquet` and the optional `meta.json`."""
    trees_table = pq.read_table(run_dir / TREES_FILE)
    if trees_table.num_rows == 0:
        raise ValueError(f"{run_dir / TREES_FILE} has no trees")
    trace = flatten_trace(trees_table.column("trace"))
    trees = trees_table.drop_columns(["trace"]).to_pandas()
    nodes = pq.read_table(run_dir / NODES_FILE, columns=NODE_COLUMNS).to_pandas()
    return RunData(trees=trees, nodes=nodes, trace=trace, meta=read_meta(run_dir))
