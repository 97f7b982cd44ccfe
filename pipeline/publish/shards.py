"""A run's rows as the Hub holds them: a few shards per config and split, not one file per tree.

A run folder holds one Parquet part per record type per committed batch (a 500-problem
night: about 3,300 parts), or a few shards once compacted.  Uploading each part as a file
would put thousands of files in one commit and about 100,000 in the repo after a month of
nights, past the Hub's recommendations (under 100 files per commit, 100k per repo, 10k per
folder).  So a publish merges the counted rows of each config into shards per split:

* **500 MB of in-memory Arrow per shard at most** (`MAX_SHARD_BYTES`): the size
  `datasets.Dataset.push_to_hub` shards at by default, so a shard is what the Hub's own
  tooling writes and what its dataset viewer and `load_dataset` expect (the Parquet file is
  smaller: text compresses).  A night of 500 problems is then one shard per config and
  split (on the load model such a night's largest table, trees, took under 10 MB on disk
  as 500 parts).
* **1,000,000 rows per shard at most** (`MAX_SHARD_ROWS`): small rows (tree_nodes of a short
  step) would otherwise pack tens of millions into one file, which a reader must fetch
  whole for a single row group's worth of rows.
* **row groups of 1,000 rows** (`ROW_GROUP_ROWS`): `datasets`' own writer batch size
  (`datasets.config.DEFAULT_MAX_BATCH_SIZE`), so the dataset viewer pages a shard a row
  group at a time.

A shard's name carries a digest of its config-split's shards:
``<split>-<digest>-<i>-of-<n>.parquet``.  The same rows give the same bytes (the parts are
read in order and pyarrow writes deterministically), so a re-publish of an unchanged run
finds every shard already in the repo by name, and an interrupted publish resumes by
uploading only the names that are missing.  Changed rows give new names, so the old
version's files are never overwritten in place: they are deleted once the new ones are up.

Only counted rows go up (`RunFolder.counted_files`).  A table without a ``split`` column (a
run written before the split existed) goes up as train: the ``errors`` table as it is, any
other table with a ``split`` column of "train" appended, so its columns match newer runs'.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from pipeline.records.splits import SPLITS
from pipeline.store.parts import reading

__all__ = [
    "MAX_SHARD_BYTES",
    "MAX_SHARD_ROWS",
    "ROW_GROUP_ROWS",
    "SPLIT_COLUMN",
    "ConfigShards",
    "is_shard_name",
    "shard_config",
]

MAX_SHARD_BYTES = 500 * 1000 * 1000
MAX_SHARD_ROWS = 1_000_000
ROW_GROUP_ROWS = 1_000
# The column that names a row's split (pipeline.records.splits); `errors` rows have none.
SPLIT_COLUMN = "split"
_DIGEST_CHARS = 12
# A shard's file name (`ConfigShards.repo_paths`); the earlier layouts' names never match.
_SHARD_NAME = re.compile(
    rf"(?:{'|'.join(SPLITS)})-[0-9a-f]{{{_DIGEST_CHARS}}}-\d{{5,}}-of-\d{{5,}}\.parquet"
)
_SAMPLE_STR_MAX = 400  # characters of a string shown in the card's sample rows
# The column appended to a table written before the split existed.
_SPLIT_FIELD = pa.field(
    SPLIT_COLUMN,
    pa.string(),
    nullable=False,
    metadata={"description": "train (added when published: the run predates the split)"},
)


@dataclass(frozen=True)
class ConfigShards:
    """One config of a run, sharded: split -> its shard files (in order) and rows."""

    files: dict[str, list[Path]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    sample: dict[str, Any] | None = None

    def repo_paths(self, folder: str) -> dict[str, Path]:
        """Repo path (under `folder`) -> local shard, named with the split's digest."""
        out: dict[str, Path] = {}
        for split, shards in self.files.items():
            digest = _digest(shards)
            for i, shard in enumerate(shards):
                name = f"{split}-{digest}-{i:05d}-of-{len(shards):05d}.parquet"
                out[f"{folder}/{name}"] = shard
        return out


def is_shard_name(file_name: str) -> bool:
    """Whether `file_name` (no folder) is a shard's name, ``<split>-<digest>-<i>-of-<n>``."""
    return _SHARD_NAME.fullmatch(file_name) is not None


