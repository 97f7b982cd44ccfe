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

from pipeline.records import SCHEMAS, to_table
from pipeline.store.filesystem import Store, open_store

RECORD_TYPES = ("nodes", "trees", "sft", "dpo", "prm", "kto", "tree_nodes", "errors")
MARKERS = "_committed"
_MARKERS = MARKERS


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


def batch_of(part_name: str) -> str:
    """The batch id in a part's file name (`part-<batch>.parquet` -> `<batch>`)."""
    return part_name.removeprefix("part-").split(".")[0]


def committed_parts(run_dir: Path, kind: str) -> list[Path]:
    """The Parquet files of `kind` whose batch is committed (publishing reads only these).

    A folder with no marker folder at all was not written by this sink (hand-made
    sft/dpo folders): every Parquet file in it counts.
    """
    markers = run_dir / _MARKERS
    files = sorted((run_dir / kind).glob("*.parquet"))
    if not markers.is_dir():
        return files
    committed = {p.name for p in markers.iterdir()}
    return [p for p in files if batch_of(p.name) in committed]


class ParquetSink:
    def __init__(self, output_root: str | Path, run_id: str, *, readonly: bool = False) -> None:
        """Open (and clean) a run folder; `readonly` only reads committed batches.

        A reader must not clean: the folder may belong to a run that is writing now.
        """
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"run_id must be a plain folder name, got {run_id!r}")
        self.store: Store = open_store(output_root).child(f"run={run_id}")
        # A Path for a local folder (as always), the URI string for an object store.
        self.run_dir: Any = self.store.display()
        self.run_id = run_id
        self.readonly = readonly
        self.removed_uncommitted = 0
        if not readonly:
            for kind in (*RECORD_TYPES, _MARKERS):
                self.store.makedirs(kind)
            self.removed_uncommitted = self._clean()

    def _committed(self) -> set[str]:
        return set(self.store.names(_MARKERS))

    def _clean(self) -> int:
        committed = self._committed()
        doomed = [
            self.store.join(kind, name)
            for kind in RECORD_TYPES
            for name in self.store.names(kind)
            if name.endswith(".tmp") or batch_of(name) not in committed
        ]
        self.store.delete_many(doomed)
        return len(doomed)

    def parts(self, kind: str) -> list[Any]:
        """Committed part files of one record type (Paths locally, bucket paths remotely)."""
        committed = self._committed()
        names = [
            n
            for n in self.store.names(kind)
            if n.startswith("part-") and n.endswith(".parquet") and batch_of(n) in committed
        ]
        if not self.store.remote:
            return sorted(Path(self.store.join(kind, n)) for n in names)
        return sorted(self.store.join(kind, n) for n in names)

    def _read_table(self, part: Any, **kwargs: Any) -> Any:
        return _parquet().read_table(part, filesystem=self.store.fs, **kwargs)

    def done_problem_ids(self) -> set[str]:
        """Keys never to redo: searched problems and source error rows (bad rows, duplicates)."""
        return self.searched_problem_ids() | self.final_error_keys()

    def searched_problem_ids(self) -> set[str]:
        """Problems whose search tree is committed: only a tree row marks a problem done."""
        return self._column_values("trees", "problem_id")

    def final_error_keys(self) -> set[str]:
        """Keys of committed source errors: a bad row stays bad, so it is written once.

        Errors of other stages (a failed search, an engine outage) are retried by the
        next run, and an error row never stands for another row's problem.
        """
        keys: set[str] = set()
        for path in self.parts("errors"):
            table = self._read_table(path, columns=["problem_id", "stage"])
            for pid, stage in zip(*(c.to_pylist() for c in table.columns), strict=True):
                if pid is not None and stage == "source":
                    keys.add(str(pid))
        return keys

    def _column_values(self, kind: str, column: str) -> set[str]:
        values: set[str] = set()
        for path in self.parts(kind):
            data = self._read_table(path, columns=[column]).column(0)
            values.update(str(v) for v in data.to_pylist() if v is not None)
        return values

    def write_batch(self, records: Mapping[str, Iterable[Mapping[str, Any]]]) -> str:
        """Write one batch of rows of any record types atomically; returns the batch id."""
        if self.readonly:
            raise RuntimeError(f"{self.run_dir} was opened read-only")
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
        Path(self.store.join(_MARKERS, batch)).touch()
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
        self.store.write_bytes(b"", _MARKERS, batch)

    def count(self, kind: str) -> int:
        """Committed rows of one record type, from the Parquet footers (no data read)."""
        return sum(
            _parquet().read_metadata(part, filesystem=self.store.fs).num_rows
            for part in self.parts(kind)
        )

    def read(self, kind: str) -> Any:
        """All committed rows of one record type as a pyarrow Table (schema kept when empty)."""
        parts = self.parts(kind)
        if not parts:
            return SCHEMAS[kind].empty_table()
        pa = importlib.import_module("pyarrow")
        return pa.concat_tables([self._read_table(p, schema=SCHEMAS[kind]) for p in parts])
