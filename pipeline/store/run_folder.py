"""One run's folder, `<output_root>/run=<id>`: the only place that knows its layout.

    run=<id>/run.json                          the manifest (config, secrets redacted; summary)
    run=<id>/<record type>/part-<batch>.parquet   one part per record type per batch
    run=<id>/_committed/<batch>                one marker per committed batch (JSON:
                                               lease generation, parts, problem ids)
    run=<id>/<record type>/part-compact-<c>-<n>.parquet, _committed/compact-<c>-<n>
                                               a compaction's shards: batches too
    run=<id>/_compacted/<c>.json               a compaction record: its shards and the
                                               batches they replace
    run=<id>/_lease, _lease.json | _lease/     the writer lease (`pipeline.store.lease`)
    run=<id>/report.md, report.json, *.png     the run report (`pipeline.report`)

A `RunFolder` is opened once per run (`RunFolder.open(output_root, run_id)`, or
`RunFolder.at(".../run=<id>")` for a folder named on a command line) and handed on: the
sink writes through it, and the resume filter, summary, report and publisher read through
it.  It owns one filesystem client (`pipeline.store.filesystem.Store`), the rule for which
parts count (committed batches only, one generation per problem), the manifest, the
lease and local copies of a bucket's run.  Ray workers get (output_root, run_id) and open
their own: a filesystem client is per process.

What counts (the fencing rule, `Counted`): a batch counts once its marker exists and
every part its marker names is there.  The marker carries the lease generation of the
writer that committed it (`pipeline.store.lease`).  For each problem, only the rows of one
generation count: the newest generation that *finished* it (committed its tree, or its
source-error row).  So a problem is counted once even when two holders both committed it
(a holder that stalled past its lease's TTL between its last check and its marker, while
the next holder searched the same problem): the newer holder's rows win, the stale
holder's late batch is ignored, whatever order the two arrived in.  A problem never
finished keeps every row (each failed attempt's error row).  Markers written before
generations existed are empty: generation 0, read as before.

Compaction (`pipeline.store.compaction`) merges a finished run's batches into a few
shard batches per record type holding only the rows that count, each shard of one
generation.  A shard counts once a compaction record names it, and a batch a record
replaces is hidden (`pipeline.store.compacted`), so the rule above runs on the batches
readers see (`layout`): the old ones, or the shards and whatever was committed since.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pipeline.errors import InputError
from pipeline.records import RECORD_TYPES, SCHEMAS
from pipeline.store.compacted import COMPACTED, Compaction, Layout
from pipeline.store.filesystem import Store, is_remote, open_store
from pipeline.store.lease import FlockLease, Lease
from pipeline.store.object_lease import ObjectLease
from pipeline.store.parts import UnreadablePart, cast_failure, part_label, reading

RUN_PREFIX = "run="
MARKERS = "_committed"
MANIFEST = "run.json"

_Parsed = TypeVar("_Parsed")  # what a file of a folder read once parses to


def _parquet() -> Any:
    return importlib.import_module("pyarrow.parquet")


def pa_errors() -> tuple[type[BaseException], ...]:
    """What pyarrow raises for a column it cannot read as the type asked for."""
    pa = importlib.import_module("pyarrow")
    return (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError)


def batch_of(name: str) -> str:
    """The batch id in a part's file name or path (`part-<batch>.parquet` -> `<batch>`)."""
    return str(name).rsplit("/", 1)[-1].removeprefix("part-").split(".")[0]


def part_name(batch: str) -> str:
    return f"part-{batch}.parquet"


# A problem's second tree (the night allocator, `pipeline.run.allocation`) is its own key in
# the markers: the probe and the second tree may be committed by two generations (a night
# killed between them), and each must count, so they are finished apart.  A batch holds
# one tree's rows (a compaction shard: the rows of second trees only, or of none).
SECOND_TREE = "\x1fsecond"


def tree_key(problem_id: str, second: bool) -> str:
    """The key a batch marker gives a problem's rows: the problem id, or its second tree's."""
    return problem_id + SECOND_TREE if second else problem_id


def second_trees(trees: Any) -> set[str]:
    """Problems whose row in a `trees` table is a second tree (`trees.tree`)."""
    if trees.num_rows == 0 or "tree" not in trees.column_names:
        return set()
    pairs = zip(_ids(trees), _ids(trees, "tree"), strict=True)
    return {str(pid) for pid, tree in pairs if pid is not None and tree == "second"}


