"""The rows of a run's problem stream, declared once.

A problem's way from its source to the sink, and the one form it has at each step:

    source record   `ProblemRow` / `ErrorRow` (`pipeline.problems.sources`)
      -> SOURCE_SCHEMA row     what the read task yields (a problem, or a bad row's message)
      -> STREAM_SCHEMA row     what the resume filter yields: kind "problem" (to search) or
                               "tally" (the input batch's new source errors, and how many
                               records were already done)
      -> `Problem`             all the search actor sees (`map_problems`)
      -> records               `{record type: [rows]}` from `pipeline.records`
      -> STREAM_SCHEMA row     the same row with `records` (JSON) filled in, to the driver
                               (kind "stopped", no records: left unsearched at the run's
                               wall-time cap, `pipeline.run.wall`)

With the night allocator (`allocation.enabled`) a problem row is a probe (`tree` "probe"),
and every row carries its place in the selection (`index`, a tally its places in
`indices`); the window stage (`pipeline.run.window_stage`) reads them, drops the
"probed" rows (problems whose probe an earlier invocation committed) and adds the second
trees: problem rows with `tree` "second", their `budget`, and in `carry` (JSON) the
probe's records and the probes their window was allocated from.  A row is searched when
it is a problem row without records: a probe's result passes the second search stage.
      -> `StreamResult`        what the driver commits and counts (`results_of`)

Records cross the stream as JSON text (one encode in the actor, one decode in the driver:
`encode_records` / `decode_records`), because each record type has its own
schema and Ray Data wants one per block.  A source record's `meta` stays in the source
(filters read it); no record type stores it, so the stream does not ship it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from pipeline.problems.sources import Record, is_error
from pipeline.run.night_windows import as_failed_probe

Records = dict[str, list[dict[str, Any]]]  # record type -> rows, as `pipeline.records` builds

# One source record: problem rows have `error` null, error rows `problem` null.
SOURCE_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),  # the record's place in the selection (bad rows included)
        ("problem_id", pa.string()),
        ("problem", pa.string()),
        ("reference", pa.string()),
        ("error", pa.string()),  # the error row's message
    ]
)

# What the search stage reads, and (with `records` filled) what it returns.
STREAM_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # "problem" | "tally" | "stopped" (unsearched at the wall cap)
        ("problem_id", pa.string()),
        ("problem", pa.string()),
        ("reference", pa.string()),
        ("records", pa.string()),  # JSON records: a tally's errors, a searched problem's rows
        ("skipped", pa.int64()),  # tally: records already done (not searched again)
        # the night allocator's columns (null without it): the module docstring
        ("index", pa.int64()),
        ("indices", pa.list_(pa.int64())),  # tally: the places of its errors and skips
        ("tree", pa.string()),  # "probe" | "second"
        ("budget", pa.int64()),  # a second tree's B
        ("carry", pa.string()),  # a second tree's JSON: probe records, window probes
    ]
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem to search: all the search actor sees of the stream."""

    problem_id: str
    problem: str
    reference: str | None
    index: int | None = None  # with the night allocator: its place in the selection
    tree: str | None = None  # "probe" | "second" with the night allocator
    budget: int | None = None  # a second tree's B
    carry: Mapping[str, Any] | None = None  # a second tree's: the probe's records, ...


@dataclass(frozen=True, slots=True)
class StreamResult:
    """One row out of the search stage: a searched problem's records, a tally, or a
    problem left unsearched at the wall-time cap ("stopped": nothing to commit).
    `needs`: a second tree's window probes, committed before it (`pipeline.run.synthesis`)."""

    kind: Literal["problem", "tally", "stopped"]
    records: Records
    skipped: int
    tree: str | None = None
    needs: tuple[str, ...] = ()


