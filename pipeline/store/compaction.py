"""Compaction: a run folder's per-batch parts merged into a few shards per record type.

A run commits one Parquet part per record type per tree, so a 500-problem night leaves
about 3,700 small files (measured: 500 SmolLM2 fixture trees, 33 MB), and every later
reader (check, report, publish, a resume's listing) lists and opens each of them.
`compact_run(folder)` rewrites the rows that count as a few shards, keeping the
exactly-once guarantee (`pipeline.store.compacted` says how readers see it):

1. Under the writer lease (`RunFolder.lease()`, or the run's own), finish what an earlier
   compaction left (its replaced batches, orphan shards of one that stopped before its
   record, broken records) and delete uncommitted parts, as opening a sink does.
2. Read every counted batch's rows that count (`Counted`, already filtered) in batch
   order, and write them as shard batches `compact-<id>-<n>`: parts and markers like
   any batch.  All counted batches go into one compaction, because the counting rule is
   per problem across batches.  A shard holds rows of one lease generation (and one
   Parquet schema), and its marker carries that generation, the shard's problem ids and
   those it finishes: the rule over the shards and any batch a later run commits counts
   exactly what it would count over the original batches.
3. Check the lease (the fence), then create the record `_compacted/<id>.json` naming
   the shards and the batches they replace: the switch, one atomic create.
4. Delete the replaced markers, then their parts.

A crash anywhere leaves the old layout (before 3) or the new one (after), and the next
`compact_run` finishes or redoes it.  A resumed run commits its new batches next to the
shards (a newer generation), and compacting again merges shards and new batches into
new shards.  Batches whose marker names a part that is not there are left as they are:
they count for nothing either way and `bgmcts check` keeps reporting them.

Shard size: at most 256 MiB of Parquet and 1,000,000 rows.  A shard is built in memory
and written with one call (one PUT on a bucket, atomic; far below S3's 5 GiB), so 256 MiB
bounds the compactor's memory; a night (33 MB measured) is then one shard per record
type, and a shard stays small enough for the Hub to take as one file.  The row cap keeps
a shard of the many-row tables (nodes, tree_nodes) quick to page.  Row groups: at most
100,000 rows and 64 MiB of Arrow data, well under the ~286 MiB the Hub's dataset viewer
reads at once, so it can page any shard.  Rows keep the order readers read them in
(batch, then row), so compacting the same rows twice writes the same shards.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import InputError
from pipeline.records import RECORD_TYPES
from pipeline.store.compacted import COMPACTED, SHARD_PREFIX, Compaction, Layout, is_shard
from pipeline.store.compacted import record_name as compaction_record_name
from pipeline.store.lease import Lease
from pipeline.store.parts import reading
from pipeline.store.run_folder import (
    MARKERS,
    Batch,
    Counted,
    RunFolder,
    batch_of,
    drop_rows,
    part_name,
)

SHARD_BYTES = 256 * 2**20
SHARD_ROWS = 1_000_000
ROW_GROUP_ROWS = 100_000
ROW_GROUP_BYTES = 64 * 2**20
READ_AHEAD = 64  # parts fetched at once (a bucket reads them concurrently)


def _pa() -> Any:
    return importlib.import_module("pyarrow")


def _pq() -> Any:
    return importlib.import_module("pyarrow.parquet")


@dataclass(frozen=True)
class Limits:
    """How big a shard and its row groups get (the module docstring says why)."""

    shard_bytes: int = SHARD_BYTES
    shard_rows: int = SHARD_ROWS
    row_group_rows: int = ROW_GROUP_ROWS
    row_group_bytes: int = ROW_GROUP_BYTES


@dataclass
class CompactionResult:
    """What one `compact_run` did: files of the layout (parts, markers, records) before and
    after, the counted rows per record type (the same before and after), the shards
    written and the batches they replaced (none when there was nothing to compact)."""

    location: Any
    files_before: int
    files_after: int
    rows: dict[str, int] = field(default_factory=dict)
    shards: int = 0
    replaced: int = 0

    def line(self) -> str:
        done = (
            f"{self.replaced} batches into {self.shards} shards"
            if self.replaced
            else "nothing to compact"
        )
        rows = ", ".join(f"{kind} {n}" for kind, n in self.rows.items() if n)
        return (
            f"compacted {self.location}: {done}; files {self.files_before} -> "
            f"{self.files_after}; rows {rows or 'none'}"
        )


def compact_run(
    folder: RunFolder, lease: Lease | None = None, limits: Limits = Limits()
) -> CompactionResult:
    """Compact `folder` (module docstring).  `lease`: the writer lease when the caller
    holds it already (a run compacting itself); else it is taken here, and a folder in use
    by a live run fails with `RunFolderBusy`."""
    if lease is not None:
        return _compact(folder, lease, limits)
    with folder.lease() as held:
        return _compact(folder, held, limits)


def _compact(folder: RunFolder, lease: Lease, limits: Limits) -> CompactionResult:
    if lease.generation is None:
        raise ValueError(f"run folder {folder.location}: the compactor's lease is not held")
    if not folder.remote and not folder.store.exists(MARKERS):
        raise InputError(
            f"{folder.location}: no commit markers ({MARKERS}/): not a run folder the sink "
            "wrote, nothing to compact"
        )
    before = count_files(folder)
    finish_earlier(folder, lease)
    folder = RunFolder(folder.store, folder.run_id)  # nothing remembered from before
    counted = folder.counted()
    replaced = sorted(counted.complete)
    rows = folder.counts()
    if all(is_shard(b) for b in replaced):  # nothing committed since the last compaction
        return CompactionResult(folder.location, before, count_files(folder), rows)
    compaction_id = uuid.uuid4().hex
    batches = folder.batches()
    writer = _ShardWriter(folder, compaction_id, limits)
    try:
        for kind in RECORD_TYPES:
            for batch, table in _counted_tables(folder, counted, kind):
                info = batches[batch]
                # a marker from before fencing finishes nothing (`Counted`): its shards neither
                writer.add(
                    kind,
                    info.generation,
                    legacy=info.parts is None,
                    table=table,
                    second=info.second,
                )
            writer.flush(kind)
        lease.check()  # the fence: an overtaken compactor switches nothing
        record = Compaction(compaction_id, lease.generation, tuple(writer.shards), tuple(replaced))
        created = folder.store.create_exclusive(
            record.body(), COMPACTED, compaction_record_name(compaction_id)
        )
    except Exception:
        # nothing switched: the shards written so far count for nothing, and on a full
        # disk their room is what the rerun needs (the next compaction would delete them)
        with contextlib.suppress(Exception):
            writer.discard()
        raise
    if not created:  # a uuid4 taken twice: never, but never switch to someone else's record
        raise RuntimeError(f"{folder.location}: compaction record {compaction_id} exists")
    finish_earlier(folder, lease)
    after = RunFolder(folder.store, folder.run_id)
    return CompactionResult(
        folder.location,
        before,
        count_files(after),
        after.counts(),
        shards=len(writer.shards),
        replaced=len(replaced),
    )


def _counted_tables(folder: RunFolder, counted: Counted, kind: str) -> Iterator[tuple[str, Any]]:
    """(batch, its rows that count) for each counted part of `kind`, in batch order; a
    bucket's parts are fetched `READ_AHEAD` at a time, concurrently."""
    names = list(counted.names.get(kind, ()))
    for start in range(0, len(names), READ_AHEAD):
        chunk = names[start : start + READ_AHEAD]
        paths = [folder.store.join(kind, name) for name in chunk]
        bodies = folder.store.read_many(paths)
        for name, path in zip(chunk, paths, strict=True):
            batch = batch_of(name)
            with reading(path, str(folder.location)):  # read from bytes: pyarrow names no file
                table = _pq().read_table(_pa().BufferReader(bodies[path]))
            yield batch, drop_rows(table, counted.dropped[batch])