def drop_rows(table: Any, dropped: frozenset[str]) -> Any:
    """`table` without the rows of the problem ids in `dropped` (rows that do not count;
    a second tree's key drops its problem's rows: its batch holds that tree only)."""
    if not dropped:
        return table
    pa = importlib.import_module("pyarrow")
    pc = importlib.import_module("pyarrow.compute")
    ids = sorted({key.removesuffix(SECOND_TREE) for key in dropped})
    lost = pc.is_in(table.column("problem_id"), value_set=pa.array(ids))
    return table.filter(pc.invert(lost))


def _ids(table: Any, column: str = "problem_id") -> list[Any]:
    if table.num_rows == 0 or column not in table.column_names:
        return []
    ids: list[Any] = table.column(column).to_pylist()
    return ids


def tree_keys(trees: Any) -> set[str]:
    """Problems a `trees` table finishes: only a tree row marks a problem done."""
    return {str(v) for v in _ids(trees) if v is not None}


def source_error_keys(errors: Any) -> set[str]:
    """Keys an `errors` table finishes: source errors (a bad row stays bad, so it is written
    once).  Errors of other stages (a failed search, an engine outage) are retried by the
    next run, and an error row never stands for another row's problem."""
    pairs = zip(_ids(errors), _ids(errors, "stage"), strict=True)
    return {str(pid) for pid, stage in pairs if pid is not None and stage == "source"}


@dataclass(frozen=True)
class Batch:
    """What a commit marker says of its batch: the lease generation of its writer (the
    fencing token), its parts (record type -> rows), every problem id with a row in it and
    the ids it finishes (`tree_keys`, `source_error_keys`).  A marker written before
    generations existed is empty: `parts` is None (whatever parts exist count) and the
    generation 0."""

    generation: int = 0
    parts: Mapping[str, int] | None = None
    problems: frozenset[str] = frozenset()
    done: frozenset[str] = frozenset()

    @classmethod
    def of(cls, tables: Mapping[str, Any], generation: int, *, second: bool = False) -> Batch:
        """The marker of a batch of (non-empty) pyarrow tables, keyed by record type.  A
        batch whose `trees` row is a second tree, or any batch with `second` (a compaction
        shard of second trees' rows), keys its problems by `tree_key`."""
        tables = {kind: t for kind, t in tables.items() if t.num_rows}
        seconds = second_trees(tables["trees"]) if "trees" in tables else set()

        def key(pid: str) -> str:
            return tree_key(pid, second or pid in seconds)

        problems = {key(str(v)) for t in tables.values() for v in _ids(t) if v is not None}
        done = set()
        if "trees" in tables:
            done |= {key(pid) for pid in tree_keys(tables["trees"])}
        if "errors" in tables:
            done |= source_error_keys(tables["errors"])
        return cls(
            generation,
            {kind: t.num_rows for kind, t in tables.items()},
            frozenset(problems),
            frozenset(done),
        )

    @property
    def second(self) -> bool:
        """Does this batch hold a second tree's rows (its keys say so)?"""
        return any(key.endswith(SECOND_TREE) for key in self.problems)

    @classmethod
    def parse(cls, body: bytes) -> Batch:
        """A marker's body; an empty or unreadable one is a marker from before fencing."""
        try:
            data = json.loads(body) if body.strip() else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("parts"), dict):
            return cls()
        return cls(
            int(data.get("generation") or 0),
            {str(k): int(v) for k, v in data["parts"].items()},
            frozenset(map(str, data.get("problems") or ())),
            frozenset(map(str, data.get("done") or ())),
        )

    def body(self) -> bytes:
        if self.parts is None:
            return b""
        data = {
            "generation": self.generation,
            "parts": dict(self.parts),
            "problems": sorted(self.problems),
            "done": sorted(self.done),
        }
        return (json.dumps(data) + "\n").encode()


@dataclass(frozen=True)
class Counted:
    """The batches readers count, and in each the problem ids whose rows do not count."""

    dropped: Mapping[str, frozenset[str]]  # counted batch -> ids whose rows in it are ignored
    names: Mapping[str, tuple[str, ...]]  # record type -> part names of counted batches
    complete: frozenset[str] = frozenset()  # batches with every part: counted or superseded

    @classmethod
    def of(cls, batches: Mapping[str, Batch], present: Mapping[str, set[str]]) -> Counted:
        """The fencing rule (module docstring) over every marker and the parts present."""
        complete = {
            batch: info
            for batch, info in batches.items()
            if info.parts is None
            or all(part_name(batch) in present.get(kind, ()) for kind in info.parts)
        }
        finished: dict[str, int] = {}  # problem -> the newest generation that finished it
        for info in complete.values():
            for key in info.done:
                finished[key] = max(finished.get(key, info.generation), info.generation)
        # a marker from before fencing (generation 0) names no problems: any of its rows
        # may belong to a problem a later generation finished
        legacy = frozenset(k for k, g in finished.items() if g != 0)
        dropped: dict[str, frozenset[str]] = {}
        for batch, info in complete.items():
            if info.parts is None:
                dropped[batch] = legacy
                continue
            lost = frozenset(
                k for k in info.problems if finished.get(k, info.generation) != info.generation
            )
            if not (info.problems and lost == info.problems):  # else nothing in it counts
                dropped[batch] = lost
        names = {
            kind: tuple(sorted(n for n in found if batch_of(n) in dropped))
            for kind, found in present.items()
        }
        return cls(dropped, names, frozenset(complete))


