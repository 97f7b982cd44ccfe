"""Streaming Parquet sink with resume: a crash loses at most the problems in flight.

Layout under the output root (a local folder or an object-store prefix,
`pipeline.store.filesystem`)::

    run=<run_id>/<record type>/part-<batch>.parquet   (pipeline.records.SCHEMAS)
    run=<run_id>/_committed/<batch>                    (one marker per batch)

A batch is committed by creating its marker, after every part of the batch is in
place; readers (resume, report, publish) read only parts whose batch has a marker.
The marker (`pipeline.store.run_folder.Batch`) names the batch's parts, its problem ids
and the lease generation of its writer, the fencing token: right before the marker the
sink checks that its lease is still held (`Lease.check`, raising `LeaseLost`), and
readers count each problem's rows of one generation only (`RunFolder`), so a writer
overtaken while stalled neither commits after it notices nor doubles a problem if its
marker slips in.

* Local folder: parts are written under temporary names and renamed into place
  (atomic), then the marker is created.  A full disk (ENOSPC, EDQUOT) stops the commit
  with `OutputFullError` carrying the whole batch's size on disk, after removing the
  parts of the batch already written: they could never count, and the rerun needs the
  space.
* Object store (s3://, gs://): there is no atomic rename (a "rename" is copy + delete),
  but one PUT is atomic, so each part is written once, straight to its final name, and
  the marker, written last, is what makes the batch visible.  A crash before the
  marker leaves parts that no reader counts.

Opening a sink for writing deletes temporary files and every part whose batch has no
marker (a crash between the first part and the marker), so a rerun with the same run
id redoes exactly those problems and never writes a row twice.  Only the lease holder
(`pipeline.store.lease`) opens a run for writing, so the cleaning never races a live writer
(on a bucket it may race a stalled, overtaken one: a marker that comes after its parts
were cleaned names parts that are gone, and readers ignore such an incomplete batch).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.errors import OutputFullError
from pipeline.records import RECORD_TYPES, SCHEMAS, to_table
from pipeline.store.filesystem import Store
from pipeline.store.lease import Lease
from pipeline.store.run_folder import MARKERS, Batch, RunFolder, batch_of, part_name


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


def serialise(tables: Mapping[str, Any]) -> dict[str, bytes]:
    """Each non-empty table (folder name -> pyarrow Table) as the bytes of its Parquet part.

    Serialised in memory (a batch is a few trees) so that a part is written by one
    call, and the batch's size is known before anything is written.
    """
    parts: dict[str, bytes] = {}
    for kind, table in tables.items():
        if table.num_rows:
            buffer = io.BytesIO()
            _parquet().write_table(table, buffer)
            parts[kind] = buffer.getvalue()
    return parts


def commit_batch(
    store: Store,
    tables: Mapping[str, Any],
    *,
    generation: int = 0,
    fence: Callable[[], None] | None = None,
) -> str:
    """Write `tables` (folder name -> pyarrow Table) as one batch and commit it; returns
    the batch id.  The one crash-safe Parquet writer: the run sink and the evaluation's
    saved searches (`pipeline.evaluation.parts`) both commit through it.

    Locally each part is written under a temporary name and renamed into place; on a
    bucket each part is one PUT to its final name (`Store.write_bytes`).  Either way the
    marker goes last, and a reader counts only parts whose batch has a marker.
    `generation` is the writer's lease generation, written into the marker; `fence` (the
    lease's `check`) runs right before the marker and raises to leave the batch
    uncommitted.
    """
    parts = serialise(tables)
    batch = uuid.uuid4().hex
    written: list[str] = []
    try:
        for kind, data in parts.items():
            store.write_bytes(data, kind, part_name(batch))
            written.append(store.join(kind, part_name(batch)))
        if fence is not None:
            fence()
        store.write_bytes(Batch.of(tables, generation).body(), MARKERS, batch)
    except OutputFullError as exc:
        with contextlib.suppress(OSError):  # best effort: the next sink cleans what is left
            store.delete_many(written)
        # the whole batch on disk: its parts (whole blocks each) and its marker
        needed = sum(store.on_disk(len(data)) for data in parts.values())
        raise OutputFullError(
            f"{store.uri}: {exc.reason} writing {exc.path} (the batch needs {needed:,} bytes)",
            path=exc.path,
            needed_bytes=needed,
            reason=exc.reason,
        ) from exc
    return batch


class ParquetSink:
    """The writer of one run folder; reading goes through the folder (`RunFolder`)."""

    def __init__(self, folder: RunFolder, lease: Lease | None = None) -> None:
        """Open a run folder for writing and clean what a crash left uncommitted.

        A reader must not clean (the folder may belong to a run that is writing now), so
        only the lease holder opens a sink, passing its held `lease`: every commit then
        carries the lease's generation and is fenced by its `check`.  Without a lease
        (tests, tools that write a folder nobody else does) batches are generation 0.
        """
        self.folder = folder
        self.lease = lease
        self.store = folder.store
        for kind in (*RECORD_TYPES, MARKERS):
            self.store.makedirs(kind)
        self.removed_uncommitted = self._clean()

    @property
    def run_dir(self) -> Any:
        return self.folder.location

    def _clean(self) -> int:
        committed = self.folder.committed_batches()
        doomed = [
            self.store.join(kind, name)
            for kind in RECORD_TYPES
            for name in self.store.names(kind)
            if name.endswith(".tmp") or batch_of(name) not in committed
        ]
        self.store.delete_many(doomed)
        return len(doomed)

    def write_batch(self, records: Mapping[str, Iterable[Mapping[str, Any]]]) -> str:
        """Write one batch of rows of any record types atomically; returns the batch id."""
        unknown = set(records) - set(RECORD_TYPES)
        if unknown:
            raise ValueError(f"unknown record types {sorted(unknown)}")
        tables = {kind: to_table(rows, SCHEMAS[kind]) for kind, rows in records.items()}
        if self.lease is None:
            return commit_batch(self.store, tables)
        generation = self.lease.generation
        if generation is None:
            raise ValueError(f"run folder {self.run_dir}: the sink's lease is not held")
        return commit_batch(self.store, tables, generation=generation, fence=self.lease.check)
