"""Compaction records: which batches of a run folder a compaction's shards stand for.

A compaction (`pipeline.store.compaction`) writes a run's counted rows as new batches,
its *shards* (`compact-<id>-<n>`, parts and markers like any batch), then creates one
record, `run=<id>/_compacted/<id>.json`, naming those shards and the batches they
replace.  Creating that one file is the switch, so a reader sees either the old batches
or the shards, never both and never neither:

* a record is *valid* when every shard it names has its marker (it is created only after
  all of them, so a record without them is a compactor's that was overtaken, or one a
  later compaction superseded and is deleting);
* a shard batch counts only when a valid record names it: shards of a compaction that
  stopped before its record are invisible (and the next compaction deletes them);
* a batch a valid record replaces is hidden: neither counted nor reported as missing
  while its marker and parts are deleted (markers first, then parts).

Everything else (a batch committed after the compaction, by a resumed run) reads as
before, next to the shards.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

COMPACTED = "_compacted"
SHARD_PREFIX = "compact-"


def is_shard(batch: str) -> bool:
    """Is `batch` a compaction's shard (counted only when a valid record names it)?"""
    return batch.startswith(SHARD_PREFIX)


def record_name(compaction_id: str) -> str:
    return f"{compaction_id}.json"


@dataclass(frozen=True)
class Compaction:
    """One compaction record: its id, the compactor's lease generation (for the record:
    each shard's marker carries the generation of the rows in it), its shards and the
    batches they replace."""

    id: str
    generation: int
    shards: tuple[str, ...]
    replaces: tuple[str, ...]

    def body(self) -> bytes:
        data = {
            "id": self.id,
            "generation": self.generation,
            "shards": list(self.shards),
            "replaces": list(self.replaces),
        }
        return (json.dumps(data, indent=1) + "\n").encode()

    @classmethod
    def parse(cls, body: bytes) -> Compaction | None:
        """A record's body; None when it is not one (a record is created whole, so this is
        a foreign or damaged file, which counts for nothing)."""
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict):
            return None
        shards, replaces = data.get("shards"), data.get("replaces")
        if not isinstance(shards, list) or not isinstance(replaces, list):
            return None
        return cls(
            str(data.get("id") or ""),
            int(data.get("generation") or 0),
            tuple(map(str, shards)),
            tuple(map(str, replaces)),
        )


@dataclass(frozen=True)
class Layout:
    """Which committed batches readers see, given every marker and every record."""

    visible: frozenset[str]  # batches readers see (the rule of `Counted` then applies)
    hidden: frozenset[str]  # batches a valid record replaces
    named: frozenset[str]  # shards a valid record names
    valid: tuple[str, ...]  # the valid records' file names, sorted
    broken: tuple[str, ...]  # records naming a shard without a marker, sorted
    records: frozenset[str]  # every record's file name seen

    @classmethod
    def of(cls, markers: Iterable[str], records: dict[str, Compaction]) -> Layout:
        """`markers`: every batch with a marker; `records`: file name -> record."""
        markers = set(markers)
        valid = sorted(n for n, r in records.items() if set(r.shards) <= markers)
        hidden = frozenset(b for n in valid for b in records[n].replaces)
        named = frozenset(b for n in valid for b in records[n].shards)
        visible = frozenset(
            b for b in markers if b not in hidden and (not is_shard(b) or b in named)
        )
        broken = tuple(sorted(set(records) - set(valid)))
        return cls(visible, hidden, named, tuple(valid), broken, frozenset(records))


__all__ = [
    "COMPACTED",
    "SHARD_PREFIX",
    "Compaction",
    "Layout",
    "is_shard",
    "record_name",
]