def check_run_id(run_id: str) -> str:
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ValueError(f"run_id must be a plain folder name, got {run_id!r}")
    return run_id


@dataclass(frozen=True)
class RunFolder:
    """`<output_root>/run=<run_id>` on a local disk or a bucket (see the module docstring)."""

    store: Store
    run_id: str
    # markers read so far and the last `Counted` (a cache: never part of equality)
    _memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
        """Every batch with a marker (complete or not, counted or not).  A local marker
        being written is a temporary file next to it for a moment: not a marker yet."""
        return {n for n in self.store.names(MARKERS) if not n.endswith(".tmp")}

    def _marked(self) -> bool:
        """Does the folder hold commit markers?  A local folder with no marker folder at
        all was not written by the sink (a hand-made sft/dpo folder): all of it counts."""
        return self.remote or self.store.exists(MARKERS)

    def compactions(self) -> dict[str, Compaction]:
        """Every compaction record (file name -> record; `pipeline.store.compacted`), read
        once and remembered: a record never changes (it is created whole, or deleted)."""
        names = {n for n in self.store.names(COMPACTED) if n.endswith(".json")}
        known = self._read_once(COMPACTED, names, Compaction.parse)
        for name in sorted(names):
            if known[name] is None:
                known[name] = self._reread_record(name)
        return {name: r for name in sorted(names) if (r := known[name]) is not None}

    def _reread_record(self, name: str) -> Compaction | None:
        """A record that did not parse, read again.  Where the filesystem has no hard
        links a record is written in place, so it may have been read half written; one
        deleted since (a later compaction's) is None.  One that stays unreadable is
        refused: read as nothing, it would hide the shards it names from every reader,
        and the run would read as missing their rows without a word."""
        for _ in range(3):
            time.sleep(0.05)
            try:
                body = self.store.read_bytes(COMPACTED, name)
            except FileNotFoundError:
                return None
            record = Compaction.parse(body)
            if record is not None:
                return record
        raise UnreadablePart(
            f"{self.location}: {COMPACTED}/{name} is no compaction record (a JSON object "
            "naming its shards and the batches they replace): readers would not see the rows "
            "of its shards; restore it from a copy of the run",
            path=self.store.join(COMPACTED, name),
        )

    def layout(self) -> Layout:
        """Which committed batches readers see (`Layout`): compactions applied.

        Markers are listed before records: a record is created after its shards' markers,
        so a record seen with a shard's marker missing from the listing is either broken
        (its compactor was overtaken, or a later compaction is deleting it) or created
        since the markers were listed; the markers are listed once more to tell."""
        layout = Layout.of(self.committed_batches(), self.compactions())
        if layout.broken:
            layout = Layout.of(self.committed_batches(), self.compactions())
        return layout

    def batches(self) -> dict[str, Batch]:
        """Every committed batch readers see (`layout`) and what its marker says (markers
        are read once and remembered: a marker never changes)."""
        return self._batches(self.layout())

    def _batches(self, layout: Layout) -> dict[str, Batch]:
        names = layout.visible
        known = self._read_once(MARKERS, names, Batch.parse)
        return {batch: known[batch] for batch in names}

    def _read_once(
        self, folder: str, names: Iterable[str], parse: Callable[[bytes], _Parsed]
    ) -> dict[str, _Parsed]:
        """`parse` of each of the files `names` in `folder`, by name; a file read before
        is not read again (markers and compaction records never change once written), and
        the new ones are read in one `read_many`."""
        known: dict[str, _Parsed] = self._memo.setdefault(folder, {})
        new = sorted(set(names) - known.keys())
        if new:
            paths = {name: self.store.join(folder, name) for name in new}
            bodies = self.store.read_many(list(paths.values()))
            for name, path in paths.items():
                try:
                    known[name] = parse(bodies[path])
                except (TypeError, ValueError, AttributeError) as exc:  # a field of a wrong type
                    raise UnreadablePart(
                        f"{self.location}: {folder}/{name} cannot be read ({exc})", path=path
                    ) from None
        return known

    def missing_parts(self) -> dict[str, list[str]]:
        """Part names a commit marker names that are not there, by record type (sorted).

        The sink writes a batch's parts before its marker, and only a compaction deletes
        committed parts, of batches its record has replaced (hidden from readers), so a
        missing one means the folder was damaged or copied in part.  Readers then skip the
        whole batch (`Counted`), silently: a checker asks here first.  A marker from before
        fencing names no parts, so it misses none.  A compaction that switched while the
        folder was listed is seen by listing its records again (as `counted` does)."""
        for _ in range(3):
            layout = self.layout()
            batches = self._batches(layout)
            kinds = sorted({kind for b in batches.values() for kind in b.parts or ()})
            present = {kind: set(self.store.names(kind)) for kind in kinds}
            missing: dict[str, list[str]] = {}
            for batch, info in sorted(batches.items()):
                for kind in info.parts or ():
                    if part_name(batch) not in present[kind]:
                        missing.setdefault(kind, []).append(part_name(batch))
            if not missing or set(self.compactions()) == layout.records:
                break
        return missing

    def counted(self) -> Counted:
        """What readers count now (`Counted`); recomputed only when a marker came or went.

        A compaction deletes the batches it replaced after its record: when a batch seen
        is missing a part, the records are listed again, and a new one means the listings
        straddled that switch (they are taken again, so no reader counts half a run)."""
        for _ in range(3):
            layout = self.layout()
            batches = self._batches(layout)
            key = frozenset(batches)
            cached = self._memo.get("counted")
            if cached is not None and cached[0] == key:
                return cached[1]  # type: ignore[no-any-return]
            kinds = set(RECORD_TYPES).union(*(b.parts or () for b in batches.values()))
            present = {kind: set(self.store.names(kind)) for kind in sorted(kinds)}
            counted = Counted.of(batches, present)
            if counted.complete == key or set(self.compactions()) == layout.records:
                break
        self._memo["counted"] = (key, counted)
        return counted

    def _rule(self) -> Counted | None:
        """`counted()`, or None for a folder without markers (everything counts)."""
        return self.counted() if self._marked() else None

    def parts(self, kind: str) -> list[Any]:
        """Part files of one record type that count (Paths locally, bucket paths remotely),
        sorted: committed, complete and not wholly superseded (`Counted`).  A part may
        still hold rows that do not count: read parts with `tables` (or `read_part`),
        which drop them.

        A local folder with no marker folder at all was not written by the sink (a
        hand-made sft/dpo folder): every Parquet file in it counts.
        """
        return self._parts(kind, self._rule())

    def _parts(self, kind: str, rule: Counted | None) -> list[Any]:
        if rule is not None:
            names: Iterable[str] = rule.names.get(kind, ())
        else:
            names = [n for n in self.store.names(kind) if n.endswith(".parquet")]
        if not self.remote:
            return sorted(Path(self.store.join(kind, n)) for n in names)
        return sorted(self.store.join(kind, n) for n in names)

    @staticmethod
    def _dropped(part: Any, rule: Counted | None) -> frozenset[str]:
        return frozenset() if rule is None else rule.dropped.get(batch_of(part), frozenset())

    def _read(self, part: Any, dropped: frozenset[str], **kwargs: Any) -> Any:
        """One part's rows that count; a part that cannot be read, or not as the
        `schema` asked for, is an `UnreadablePart` naming it (and the column)."""
        schema = kwargs.get("schema")
        with reading(part, self.location):
            try:
                return self._read_table(part, dropped, **kwargs)
            except pa_errors() as exc:
                if schema is None:
                    raise
                # pyarrow says "Unsupported cast from string to list": which column?
                stored = _parquet().read_schema(part, filesystem=self.store.fs)
                failure = cast_failure(part, stored, schema, exc, self.location)
                if failure is None:
                    raise
                raise failure from exc

    def _read_table(self, part: Any, dropped: frozenset[str], **kwargs: Any) -> Any:
        if not dropped:
            return _parquet().read_table(part, filesystem=self.store.fs, **kwargs)
        columns = kwargs.pop("columns", None)
        if columns is not None:
            kwargs["columns"] = list(dict.fromkeys([*columns, "problem_id"]))
        table = drop_rows(_parquet().read_table(part, filesystem=self.store.fs, **kwargs), dropped)
        return table if columns is None else table.select(columns)

    def read_part(self, part: Any, **kwargs: Any) -> Any:
        """One part as a pyarrow Table, without the rows that do not count."""
        return self._read(part, self._dropped(part, self._rule()), **kwargs)

    def tables(self, kind: str, **kwargs: Any) -> Iterator[Any]:
        """Each counted part of one record type as a pyarrow Table of the rows that count
        (`kwargs` go to `pyarrow.parquet.read_table`: columns, schema)."""
        rule = self._rule()
        for part in self._parts(kind, rule):
            yield self._read(part, self._dropped(part, rule), **kwargs)

    def read(self, kind: str) -> Any:
        """All counted rows of one record type as a pyarrow Table (schema kept when empty).

        Every column is of its declared type, and a column a part holds has no null where
        the schema says never: the readers of whole tables (summary, report, nightly) take
        the values as they are.  A part that breaks either is an `UnreadablePart` naming
        the table, the part and the column.  A column an older part lacks reads as nulls."""
        schema = SCHEMAS[kind]
        rule = self._rule()
        tables = []
        for part in self._parts(kind, rule):
            table = self._read(part, self._dropped(part, rule), schema=schema)
            self._refuse_nulls(part, table, schema)
            tables.append(table)
        if not tables:
            return schema.empty_table()
        return importlib.import_module("pyarrow").concat_tables(tables)

    def _refuse_nulls(self, part: Any, table: Any, schema: Any) -> None:
        """`UnreadablePart` when a column `part` holds has a null the schema forbids (a
        column the part lacks, from an older schema, is read as nulls and is no fault)."""
        suspect = [f.name for f in schema if not f.nullable and table.column(f.name).null_count > 0]
        if not suspect:
            return
        with reading(part, self.location):
            stored = set(_parquet().read_schema(part, filesystem=self.store.fs).names)
        named = [
            f"column {name} holds {table.column(name).null_count} null(s) where the schema "
            "says never"
            for name in suspect
            if name in stored
        ]
        if named:
            raise UnreadablePart(
                f"{self.location}: {part_label(part)}: {'; '.join(named)}", path=str(part)
            )

    def count(self, kind: str) -> int:
        """Counted rows of one record type, from the Parquet footers (no data read) unless
        a part holds rows that do not count."""
        rule = self._rule()
        total = 0
        for part in self._parts(kind, rule):
            if dropped := self._dropped(part, rule):
                total += self._read(part, dropped, columns=["problem_id"]).num_rows
            else:
                with reading(part, self.location):
                    meta = _parquet().read_metadata(part, filesystem=self.store.fs)
                total += meta.num_rows
        return total

    def counted_files(self, kind: str, into: Path) -> list[Path]:
        """A local folder's counted parts of one record type as files holding exactly the
        rows that count: a part with rows that do not is written filtered under `into`
        (for publishing, which uploads files)."""
        rule = self._rule()
        files = []
        for part in self._parts(kind, rule):
            if dropped := self._dropped(part, rule):
                target = into / kind / Path(part).name
                target.parent.mkdir(parents=True, exist_ok=True)
                _parquet().write_table(self._read(part, dropped), target)
                part = target
            files.append(Path(part))
        return files

    def counts(self) -> dict[str, int]:
        """Counted rows of every record type."""
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
        for table in self.tables("trees", columns=["problem_id"]):
            values |= tree_keys(table)
        return values

    def final_error_keys(self) -> set[str]:
        """Keys of committed source errors (`source_error_keys`)."""
        keys: set[str] = set()
        for table in self.tables("errors", columns=["problem_id", "stage"]):
            keys |= source_error_keys(table)
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
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{self.store.join(MANIFEST)}: not valid JSON ({exc})") from None
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

        The copy holds run.json and the markers and parts of the counted batches, so the
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
            layout = self.layout()
            batches = self._batches(layout)
            for batch in self.counted().dropped:
                (local / MARKERS / batch).write_bytes(batches[batch].body())
            # the records that make its shards count (`pipeline.store.compacted`)
            records = self.compactions()
            for name in layout.valid:
                (local / COMPACTED).mkdir(exist_ok=True)
                (local / COMPACTED / name).write_bytes(records[name].body())
            for name in store.names():
                if name in RECORD_TYPES:
                    (local / name).mkdir()
                    for part in self.parts(name):
                        file = str(part).rsplit("/", 1)[-1]
                        (local / name / file).write_bytes(store.read_bytes(name, file))
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
    "Batch",
    "Counted",
    "RunFolder",
    "batch_of",
    "check_run_id",
    "drop_rows",
    "local_run_dir",
    "part_name",
    "source_error_keys",
    "tree_keys",
]