class _ShardWriter:
    """Rows of one record type in, shard batches out: one open shard per (generation,
    marker kind, schema), rolled over at the limits; each shard's marker goes right after
    its part (the record, written last, is what makes any of them count)."""

    def __init__(self, folder: RunFolder, compaction_id: str, limits: Limits) -> None:
        self.folder = folder
        self.prefix = f"{SHARD_PREFIX}{compaction_id}-"
        self.limits = limits
        self.shards: list[str] = []
        self.written: list[tuple[str, str]] = []  # (record type, batch) of each part written
        self._open: dict[tuple[int, bool, bool, Any], _Shard] = {}

    def add(
        self, kind: str, generation: int, *, legacy: bool, table: Any, second: bool = False
    ) -> None:
        """`second`: the rows are a second tree's (`Batch.second`): such rows get shards
        of their own, whose markers key them as second trees."""
        if not table.num_rows:
            return
        key = (generation, legacy, second, table.schema)
        shard = self._open.get(key)
        if shard is None:
            shard = self._open[key] = _Shard(
                kind, generation, legacy, table.schema, self.limits, second
            )
        for start in range(0, table.num_rows, self.limits.row_group_rows):
            piece = table.slice(start, self.limits.row_group_rows)
            if shard.full_after(piece):
                self._write(shard)
                shard = self._open[key] = _Shard(
                    kind, generation, legacy, table.schema, self.limits, second
                )
            shard.add(piece)

    def flush(self, kind: str) -> None:
        """Write every open shard of `kind` (its rows are all in)."""
        for key, shard in list(self._open.items()):  # in the order they were opened
            if shard.kind == kind:
                self._write(shard)
                del self._open[key]

    def discard(self) -> None:
        """Delete the shards written (markers first, then parts): for a compaction that
        stops before its record."""
        store = self.folder.store
        store.delete_many([store.join(MARKERS, b) for b in self.shards])
        store.delete_many([store.join(kind, part_name(b)) for kind, b in self.written])

    def _write(self, shard: _Shard) -> None:
        data, table = shard.close()
        if table is None:
            return
        batch = f"{self.prefix}{len(self.shards):05d}"
        store = self.folder.store
        self.written.append((shard.kind, batch))
        store.write_bytes(data, shard.kind, part_name(batch))
        marker = Batch.of({shard.kind: table}, shard.generation, second=shard.second)
        if shard.legacy:
            marker = Batch(marker.generation, marker.parts, marker.problems, frozenset())
        store.write_bytes(marker.body(), MARKERS, batch)
        self.shards.append(batch)


