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

The rows themselves are declared in `pipeline.run.stream_rows`: source rows out of the read
task, "problem" and "tally" rows out of the resume filter (a tally holds an input batch's
new source errors and counts its already-done records).  The driver counts and commits
from what arrives, so it never holds the selection.
"""

from __future__ import annotations

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
    iter_records,
)
from pipeline.records import SCHEMAS, error_row
from pipeline.run.stream_rows import (
    SOURCE_SCHEMA,
    problem_row,
    source_error,
    source_row,
    stream_table,
    tally_row,
)
from pipeline.store.filesystem import is_remote
from pipeline.store.resume import Done
from pipeline.store.run_folder import RunFolder

BLOCK_ROWS = 1024  # records per block the read task yields


def _blocks(records: Iterable[Record]) -> Iterator[pa.Table]:
    rows: list[dict[str, Any]] = []
    for index, record in enumerate(records):
        rows.append(source_row(record, index))
        if len(rows) >= BLOCK_ROWS:
            yield pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)
            rows = []
    if rows:
        yield pa.Table.from_pylist(rows, schema=SOURCE_SCHEMA)


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
            ReadTask(read, metadata, schema=SOURCE_SCHEMA, per_task_row_limit=per_task_row_limit)
        ]


def read_records(source: AnySource) -> ray.data.Dataset:
    """The selection as a Ray Dataset of `SOURCE_SCHEMA` rows (in `load_records` order).

    The read task reserves no CPU: it is short next to the searches, and a CPU held for
    it could be one the search actors' pool waits for on a small cluster.
    """
    dataset: ray.data.Dataset = ray.data.read_datasource(ProblemDatasource(source), num_cpus=0)
    return dataset


class ResumeFilter:
    """Ray Data callable class: drops what an earlier invocation of the run finished.

    The resume rule (`pipeline.store.resume.Done`) reads the committed keys once, in this
    actor, from the run folder's `trees.problem_id` and `errors.problem_id/stage` columns
    only (local folder or bucket alike): the driver never holds them.

    With the night allocator (`allocation`) a problem is done when its second tree is
    committed; one whose probe is committed goes on as a "probed" row (the window stage
    replays its probe and may give it a second tree), any other as a probe; every row
    carries its place in the selection, a tally the places of its errors and skips.
    """

    def __init__(self, output_root: str, run_id: str, allocation: bool = False) -> None:
        self.run_id = run_id
        folder = RunFolder.open(output_root, run_id)
        self.done = Done.read(folder)
        self.allocation = allocation
        self.probed, self.seconds = committed_trees(folder) if allocation else (set(), set())

    def __call__(self, batch: pa.Table) -> pa.Table:
        problems: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        skipped = 0
        places: list[int] = []  # the tally's: errors and skips (the allocator's windows)
        for row in batch.to_pylist():
            pid = row["problem_id"]
            message = source_error(row)
            if self.allocation and message is None:
                if pid in self.seconds:
                    skipped += 1
                    places.append(int(row["index"]))
                elif pid in self.probed:
                    problems.append(problem_row(row, tree="probe", kind="probed"))
                else:
                    problems.append(problem_row(row, tree="probe"))
            elif self.done.skips(pid, source_error=message is not None):
                skipped += 1
                places.append(int(row["index"]))
            elif message is not None:
                errors.append(dict(error_row(pid, "source", message, run_id=self.run_id)))
                places.append(int(row["index"]))
            else:
                problems.append(problem_row(row))
        # the tally first: its errors are committed before any tree
        indices = places if self.allocation else None
        tally = [tally_row(errors, skipped, indices)] if errors or skipped else []
        return stream_table(tally + problems)


def committed_trees(folder: RunFolder) -> tuple[set[str], set[str]]:
    """(problems whose probe is committed, problems whose second tree is): the night
    allocator's resume rule reads the `trees` table's problem_id and tree columns only."""
    probed: set[str] = set()
    seconds: set[str] = set()
    schema = SCHEMAS["trees"]  # a part from before the tree column reads it as nulls
    for table in folder.tables("trees", columns=["problem_id", "tree"], schema=schema):
        for pid, tree in zip(
            table.column("problem_id").to_pylist(), table.column("tree").to_pylist(), strict=True
        ):
            if tree == "probe":
                probed.add(str(pid))
            elif tree == "second":
                seconds.add(str(pid))
    return probed, seconds


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


def problem_stream(
    source: AnySource, output_root: str | Path, run_id: str, allocation: bool = False
) -> ray.data.Dataset:
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
            fn_constructor_kwargs={
                "output_root": str(output_root),
                "run_id": run_id,
                "allocation": allocation,
            },
            batch_format="pyarrow",
            batch_size=BLOCK_ROWS,  # one resume call (and at most one tally) per 1,024 rows
            compute=ray.data.ActorPoolStrategy(size=1),
            num_cpus=0,
        )
    finally:
        context.target_max_block_size = saved
