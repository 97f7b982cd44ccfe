"""The night allocator's window stage: one Ray Data actor between the probe search and the
second search (`pipeline.run.synthesis`).

    probe search -> WindowStage (one actor, one call at a time, on the head node)
                 -> second search -> the driver's commits

Every row of the probe search passes through it: a probe's result (its place, its
`trees` row's counts), a tally (the places of its bad rows and skips), a problem left
at the wall-time cap, and the "probed" rows of the resume filter (problems whose probe
an earlier invocation committed: read back here, not passed on).  It files each place
under its window (`pipeline.run.night_windows.NightWindows`) and, when a window is
complete, adds a second-tree row for each problem the allocator gave a budget, carrying
the probe's records (the second tree's rows are built against them) and the probes the
window was allocated from (the driver commits the second tree after them).

Its state is rebuilt when it starts: the committed probes' outcomes are read from the
run folder's `trees` rows (`tree` probe, `source_index`, the counts), so a rerun files
them in the same windows and the allocator gives the same budgets.  A problem whose
second tree is committed is not searched again (the resume filter skips it; its probe
still counts in its window).  A window holds at most `allocation.window` problems' probe
records while it waits: the source streams, nothing is buffered whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from pipeline.config import RunConfig
from pipeline.records import SCHEMAS
from pipeline.run.allocation import NightAllocator
from pipeline.run.night_windows import (
    Member,
    NightWindows,
    SecondTree,
    failed_probes,
    outcome_of,
)
from pipeline.run.stream_rows import Records, decode_records, second_row, stream_table
from pipeline.store.run_folder import RunFolder, batch_of

# What a second tree is built against: the probe's tree and its training rows.
PROBE_TABLES = ("trees", "tree_nodes", "sft", "dpo", "step_dpo", "prm", "kto")


class WindowStage:
    """Ray Data callable class (module docstring)."""

    def __init__(self, run: dict[str, Any], selection: int) -> None:
        self.run = RunConfig.model_validate(run)
        self.folder = RunFolder.open(self.run.output_root, self.run.resolved_run_id)
        allocator = NightAllocator(self.run.allocation, self.run.budget, self.run.records)
        self.windows = NightWindows(allocator, selection)
        self.replayed: dict[int, dict[str, Any]] = {}  # place -> committed probe's trees row
        self.seconds: set[str] = set()  # problems whose second tree is committed
        self.live: set[str] = set()  # probes searched by this invocation (the driver commits)
        for row in _trees(self.folder):
            if row["tree"] == "probe" and row["source_index"] is not None:
                self.replayed[int(row["source_index"])] = row
            elif row["tree"] == "second":
                self.seconds.add(str(row["problem_id"]))
        # probes that failed in an earlier invocation: their windows were allocated without
        # them, so a retry that succeeds is filed as no probe (`night_windows`)
        errors = self.folder.tables("errors", columns=["problem_id", "stage"])
        self.failed = failed_probes(r for t in errors for r in t.to_pylist())

    def __call__(self, batch: pa.Table) -> pa.Table:
        out: list[dict[str, Any]] = []
        for row in batch.to_pylist():
            kind, index = row["kind"], row.get("index")
            seconds: list[SecondTree] = []
            if kind == "tally":
                for place in row.get("indices") or ():
                    seconds += self.windows.add(self._replayed(int(place), done=True))
                out.append(row)
            elif kind == "probed":  # its probe is committed: replayed, not passed on
                member = self._replayed(int(index), done=False)
                payload = {"problem": row["problem"], "reference": row["reference"]}
                seconds += self.windows.add(
                    Member(member.index, member.problem_id, member.outcome, payload=payload)
                )
            elif index is not None and row.get("tree") == "probe":
                records = decode_records(row["records"]) if kind == "problem" else {}
                trees = records.get("trees") or []
                pid = str(row["problem_id"])
                if kind == "problem":  # a tree or a failed probe's errors: the driver commits
                    self.live.add(pid)
                member = (
                    Member(
                        int(index),
                        pid,
                        outcome_of(trees[0]),
                        payload={
                            "problem": row["problem"],
                            "reference": row["reference"],
                            "records": _probe_part(records),
                        },
                    )
                    if trees and pid not in self.failed
                    # a failed probe, or one that failed before (its window is allocated
                    # without it), is no probe; a stopped one (the wall-time cap) commits
                    # nothing, and no second tree starts after the cap
                    else Member(int(index), pid if kind == "problem" else None)
                )
                seconds += self.windows.add(member)
                out.append(dict(row, problem=None, reference=None))
            else:
                out.append(row)
            out += self._second_rows(seconds)
        return stream_table(out)

    def _replayed(self, index: int, *, done: bool) -> Member:
        """A place this invocation does not probe: its committed probe, or no probe."""
        tree = self.replayed.get(index)
        if tree is None:  # a bad source row
            return Member(index)
        pid = str(tree["problem_id"])
        if pid in self.failed:  # committed by a retry: its window was allocated without it
            return Member(index)
        return Member(index, pid, outcome_of(tree), second_done=done or pid in self.seconds)

    def _second_rows(self, seconds: list[SecondTree]) -> list[dict[str, Any]]:
        """The second trees' stream rows; the probes committed by an earlier invocation
        have their records read back here, one read for the lot."""
        if not seconds:
            return []
        missing = [s.problem_id for s in seconds if "records" not in s.payload]
        read = _read_probes(self.folder, missing) if missing else {}
        rows = []
        for s in seconds:
            probe = s.payload.get("records") or read.get(s.problem_id, {})
            rows.append(
                second_row(
                    s.problem_id,
                    s.payload["problem"],
                    s.payload["reference"],
                    index=s.index,
                    budget=s.budget,
                    probe=probe,
                    # the driver holds the second tree until these probes are committed
                    window_probes=[p for p in s.window_probes if p in self.live],
                )
            )
        return rows


def _probe_part(records: Records) -> Records:
    return {kind: list(records.get(kind, ())) for kind in PROBE_TABLES}


def _trees(folder: RunFolder) -> Iterable[dict[str, Any]]:
    columns = ["problem_id", "tree", "source_index", "c_used", "n_correct", "n_incorrect"]
    columns += ["n_answered", "kept_rows"]
    for table in folder.tables("trees", columns=columns, schema=SCHEMAS["trees"]):
        yield from table.to_pylist()


def _read_probes(folder: RunFolder, problem_ids: list[str]) -> dict[str, Records]:
    """The committed probe records of `problem_ids` (their second trees are not committed:
    every row of theirs but a trees row marked second is the probe's).  Only the parts of
    the batches that hold them are read (each batch's marker names its problems; one from
    before markers did names none, and is read): a resumed night reads each window's
    probes, not the whole run, once per window."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    ids = set(problem_ids)
    batches = {
        name
        for name, batch in folder.batches().items()
        if not batch.second and (batch.parts is None or batch.problems & ids)
    }
    wanted = pa.array(sorted(ids))
    out: dict[str, Records] = {pid: {kind: [] for kind in PROBE_TABLES} for pid in problem_ids}
    for kind in PROBE_TABLES:
        for part in folder.parts(kind):
            if batch_of(part) not in batches:
                continue
            table = folder.read_part(part, schema=SCHEMAS[kind])
            mine = table.filter(pc.is_in(table.column("problem_id"), value_set=wanted))
            for row in mine.to_pylist():
                if kind == "trees" and row.get("tree") != "probe":
                    continue
                out[str(row["problem_id"])][kind].append(row)
    return out


__all__ = ["PROBE_TABLES", "WindowStage"]
