"""``runs.json``: every published run's facts, kept in the repo beside the card.

The card's run table and its ``size_categories`` and ``source_datasets`` cover every run in
the repo, not only the one being published.  Reading them back from the Parquet of every
run would cost a download per run per publish, so each publish records its run's facts
here, in the same commit as the card (both are read at the commit they build on and
written with it as parent, so two publishes never lose each other's entry).

A run published before this file existed has no entry: the card lists it as published
with its facts unknown, and its rows are left out of the size category.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.records import TRAINING_TYPES

__all__ = [
    "dump_index",
    "index_entry",
    "merge_index",
    "parse_index",
    "size_category",
    "training_rows",
]

_VERSION = 1
# The Hub's size_categories buckets (huggingface.co/docs/hub/datasets-cards), by rows.
_SIZE_BUCKETS: tuple[tuple[int, str], ...] = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"),
    (100_000_000_000, "10B<n<100B"),
    (1_000_000_000_000, "100B<n<1T"),
)


def index_entry(
    run_id: str,
    counts: Mapping[str, Mapping[str, int]],
    *,
    models: Sequence[str],
    source: str | None,
    precision: float | None,
    published_at: dt.datetime | None = None,
) -> dict[str, Any]:
    """One run's entry: rows per config and split, the models, the problem source."""
    when = published_at or dt.datetime.now(dt.UTC)
    return {
        "run_id": run_id,
        "published_at": when.isoformat(timespec="seconds"),
        "rows": {name: dict(by_split) for name, by_split in counts.items()},
        "models": list(models),
        "source": source,
        "answered_precision": precision,
    }


def parse_index(body: bytes | None) -> list[dict[str, Any]]:
    """The entries of a ``runs.json`` body (none for a repo without one).  A file this
    code cannot read (edited by hand, or a later version's) raises ValueError: publishing
    over it would drop every other run's entry."""
    if body is None:
        return []
    try:
        data = json.loads(body)
        runs = data["runs"]
        if not isinstance(runs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in runs
        ):
            raise TypeError("'runs' is not a list of objects with a string 'run_id'")
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"the repo's runs.json is not readable ({err})") from None
    return list(runs)


def merge_index(
    entries: Iterable[Mapping[str, Any]], entry: Mapping[str, Any], runs_present: Iterable[str]
) -> list[dict[str, Any]]:
    """The entries after a publish: `entry` replaces its run's, and runs whose data is no
    longer in the repo are dropped; sorted by run id."""
    present = set(runs_present)
    kept = {e["run_id"]: dict(e) for e in entries if e["run_id"] in present}
    kept[str(entry["run_id"])] = dict(entry)
    return [kept[run] for run in sorted(kept)]


def dump_index(entries: Sequence[Mapping[str, Any]]) -> bytes:
    """The body of ``runs.json`` holding `entries`."""
    return (json.dumps({"version": _VERSION, "runs": list(entries)}, indent=1) + "\n").encode()


def training_rows(entries: Iterable[Mapping[str, Any]]) -> int:
    """Rows of the training configs over every run with an entry (train and test)."""
    return sum(
        int(n)
        for e in entries
        for name, by_split in (e.get("rows") or {}).items()
        if name in TRAINING_TYPES
        for n in by_split.values()
    )


def size_category(rows: int) -> str:
    """The Hub's ``size_categories`` bucket for `rows`."""
    for bound, label in _SIZE_BUCKETS:
        if rows < bound:
            return label
    return "n>1T"
