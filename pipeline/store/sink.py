"""Streaming Parquet sink with resume: a crash loses at most the problems in flight.

Layout under the output root (a local folder or an object-store prefix,
`pipeline.store.filesystem`)::

    run=<run_id>/<record type>/part-<batch>.parquet   (pipeline.records.SCHEMAS)
    run=<run_id>/_committed/<batch>                    (one empty marker per batch)

A batch is committed by creating its marker, after every part of the batch is in
place; readers (resume, report, publish) read only parts whose batch has a marker.

* Local folder: parts are written under temporary names and renamed into place
  (atomic), then the marker is created.
* Object store (s3://, gs://): there is no atomic rename (a "rename" is copy + delete),
  but one PUT is atomic, so each part is written once, straight to its final name, and
  the marker, written last, is what makes the batch visible.  A crash before the
  marker leaves parts that no reader counts.

Opening a sink for writing deletes temporary files and every part whose batch has no
marker (a crash between the first part and the marker), so a rerun with the same run
id redoes exactly those problems and never writes a row twice.  Only the lease holder
(`pipeline.store.lease`) opens a run for writing, so the cleaning never races a live writer.
"""

from __future__ import annotations

import importlib
import io
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.records import RECORD_TYPES, SCHEMAS, to_table
from pipeline.store.filesystem import Store
from pipeline.store.run_folder import MARKERS, RunFolder, batch_of


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


def commit_batch(store: Store, tables: Mapping[str, Any]) -> str:
    """Write `tables` (folder name -> pyarrow Table) as one batch and commit it; returns
    the batch id.  The one crash-safe Parquet writer: the run sink and the evaluation's
    saved searches (`pipeline.evaluation.parts`) both commit through it.

    Locally each part is written under a temporary name and renamed into place; on a
    bucket each part is one PUT to its final name.  Either way the marker goes last, and
    a reader counts only parts whose batch has a marker.
    """
    batch = uuid.uuid4().hex
    for kind, table in tables.items():
        if table.num_rows == 0:
            continue
        if store.remote:
            # One PUT of a buffer serialised in memory (a batch is a few trees), so an
            # object is either absent or whole.
            buffer = io.BytesIO()
            _parquet().write_table(table, buffer)
            store.write_bytes(buffer.getvalue(), kind, f"part-{batch}.parquet")
        else:
            store.makedirs(kind)
            final = Path(store.join(kind, f"part-{batch}.parquet"))
            temp = final.with_suffix(".tmp")
            _parquet().write_table(table, temp)
            temp.rename(final)
    store.write_bytes(b"", MARKERS, batch)
    return batch


class ParquetSink:
    """The writer of one run folder; reading goes through the folder (`RunFolder`)."""

    def __init__(self, folder: RunFolder) -> None:
        """Open a run folder for writing and clean what a crash left uncommitted.

        A reader must not clean (the folder may belong to a run that is writing now), so
        only the lease holder opens a sink.
        """
        self.folder = folder
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
        return commit_batch(self.store, tables)
