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
from pipeline.store.run_folder import MARKERS, RunFolder, batch_of


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


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
        batch = uuid.uuid4().hex
        tables = {kind: to_table(rows, SCHEMAS[kind]) for kind, rows in records.items()}
        if self.store.remote:
            self._write_remote(batch, tables)
            return batch
        written: list[tuple[Path, Path]] = []
        for kind, table in tables.items():
            if table.num_rows == 0:
                continue
            final = Path(self.store.join(kind, f"part-{batch}.parquet"))
            temp = final.with_suffix(".tmp")
            _parquet().write_table(table, temp)
            written.append((temp, final))
        for temp, final in written:
            temp.rename(final)
        Path(self.store.join(MARKERS, batch)).touch()
        return batch

    def _write_remote(self, batch: str, tables: Mapping[str, Any]) -> None:
        # Each part is one PUT of a buffer serialised in memory (a batch is a few trees),
        # so an object is either absent or whole; the marker goes last.
        for kind, table in tables.items():
            if table.num_rows == 0:
                continue
            buffer = io.BytesIO()
            _parquet().write_table(table, buffer)
            self.store.write_bytes(buffer.getvalue(), kind, f"part-{batch}.parquet")
        self.store.write_bytes(b"", MARKERS, batch)
