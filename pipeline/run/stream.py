"""The problems of a synthesis run as a Ray Data stream: source -> resume filter -> rows.

    read_datasource(ProblemDatasource)     one read task streams the source's selection
                                           (`sources.iter_records`: the records of
                                           `load_records`, never a list in the driver)
      -> map_batches(ResumeFilter)         drops problems whose tree is committed and
                                           source errors already written, reading only
                                           the sink's id columns, in its own actor
      -> one row per block                 (the dataset's target_max_block_size: 1 byte)
                                           the search stage then gets one problem per
                                           call (continuous trees)

Why a `Datasource` of our own rather than `ray.data.read_json` / `read_parquet` /
`from_huggingface`: pyarrow's JSON reader fails a whole block on one malformed line and
knows no line numbers, Ray's readers give no row locators for error messages, and
duplicate ids, filters and the seeded shuffle + skip/limit slice must give exactly the
records `load_records` gives (stable problem ids, nightly slices).  The read task runs
the same per-row code as `load_records` (`pipeline.problems.sources`), in a worker.

Rows out of the resume filter (`ROW_SCHEMA`): `kind` "problem" (to search) or "tally"
(one per input batch that had anything else: `records` holds the new source error rows
as the sink takes them, `skipped` counts the dropped, already-done records).  The driver
counts and commits from what arrives, so it never holds the selection.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import ray
from ray.data import Datasource
from ray.data.block import BlockMetadata
from ray.data.datasource import ReadTask

from pipeline.problems.sources import (
    AnySource,
    HFSource,
    JsonlSource,
    ParquetSource,
    Record,
    is_error,
    iter_records,
)
from pipeline.records import error_row
from pipeline.store.filesystem import is_remote
from pipeline.store.sink import ParquetSink

# One source record as a row: problem rows have `error` null, error rows `problem` null.
RECORD_SCHEMA = pa.schema(
    [
        ("problem_id", pa.string()),
        ("problem", pa.string()),
        ("reference", pa.string()),
        ("meta", pa.string()),  # JSON object (str/int values)
        ("error", pa.string()),  # the error row's message
    ]
)

# What the search stage reads (the resume filter's output).
ROW_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # "problem" | "tally"
        ("problem_id", pa.string()),
        ("problem", pa.string()),
        ("reference", pa.string()),
        ("records", pa.string()),  # tally: JSON {"errors": [error rows]} to commit
        ("skipped", pa.int64()),  # tally: records already done (not searched again)
    ]
)

BLOCK_ROWS = 1024  # records per block the read task yields


def record_to_row(record: Record) -> dict[str, Any]:
    if is_error(record):
        return {
            "problem_id": record["problem_id"],
            "problem": None,
            "reference": None,
            "meta": None,
            "error": record["message"],
        }
    return {
        "problem_id": record["problem_id"],
        "problem": record["problem"],
        "reference": record["reference"],
        "meta": json.dumps(record["meta"], ensure_ascii=False),
        "error": None,
    }


def row_to_record(row: dict[str, Any]) -> Record:
    if row["error"] is not None:
        return {"problem_id": row["problem_id"], "stage": "source", "message": row["error"]}
    return {
        "problem_id": row["problem_id"],
        "problem": row["problem"],
        "reference": row["reference"],
        "meta": json.loads(row["meta"]),
    }


def _blocks(records: Iterable[Record]) -> Iterator[pa.Table]:
    rows: list[dict[str, Any]] = []
    for record in records:
        rows.append(record_to_row(record))
        if len(rows) >= BLOCK_ROWS:
            yield pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)
            rows = []
    if rows:
        yield pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)


class ProblemDatasource(Datasource):
    """The selection of one source config, read by one Ray Data read task.

    One task, because the slice is defined over the whole source in order (duplicates,
    shuffle, skip/limit); its records stream out in `BLOCK_ROWS` blocks.
    """

    def __init__(self, source: AnySource) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.source = source

    def get_name(self) -> str:
        return f"Problems[{self.source.kind}]"

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        source = self.source

        def read() -> Iterator[pa.Table]:
            yield from _blocks(iter_records(source))

        metadata = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
        return [
            ReadTask(read, metadata, schema=RECORD_SCHEMA, per_task_row_limit=per_task_row_limit)
        ]


def read_records(source: AnySource) -> ray.data.Dataset:
    """The selection as a Ray Dataset of `RECORD_SCHEMA` rows (in `load_records` order).

    The read task reserves no CPU: it is short next to the searches, and a CPU held for
    it could be one the search actors' pool waits for on a small cluster.
    """
    dataset: ray.data.Dataset = ray.data.read_datasource(ProblemDatasource(source), num_cpus=0)
    return dataset


class ResumeFilter:
    """Ray Data callable class: drops what an earlier invocation of the run finished.

    A problem is done when its tree is committed; a source error (bad row, duplicate)
    when its error row is.  The committed keys are read once, in this actor, from the
    sink's `trees.problem_id` and `errors.problem_id/stage` columns only (local folder
    or bucket alike): the driver never holds them.
    """

    def __init__(self, output_root: str, run_id: str) -> None:
        sink = ParquetSink(output_root, run_id, readonly=True)
        self.run_id = run_id
        self.searched = sink.searched_problem_ids()
        self.final_errors = sink.final_error_keys()

    def __call__(self, batch: pa.Table) -> pa.Table:
        problems: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        skipped = 0
        for row in batch.to_pylist():
            pid = row["problem_id"]
            if row["error"] is not None:
                if pid in self.final_errors:
                    skipped += 1
                else:
                    errors.append(dict(error_row(pid, "source", row["error"], run_id=self.run_id)))
            elif pid in self.searched:
                skipped += 1
            else:
                problems.append(
                    {
                        "kind": "problem",
                        "problem_id": pid,
                        "problem": row["problem"],
                        "reference": row["reference"],
                        "records": None,
                        "skipped": 0,
                    }
                )
        tally = []
        if errors or skipped:  # first: its errors are committed before any tree
            tally.append(
                {
                    "kind": "tally",
                    "problem_id": None,
                    "problem": None,
                    "reference": None,
                    "records": json.dumps({"errors": errors}) if errors else None,
                    "skipped": skipped,
                }
            )
        return pa.Table.from_pylist(tally + problems, schema=ROW_SCHEMA)


def for_workers(source: AnySource) -> AnySource:
    """The source with local paths made absolute: a Ray worker's working directory need
    not be the driver's.  (Locators keep using the file's name only.)"""
    if isinstance(source, JsonlSource | ParquetSource):
        return source.model_copy(update={"path": source.path.expanduser().resolve()})
    if isinstance(source, HFSource):
        update: dict[str, Any] = {}
        if Path(source.name).expanduser().exists():  # a local folder, not a Hub id
            update["name"] = str(Path(source.name).expanduser().resolve())
        if source.cache_dir is not None:
            update["cache_dir"] = source.cache_dir.expanduser().resolve()
        return source.model_copy(update=update)
    return source


def problem_stream(source: AnySource, output_root: str | Path, run_id: str) -> ray.data.Dataset:
    """Source -> resume filter -> one row per block: what the search stage consumes.

    One row per block comes from the dataset's own `target_max_block_size` (1 byte: every
    block a map or read task yields is cut after each row), a public `DataContext` field
    that a Dataset captures when it is created.  Not `repartition(target_num_rows_per_block=1)`:
    that runs as Ray Data tasks reserving 1 CPU each (Ray Data's default for map tasks,
    and `repartition` takes no resource arguments), so a run whose search actors reserve
    every CPU hung (measured: 2 actors x 1 CPU on a 2-CPU cluster, no problem started).
    Every stage here reserves no CPU.
    """
    if not is_remote(output_root):
        output_root = Path(output_root).expanduser().resolve()
    context = ray.data.DataContext.get_current()
    saved = context.target_max_block_size
    context.target_max_block_size = 1  # sealed into the datasets created below
    try:
        return read_records(for_workers(source)).map_batches(
            ResumeFilter,
            fn_constructor_kwargs={"output_root": str(output_root), "run_id": run_id},
            batch_format="pyarrow",
            batch_size=BLOCK_ROWS,  # one resume call (and at most one tally) per 1,024 rows
            compute=ray.data.ActorPoolStrategy(size=1),
            num_cpus=0,
        )
    finally:
        context.target_max_block_size = saved