def encode_records(records: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    return json.dumps(records)


def decode_records(text: str | None) -> Records:
    if text is None:
        return {}
    records: Records = json.loads(text)
    return records


# -- source rows (read task) -------------------------------------------------------------
def source_row(record: Record, index: int | None = None) -> dict[str, Any]:
    if is_error(record):
        return {
            "index": index,
            "problem_id": record["problem_id"],
            "problem": None,
            "reference": None,
            "error": record["message"],
        }
    return {
        "index": index,
        "problem_id": record["problem_id"],
        "problem": record["problem"],
        "reference": record["reference"],
        "error": None,
    }


def source_error(row: Mapping[str, Any]) -> str | None:
    """The message of a source row that is a bad record; None for a problem."""
    error = row["error"]
    return None if error is None else str(error)


# -- stream rows (resume filter -> search stage) -------------------------------------------
def problem_row(
    row: Mapping[str, Any], *, tree: str | None = None, kind: str = "problem"
) -> dict[str, Any]:
    """The stream row of a source row that is a problem to search (`tree` "probe" with
    the night allocator; kind "probed": its probe is committed, for the window stage)."""
    return {
        "kind": kind,
        "problem_id": row["problem_id"],
        "problem": row["problem"],
        "reference": row["reference"],
        "records": None,
        "skipped": 0,
        "index": row.get("index") if tree is not None else None,
        "indices": None,
        "tree": tree,
        "budget": None,
        "carry": None,
    }


def tally_row(
    errors: Sequence[Mapping[str, Any]], skipped: int, indices: Sequence[int] | None = None
) -> dict[str, Any]:
    """The stream row of an input batch's new source errors and already-done records
    (`indices`: their places, with the night allocator)."""
    return {
        "kind": "tally",
        "problem_id": None,
        "problem": None,
        "reference": None,
        "records": encode_records({"errors": errors}) if errors else None,
        "skipped": skipped,
        "index": None,
        "indices": None if indices is None else list(indices),
        "tree": None,
        "budget": None,
        "carry": None,
    }


def second_row(
    problem_id: str,
    problem: str,
    reference: str | None,
    *,
    index: int,
    budget: int,
    probe: Records,
    window_probes: Sequence[str],
) -> dict[str, Any]:
    """The stream row of a second tree to search (the window stage's)."""
    return {
        "kind": "problem",
        "problem_id": problem_id,
        "problem": problem,
        "reference": reference,
        "records": None,
        "skipped": 0,
        "index": index,
        "indices": None,
        "tree": "second",
        "budget": budget,
        # default=str: a value Parquet read back that JSON has no type for (none today)
        "carry": json.dumps({"probe": probe, "window_probes": list(window_probes)}, default=str),
    }


def stream_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    return pa.Table.from_pylist(list(rows), schema=STREAM_SCHEMA)


# -- the search stage ----------------------------------------------------------------------
async def map_problems(
    batch: Mapping[str, Any],
    solve: Callable[[list[Problem]], Awaitable[Sequence[Records | None]]],
) -> dict[str, list[Any]]:
    """Search a stream batch's problems with `solve`; a tally passes through untouched.

    Returns the batch as STREAM_SCHEMA columns with `records` filled in; a problem `solve`
    left unsearched (None: the wall-time cap) becomes a "stopped" row without records.
    """
    n = len(batch["problem_id"])
    kinds = [str(k) for k in batch["kind"]]
    records = [batch["records"][i] for i in range(n)]
    # a probe's result on its way through the second search stage has records already
    todo = [i for i in range(n) if kinds[i] == "problem" and records[i] is None]
    column = _column(batch, n)
    problems = [
        Problem(
            str(batch["problem_id"][i]),
            str(batch["problem"][i]),
            None if batch["reference"][i] is None else str(batch["reference"][i]),
            index=_int(column("index")[i]),
            tree=column("tree")[i],
            budget=_int(column("budget")[i]),
            carry=None if column("carry")[i] is None else json.loads(column("carry")[i]),
        )
        for i in todo
    ]
    if problems:
        for i, output in zip(todo, await solve(problems), strict=True):
            if output is None:
                kinds[i] = "stopped"
            else:
                probe = column("tree")[i] == "probe"
                records[i] = encode_records(as_failed_probe(output) if probe else output)
    trees = list(column("tree"))
    # the driver needs only the records; the window stage a probe's problem too
    keep = [trees[i] == "probe" and kinds[i] in ("problem", "probed") for i in range(n)]
    carry = list(column("carry"))
    return {
        "kind": kinds,
        "problem_id": [None if x is None else str(x) for x in batch["problem_id"]],
        "problem": [batch["problem"][i] if keep[i] else None for i in range(n)],
        "reference": [batch["reference"][i] if keep[i] else None for i in range(n)],
        "records": records,
        "skipped": [int(s) for s in batch["skipped"]],
        "index": [_int(x) for x in column("index")],
        "indices": [None if x is None else [int(v) for v in x] for x in column("indices")],
        "tree": trees,
        "budget": [_int(x) for x in column("budget")],
        # a second tree's window probes go on to the driver, not its probe's records
        "carry": [_needs_only(c) for c in carry],
    }


def _column(batch: Mapping[str, Any], n: int) -> Callable[[str], Sequence[Any]]:
    """A batch column by name; nulls for one a batch lacks (a row from before it)."""

    def column(name: str) -> Sequence[Any]:
        values = batch.get(name)
        return [None] * n if values is None else list(values)

    return column


def _int(value: Any) -> int | None:
    """An integer column's value; a null read as numpy gives None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def _needs_only(carry: str | None) -> str | None:
    if carry is None:
        return None
    return json.dumps({"window_probes": json.loads(carry).get("window_probes", [])})


def results_of(table: Any) -> Iterator[StreamResult]:
    """The driver's view of a block out of the search stage."""
    names = set(table.column_names)
    columns = [c for c in ("kind", "records", "skipped", "tree", "carry") if c in names]
    for row in table.select(columns).to_pylist():
        kind: Literal["problem", "tally", "stopped"] = (
            row["kind"] if row["kind"] in ("tally", "stopped") else "problem"
        )
        carry = json.loads(row["carry"]) if row.get("carry") else {}
        yield StreamResult(
            kind,
            decode_records(row["records"]),
            int(row["skipped"] or 0),
            row.get("tree"),
            tuple(carry.get("window_probes", ())),
        )


__all__ = [
    "SOURCE_SCHEMA",
    "STREAM_SCHEMA",
    "Problem",
    "Records",
    "StreamResult",
    "decode_records",
    "encode_records",
    "map_problems",
    "problem_row",
    "results_of",
    "second_row",
    "source_error",
    "source_row",
    "stream_table",
    "tally_row",
]