class _Shard:
    """One shard being built: row groups buffered up to their limits, written into an
    in-memory Parquet file.  `table` keeps the ids its marker needs (problem_id, stage)."""

    def __init__(
        self,
        kind: str,
        generation: int,
        legacy: bool,
        schema: Any,
        limits: Limits,
        second: bool = False,
    ):
        self.kind, self.generation, self.legacy, self.schema = kind, generation, legacy, schema
        self.second = second
        self.limits = limits
        self.buffer = io.BytesIO()
        self.writer: Any = None
        self.pending: list[Any] = []
        self.pending_rows = self.pending_bytes = self.rows = 0
        self.ids: list[Any] = []

    def full_after(self, piece: Any) -> bool:
        """Would `piece` take this (non-empty) shard past its limits?  The bytes are what is
        written so far plus the Arrow size of what is buffered (Parquet is smaller)."""
        if not self.rows:
            return False
        rows: int = self.rows + piece.num_rows
        size: int = self.buffer.tell() + self.pending_bytes + piece.nbytes
        return rows > self.limits.shard_rows or size > self.limits.shard_bytes

    def add(self, piece: Any) -> None:
        if (
            self.pending_rows + piece.num_rows > self.limits.row_group_rows
            or self.pending_bytes + piece.nbytes > self.limits.row_group_bytes
        ):
            self._row_group()
        self.pending.append(piece)
        self.pending_rows += piece.num_rows
        self.pending_bytes += piece.nbytes
        self.rows += piece.num_rows
        keep = [c for c in ("problem_id", "stage") if c in piece.column_names]
        self.ids.append(piece.select(keep))

    def _row_group(self) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self.writer = _pq().ParquetWriter(self.buffer, self.schema)
        table = _pa().concat_tables(self.pending)
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> tuple[bytes, Any]:
        """The shard's Parquet bytes and a table of its id columns (None when empty)."""
        self._row_group()
        if self.writer is None:
            return b"", None
        self.writer.close()
        return self.buffer.getvalue(), _pa().concat_tables(self.ids)


def finish_earlier(folder: RunFolder, lease: Lease) -> None:
    """Under the lease: delete what earlier compactions left and uncommitted parts.

    The batches valid records replace (markers first, then parts), shards no valid
    record names (a compaction that stopped before its record), records left broken by
    those deletions, and parts whose batch has no marker (as opening a sink does).  The
    lease is checked first: an overtaken compactor deletes nothing."""
    lease.check()
    store = folder.store
    fresh = RunFolder(store, folder.run_id)
    markers = fresh.committed_batches()
    records = fresh.compactions()
    layout = Layout.of(markers, records)
    doomed = {b for b in markers if b in layout.hidden or (is_shard(b) and b not in layout.named)}
    store.delete_many([store.join(MARKERS, b) for b in sorted(doomed)])
    left = markers - doomed
    store.delete_many(
        [
            store.join(kind, name)
            for kind in RECORD_TYPES
            for name in store.names(kind)
            if name.endswith(".tmp") or batch_of(name) not in left
        ]
    )
    broken = Layout.of(left, records).broken
    store.delete_many([store.join(COMPACTED, name) for name in broken])


def count_files(folder: RunFolder) -> int:
    """Files of the run's layout: parts, commit markers and compaction records."""
    store = folder.store
    return sum(len(store.names(name)) for name in (*RECORD_TYPES, MARKERS, COMPACTED))


__all__ = [
    "ROW_GROUP_BYTES",
    "ROW_GROUP_ROWS",
    "SHARD_BYTES",
    "SHARD_ROWS",
    "CompactionResult",
    "Limits",
    "compact_run",
    "count_files",
    "finish_earlier",
]
