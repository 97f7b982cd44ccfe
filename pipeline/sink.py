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
    return [p for p in files if p.name.removeprefix("part-").split(".")[0] in committed]


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
            table = _parquet().read_table(path, columns=["problem_id", "stage"])
            for pid, stage in zip(*(c.to_pylist() for c in table.columns), strict=True):
                if pid is not None and stage == "source":
                    keys.add(str(pid))
        return keys

    def _column_values(self, kind: str, column: str) -> set[str]:
        values: set[str] = set()
        for path in self.parts(kind):
            data = _parquet().read_table(path, columns=[column]).column(0)
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
