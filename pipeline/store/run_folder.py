"""One run's folder, `<output_root>/run=<id>`: the only place that knows its layout.

    run=<id>/run.json                          the manifest (config, secrets redacted; summary)
    run=<id>/<record type>/part-<batch>.parquet   one part per record type per batch
    run=<id>/_committed/<batch>                one empty marker per committed batch
    run=<id>/_lease, _lease.json | _lease/     the writer lease (`pipeline.store.lease`)
    run=<id>/report.md, report.json, *.png     the run report (`pipeline.report`)

A `RunFolder` is opened once per run (`RunFolder.open(output_root, run_id)`, or
`RunFolder.at(".../run=<id>")` for a folder named on a command line) and handed on: the
sink writes through it, and the resume filter, summary, report and publisher read through
it.  It owns one filesystem client (`pipeline.store.filesystem.Store`), the rule for which
parts count (committed batches only), the manifest, the lease and local copies of a
bucket's run.  Ray workers get (output_root, run_id) and open their own: a filesystem
client is per process.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.records import RECORD_TYPES, SCHEMAS
from pipeline.store.filesystem import Store, is_remote, open_store
from pipeline.store.lease import FlockLease, Lease
from pipeline.store.object_lease import ObjectLease

RUN_PREFIX = "run="
MARKERS = "_committed"
MANIFEST = "run.json"


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


def batch_of(part_name: str) -> str:
    """The batch id in a part's file name (`part-<batch>.parquet` -> `<batch>`)."""
    return part_name.removeprefix("part-").split(".")[0]


def check_run_id(run_id: str) -> str:
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ValueError(f"run_id must be a plain folder name, got {run_id!r}")
    return run_id


