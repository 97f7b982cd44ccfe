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
      -> `StreamResult`        what the driver commits and counts (`results_of`)

Records cross the stream as JSON text (one encode in the actor, one decode in the driver:
`encode_records` / `decode_records`), because each record type has its own
schema and Ray Data wants one per block.  A source record's `meta` stays in the source
(filters read it); no record type stores it, so the stream does not ship it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from pipeline.problems.sources import Record, is_error

Records = dict[str, list[dict[str, Any]]]  # record type -> rows, as `pipeline.records` builds

# One source record: problem rows have `error` null, error rows `problem` null.
SOURCE_SCHEMA = pa.schema(
    [
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
    ]
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem to search: all the search actor sees of the stream."""

    problem_id: str
    problem: str
    reference: str | None


@dataclass(frozen=True, slots=True)
class StreamResult:
    """One row out of the search stage: a searched problem's records, a tally, or a
    problem left unsearched at the wall-time cap ("stopped": nothing to commit)."""

    kind: Literal["problem", "tally", "stopped"]
    records: Records
    skipped: int


def encode_records(records: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    return json.dumps(records)


def decode_records(text: str | None) -> Records:
    if text is None:
        return {}
    records: Records = json.loads(text)
    return records


# -- source rows (read task) -------------------------------------------------------------
def source_row(record: Record) -> dict[str, Any]:
    if is_error(record):
        return {
            "problem_id": record["problem_id"],
            "problem": None,
            "reference": None,
            "error": record["message"],
        }
    return {
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
def problem_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The stream row of a source row that is a problem to search."""
    return {
        "kind": "problem",
        "problem_id": row["problem_id"],
        "problem": row["problem"],
        "reference": row["reference"],
        "records": None,
        "skipped": 0,
    }


def tally_row(errors: Sequence[Mapping[str, Any]], skipped: int) -> dict[str, Any]:
    """The stream row of an input batch's new source errors and already-done records."""
    return {
        "kind": "tally",
        "problem_id": None,
        "problem": None,
        "reference": None,
        "records": encode_records({"errors": errors}) if errors else None,
        "skipped": skipped,
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
    todo = [i for i in range(n) if kinds[i] == "problem"]
    records = [batch["records"][i] for i in range(n)]
    problems = [
        Problem(
            str(batch["problem_id"][i]),
            str(batch["problem"][i]),
            None if batch["reference"][i] is None else str(batch["reference"][i]),
        )
        for i in todo
    ]
    if problems:
        for i, output in zip(todo, await solve(problems), strict=True):
            if output is None:
                kinds[i] = "stopped"
            else:
                records[i] = encode_records(output)
    return {
        "kind": kinds,
        "problem_id": [None if x is None else str(x) for x in batch["problem_id"]],
        "problem": [None] * n,  # the driver needs only the records
        "reference": [None] * n,
        "records": records,
        "skipped": [int(s) for s in batch["skipped"]],
    }


def results_of(table: Any) -> Iterator[StreamResult]:
    """The driver's view of a block out of the search stage."""
    for row in table.select(["kind", "records", "skipped"]).to_pylist():
        kind: Literal["problem", "tally", "stopped"] = (
            row["kind"] if row["kind"] in ("tally", "stopped") else "problem"
        )
        yield StreamResult(kind, decode_records(row["records"]), int(row["skipped"] or 0))


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
    "source_error",
    "source_row",
    "stream_table",
    "tally_row",
]
