"""Streaming Parquet sink with resume: a crash loses at most the problems in flight.

Layout under the output root::

    run=<run_id>/<record type>/part-<batch>.parquet   (pipeline.records.SCHEMAS)
    run=<run_id>/_committed/<batch>                    (one empty marker per batch)

A batch's files are written under temporary names, renamed into place, and
then committed by creating its marker.  Opening a sink deletes temporary files
and every part whose batch has no marker (a crash between the first rename and
the marker), so a rerun with the same run id redoes exactly those problems and
never writes a row twice.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.records import SCHEMAS, to_table

RECORD_TYPES = ("nodes", "trees", "sft", "dpo", "prm", "kto", "tree_nodes", "errors")
_MARKERS = "_committed"


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


class ParquetSink:
    def __init__(self, output_root: str | Path, run_id: str, *, readonly: bool = False) -> None:
        """Open (and clean) a run folder; `readonly` only reads committed batches.

        A reader must not clean: the folder may belong to a run that is writing now.
        """
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"run_id must be a plain folder name, got {run_id!r}")
        self.run_dir = Path(output_root).expanduser() / f"run={run_id}"
        self.run_id = run_id
        self.readonly = readonly
        self.removed_uncommitted = 0
        if not readonly:
            for kind in (*RECORD_TYPES, _MARKERS):
                (self.run_dir / kind).mkdir(parents=True, exist_ok=True)
            self.removed_uncommitted = self._clean()

    def _committed(self) -> set[str]:
        markers = self.run_dir / _MARKERS
        return {p.name for p in markers.iterdir()} if markers.is_dir() else set()

    def _clean(self) -> int:
        committed = self._committed()
        removed = 0
        for kind in RECORD_TYPES:
            for path in (self.run_dir / kind).iterdir():
                batch = path.name.removeprefix("part-").split(".")[0]
                if path.suffix == ".tmp" or batch not in committed:
                    path.unlink()
                    removed += 1
        return removed

    def parts(self, kind: str) -> list[Path]:
        """Committed part files of one record type."""
        committed = self._committed()
        return sorted(
            p
            for p in (self.run_dir / kind).glob("part-*.parquet")
            if p.name.removeprefix("part-").split(".")[0] in committed
        )

    def done_problem_ids(self) -> set[str]:
        """Problems already written: a tree row or an error row was committed for them."""
        done: set[str] = set()
        for kind in ("trees", "errors"):
            for path in self.parts(kind):
                column = _parquet().read_table(path, columns=["problem_id"]).column(0)
                done.update(str(v) for v in column.to_pylist() if v is not None)
        return done

    def write_batch(self, records: Mapping[str, Iterable[Mapping[str, Any]]]) -> str:
        """Write one batch of rows of any record types atomically; returns the batch id."""
        if self.readonly:
            raise RuntimeError(f"{self.run_dir} was opened read-only")
        unknown = set(records) - set(RECORD_TYPES)
        if unknown:
            raise ValueError(f"unknown record types {sorted(unknown)}")
        batch = uuid.uuid4().hex
        tables = {kind: to_table(rows, SCHEMAS[kind]) for kind, rows in records.items()}
        written: list[tuple[Path, Path]] = []
        for kind, table in tables.items():
            if table.num_rows == 0:
                continue
            final = self.run_dir / kind / f"part-{batch}.parquet"
            temp = final.with_suffix(".tmp")
            _parquet().write_table(table, temp)
            written.append((temp, final))
        for temp, final in written:
            temp.rename(final)
        (self.run_dir / _MARKERS / batch).touch()
        return batch

    def read(self, kind: str) -> Any:
        """All committed rows of one record type as a pyarrow Table (schema kept when empty)."""
        parts = self.parts(kind)
        if not parts:
            return SCHEMAS[kind].empty_table()
        pa = importlib.import_module("pyarrow")
        return pa.concat_tables([_parquet().read_table(p, schema=SCHEMAS[kind]) for p in parts])