@dataclass(frozen=True)
class RunFolder:
    """`<output_root>/run=<run_id>` on a local disk or a bucket (see the module docstring)."""

    store: Store
    run_id: str

    @classmethod
    def open(cls, output_root: str | Path, run_id: str) -> RunFolder:
        """The folder of `run_id` under `output_root` (a path or s3:// / gs:// URI)."""
        return cls(open_store(output_root).child(RUN_PREFIX + check_run_id(run_id)), run_id)

    @classmethod
    def at(cls, run_dir: str | Path) -> RunFolder:
        """The folder named by a `.../run=<id>` path or URI; FileNotFoundError otherwise."""
        remote = is_remote(str(run_dir))
        name = str(run_dir).rstrip("/").rsplit("/", 1)[-1]
        folder = None
        if name.startswith(RUN_PREFIX) and name != RUN_PREFIX:
            parent: str | Path = (
                str(run_dir).rstrip("/").rsplit("/", 1)[0] if remote else Path(run_dir).parent
            )
            folder = cls.open(parent, name.removeprefix(RUN_PREFIX))
        if folder is None or not folder.store.is_dir():
            raise FileNotFoundError(f"{run_dir} is not a run folder (expected .../run=<id>)")
        return folder

    @property
    def location(self) -> Any:
        """What messages and summaries print: a `Path` locally, the URI on a bucket."""
        return self.store.display()

    @property
    def remote(self) -> bool:
        return self.store.remote

    # -- committed parts ----------------------------------------------------------------
    def committed_batches(self) -> set[str]:
        return set(self.store.names(MARKERS))

    def parts(self, kind: str) -> list[Any]:
        """Part files of one record type whose batch is committed (Paths locally, bucket
        paths remotely), sorted.

        A local folder with no marker folder at all was not written by the sink (a
        hand-made sft/dpo folder): every Parquet file in it counts.
        """
        names = [n for n in self.store.names(kind) if n.endswith(".parquet")]
        if self.remote or self.store.exists(MARKERS):
            committed = self.committed_batches()
            names = [n for n in names if n.startswith("part-") and batch_of(n) in committed]
        if not self.remote:
            return sorted(Path(self.store.join(kind, n)) for n in names)
        return sorted(self.store.join(kind, n) for n in names)

    def read_part(self, part: Any, **kwargs: Any) -> Any:
        return _parquet().read_table(part, filesystem=self.store.fs, **kwargs)

    def read(self, kind: str) -> Any:
        """All committed rows of one record type as a pyarrow Table (schema kept when empty)."""
        parts = self.parts(kind)
        if not parts:
            return SCHEMAS[kind].empty_table()
        pa = importlib.import_module("pyarrow")
        return pa.concat_tables([self.read_part(p, schema=SCHEMAS[kind]) for p in parts])

    def count(self, kind: str) -> int:
        """Committed rows of one record type, from the Parquet footers (no data read)."""
        return sum(
            _parquet().read_metadata(part, filesystem=self.store.fs).num_rows
            for part in self.parts(kind)
        )

    def counts(self) -> dict[str, int]:
        """Committed rows of every record type."""
        return {kind: self.count(kind) for kind in RECORD_TYPES}

    def disk_usage(self) -> tuple[int, int]:
        """(bytes the committed parts take on a local disk, trees committed): what one
        more tree will need, on average.  (0, 0) on a bucket, which never fills up."""
        if self.remote:
            return 0, 0
        used = sum(
            Path(part).stat().st_blocks * 512 for kind in RECORD_TYPES for part in self.parts(kind)
        )
        return used, self.count("trees")

    # -- what is done (the resume rule reads these: `pipeline.store.resume`) --------------
    def searched_problem_ids(self) -> set[str]:
        """Problems whose search tree is committed: only a tree row marks a problem done."""
        values: set[str] = set()
        for path in self.parts("trees"):
            data = self.read_part(path, columns=["problem_id"]).column(0)
            values.update(str(v) for v in data.to_pylist() if v is not None)
        return values

    def final_error_keys(self) -> set[str]:
        """Keys of committed source errors: a bad row stays bad, so it is written once.

        Errors of other stages (a failed search, an engine outage) are retried by the
        next run, and an error row never stands for another row's problem.
        """
        keys: set[str] = set()
        for path in self.parts("errors"):
            table = self.read_part(path, columns=["problem_id", "stage"])
            for pid, stage in zip(*(c.to_pylist() for c in table.columns), strict=True):
                if pid is not None and stage == "source":
                    keys.add(str(pid))
        return keys

    def done_problem_ids(self) -> set[str]:
        """Keys never to redo: searched problems and source error rows (bad rows, duplicates)."""
        return self.searched_problem_ids() | self.final_error_keys()

    # -- manifest -----------------------------------------------------------------------
    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.store.write_text(json.dumps(manifest, indent=2) + "\n", MANIFEST)

    def read_manifest(self) -> dict[str, Any]:
        """`run.json` (empty when the folder predates manifests or is foreign)."""
        if not self.store.exists(MANIFEST):
            return {}
        try:
            data = json.loads(self.store.read_text(MANIFEST))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.store.join(MANIFEST)}: not valid JSON ({exc})") from None
        return data if isinstance(data, dict) else {}

    # -- writing --------------------------------------------------------------------------
    def lease(self) -> Lease:
        """The writer lease: `flock` on a local folder, a conditional-put lease object on a
        bucket.  Hold it before opening a `ParquetSink`: that cleans uncommitted parts."""
        if self.remote:
            return ObjectLease(self.store)
        return FlockLease(self.store.local_path)

    # -- local copies -------------------------------------------------------------------
    @contextlib.contextmanager
    def local_copy(self, *, write_back: tuple[str, ...] = ()) -> Iterator[Path]:
        """The folder as a local `Path`: itself when local, else a temporary copy.

        The copy holds run.json, the commit markers and only the committed parts, so the
        Path-based readers (summary, report, publish) see exactly what a reader of the
        bucket would.  Files named in `write_back` (suffix match, e.g. "report.md",
        ".png") that exist after the block are uploaded back to the run folder.  Cost: the
        whole committed run is downloaded once (publishing uploads all of it anyway).
        """
        if not self.remote:
            yield self.store.local_path
            return
        store = self.store
        if not store.is_dir():
            raise FileNotFoundError(f"{store.uri} is not a run folder (nothing under that prefix)")
        with tempfile.TemporaryDirectory(prefix="bgmcts-run-") as temp:
            local = Path(temp) / store.name
            (local / MARKERS).mkdir(parents=True)
            for batch in self.committed_batches():
                (local / MARKERS / batch).touch()
            for name in store.names():
                if name in RECORD_TYPES:
                    (local / name).mkdir()
                    for part in self.parts(name):
                        part_name = str(part).rsplit("/", 1)[-1]
                        (local / name / part_name).write_bytes(store.read_bytes(name, part_name))
                elif name.endswith((".json", ".md", ".png")) and not name.startswith("_"):
                    (local / name).write_bytes(store.read_bytes(name))
            yield local
            for path in sorted(local.iterdir()):
                if path.is_file() and path.name.endswith(write_back):
                    store.write_bytes(path.read_bytes(), path.name)
            shutil.rmtree(local, ignore_errors=True)


@contextlib.contextmanager
def local_run_dir(run_dir: str | Path, *, write_back: tuple[str, ...] = ()) -> Iterator[Path]:
    """`RunFolder.at(run_dir).local_copy(...)`, for a folder named on a command line; a
    local folder need not be named run=<id> (publishing hand-made sft/dpo folders)."""
    if not is_remote(str(run_dir)):
        yield Path(run_dir)
        return
    with RunFolder.at(run_dir).local_copy(write_back=write_back) as local:
        yield local


__all__ = [
    "MANIFEST",
    "MARKERS",
    "RUN_PREFIX",
    "RunFolder",
    "batch_of",
    "check_run_id",
    "local_run_dir",
]