def shard_config(
    name: str,
    sources: Sequence[Path],
    workdir: Path,
    *,
    max_bytes: int = MAX_SHARD_BYTES,
    max_rows: int = MAX_SHARD_ROWS,
) -> ConfigShards:
    """Config `name`'s counted local files as shards per split, written under `workdir`.

    Raises ValueError on a split value other than train/test (naming the file).  A config
    whose files hold no row at all is one empty train shard (its schema kept), so
    `load_dataset(repo, name)` still reads it.
    """
    writers: dict[str, _ShardWriter] = {
        split: _ShardWriter(workdir / name / split, max_bytes, max_rows) for split in SPLITS
    }
    schema = None
    for source in sources:
        with reading(source, str(Path(source).parent.parent)):  # <run>: table <t>: <part>
            table = pq.read_table(source)
        schema = schema or table.schema
        try:
            for split, part in _by_split(name, source, table):
                writers[split].add(part)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
            raise ValueError(
                f"{source}: its columns differ from the other {name} files' ({err})"
            ) from None
    if schema is not None and not any(w.rows for w in writers.values()):
        writers["train"].add(_with_split(name, schema.empty_table()))
    closed = {split: w.close() for split, w in writers.items()}
    files = {split: shards for split, shards in closed.items() if shards}
    return ConfigShards(
        files=files,
        rows={split: writers[split].rows for split in SPLITS},
        sample=_sample_row(shard for shards in files.values() for shard in shards),
    )


def _by_split(name: str, source: Path, table: Any) -> Iterator[tuple[str, Any]]:
    """(split, rows) of one local file, non-empty splits only."""
    if SPLIT_COLUMN not in table.column_names:  # written before the split existed
        yield "train", _with_split(name, table)
        return
    column = table.column(SPLIT_COLUMN)
    unknown = set(pc.unique(column).to_pylist()) - set(SPLITS)
    if unknown:
        raise ValueError(
            f"{source}: column {SPLIT_COLUMN!r} holds {sorted(map(repr, unknown))}; "
            f"expected one of {list(SPLITS)}"
        )
    for split in SPLITS:
        part = table.filter(pc.equal(column, split))
        if part.num_rows:
            yield split, part


def _with_split(name: str, table: Any) -> Any:
    """A table written before the split existed, as newer runs' (see the module docstring)."""
    if name == "errors" or SPLIT_COLUMN in table.column_names:
        return table
    return table.append_column(_SPLIT_FIELD, pa.array(["train"] * table.num_rows, pa.string()))


class _ShardWriter:
    """Appends tables to numbered shard files, starting a new one at the byte or row cap."""

    def __init__(self, folder: Path, max_bytes: int, max_rows: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.max_rows = max_rows
        self.rows = 0
        self.shards: list[Path] = []
        self._writer: Any = None
        self._schema: Any = None
        self._bytes = 0
        self._shard_rows = 0

    def add(self, table: Any) -> None:
        if self._schema is not None and table.schema != self._schema:
            # Parts of one run share their record type's schema; a hand-made folder may
            # differ in metadata or nullability only, which the cast settles.
            table = table.cast(self._schema)
        if table.num_rows == 0:
            if self._writer is None:  # an empty shard still says what the columns are
                self._open(table.schema)
            return
        offset = 0
        while offset < table.num_rows:
            if self._writer is None or self._full():
                self._open(table.schema)
            take = min(table.num_rows - offset, self.max_rows - self._shard_rows)
            piece = table.slice(offset, take)
            self._writer.write_table(piece, row_group_size=ROW_GROUP_ROWS)
            self._bytes += piece.nbytes
            self._shard_rows += take
            self.rows += take
            offset += take

    def _full(self) -> bool:
        return self._bytes >= self.max_bytes or self._shard_rows >= self.max_rows

    def _open(self, schema: Any) -> None:
        if self._writer is not None:
            self._writer.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{len(self.shards):05d}.parquet"
        self._schema = self._schema or schema
        self._writer = pq.ParquetWriter(path, self._schema)
        self.shards.append(path)
        self._bytes = self._shard_rows = 0

    def close(self) -> list[Path]:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.shards


def _digest(files: Iterable[Path]) -> str:
    """A short digest of the shards' bytes, in order."""
    total = hashlib.sha256()
    for path in files:
        total.update(hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()[:_DIGEST_CHARS]


def _truncate(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _SAMPLE_STR_MAX:
        return value[:_SAMPLE_STR_MAX] + f"… [{len(value) - _SAMPLE_STR_MAX} more chars]"
    if isinstance(value, Mapping):
        return {str(k): _truncate(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_truncate(v) for v in value]
    return value


def _sample_row(files: Iterable[Path]) -> dict[str, Any] | None:
    """The first row of the first shard that has one (long strings cut), for the card."""
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=1):
            rows = batch.to_pylist()
            if rows:
                row: dict[str, Any] = _truncate(rows[0])
                return row
    return None
