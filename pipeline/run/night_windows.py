"""The night allocator's windows in a stream (pure: no Ray, no I/O).

Problems reach the window stage in any order (Ray Data does not keep the source's order),
each exactly once per invocation: a probed problem with its probe's outcome, a problem
whose probe an earlier invocation committed (its outcome read back from that probe's
`trees` row, `outcome_of`), or a place without a probe tree (a bad source row, a failed
or stopped probe).  `NightWindows` files each under its window (``index // window`` of its
place in the selection) and, once a window is complete and every window before it has
been allocated, calls `NightAllocator.allocate` on the window's probes in source order
(`last` for the night's last window) and hands out its second trees.

The allocator's state (carry, the fitted prior, the running rates) is a function of the
committed probes alone, window after window: a rerun that replays the same committed
probes in the same windows rebuilds it and gets the same budgets.  A probe that failed
(an `errors` row instead of a tree) is the one exception to "the committed probes": a rerun
retries it, and a retried probe that succeeds must not change the window that was
allocated without it.  So a failed probe's error rows say it (their `stage` ends in
`FAILED_PROBE`), its window's second trees are committed after them (`SecondTree.
window_probes`), and a rerun files a probe that failed before as no probe: its retry's rows
are kept, it gets no second tree, and its window is allocated as the failed night did.
Nothing else is stored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.run.allocation import ROW_TABLES, NightAllocator, ProbeOutcome

# How a failed probe's error rows end their `stage` ("search (probe)"): read back by a rerun.
FAILED_PROBE = " (probe)"


@dataclass(frozen=True, slots=True)
class Member:
    """One place of the selection as the window stage learns of it."""

    index: int  # its place in the source's selection (bad rows included)
    problem_id: str | None = None
    outcome: ProbeOutcome | None = None  # None: no probe tree (bad row, failed, stopped)
    second_done: bool = False  # its second tree is committed already: not searched again
    payload: Any = None  # what the caller needs to search its second tree


@dataclass(frozen=True, slots=True)
class SecondTree:
    """A second tree to search: the problem and the B the allocator gave it."""

    index: int
    problem_id: str
    budget: int
    payload: Any = None
    window_probes: tuple[str, ...] = ()  # its window's probes, failed ones included


@dataclass(slots=True)
class NightWindows:
    """The window stage's state: members by window, the next window to allocate."""

    allocator: NightAllocator
    selection: int  # places in the night's selection (bad rows included)
    pending: dict[int, dict[int, Member]] = field(default_factory=dict)
    next_window: int = 0
    plans: list[tuple[int, ...]] = field(default_factory=list)  # each window's budgets

    @property
    def size(self) -> int:
        return self.allocator.config.window

    @property
    def windows(self) -> int:
        return math.ceil(self.selection / self.size) if self.selection else 0

    def _places(self, window: int) -> range:
        return range(window * self.size, min((window + 1) * self.size, self.selection))

    def add(self, member: Member) -> list[SecondTree]:
        """File one member; the second trees (B > 0, not yet committed) of every window
        this completes, in window order."""
        if not 0 <= member.index < self.selection:
            raise ValueError(f"place {member.index} is outside the selection of {self.selection}")
        window = member.index // self.size
        if window < self.next_window:
            raise ValueError(f"place {member.index}: its window {window} was allocated already")
        members = self.pending.setdefault(window, {})
        if member.index in members:
            raise ValueError(f"place {member.index} came twice")
        members[member.index] = member
        out: list[SecondTree] = []
        while self.next_window < self.windows and len(
            self.pending.get(self.next_window, {})
        ) == len(self._places(self.next_window)):
            out += self._allocate(self.pending.pop(self.next_window))
            self.next_window += 1
        return out

    def _allocate(self, members: Mapping[int, Member]) -> list[SecondTree]:
        probed = [members[i] for i in sorted(members) if members[i].outcome is not None]
        outcomes = [m.outcome for m in probed if m.outcome is not None]
        plan = self.allocator.allocate(outcomes, last=self.next_window == self.windows - 1)
        self.plans.append(plan.budgets)
        # committed before the second trees: the probes read, and the failed ones' errors
        used = tuple(str(members[i].problem_id) for i in sorted(members) if members[i].problem_id)
        return [
            SecondTree(m.index, str(m.problem_id), budget, m.payload, used)
            for m, budget in zip(probed, plan.budgets, strict=True)
            if budget > 0 and not m.second_done
        ]

    @property
    def done(self) -> bool:
        return self.next_window >= self.windows


def kept_rows(records: Mapping[str, Any]) -> dict[str, int]:
    """A tree's training rows per table (what the allocator reads of a probe)."""
    return {table: len(records.get(table, ())) for table in ROW_TABLES}


def as_failed_probe(records: Mapping[str, Any]) -> dict[str, Any]:
    """A probe's records as the driver commits them: a probe without a tree failed, and its
    error rows' `stage` says so (`FAILED_PROBE`)."""
    out = dict(records)
    if not records.get("trees") and records.get("errors"):
        out["errors"] = [{**e, "stage": _probe_stage(str(e["stage"]))} for e in records["errors"]]
    return out


def _probe_stage(stage: str) -> str:
    return stage if stage.endswith(FAILED_PROBE) else f"{stage}{FAILED_PROBE}"


def failed_probes(errors: Iterable[Mapping[str, Any]]) -> set[str]:
    """The problems whose probe failed in an earlier invocation, from `errors` rows."""
    return {
        str(e["problem_id"])
        for e in errors
        if e.get("problem_id") is not None and str(e.get("stage")).endswith(FAILED_PROBE)
    }


def outcome_of(tree: Mapping[str, Any]) -> ProbeOutcome:
    """A committed probe's outcome from its `trees` row (its allocator columns)."""
    rows = {str(r["table"]): int(r["rows"]) for r in tree.get("kept_rows") or ()}
    return ProbeOutcome(
        str(tree["problem_id"]),
        float(tree["c_used"]),
        int(tree["n_correct"]),
        int(tree.get("n_incorrect") or 0),
        int(tree["n_answered"]),
        rows,
    )


__all__ = [
    "FAILED_PROBE",
    "Member",
    "NightWindows",
    "SecondTree",
    "as_failed_probe",
    "failed_probes",
    "kept_rows",
    "outcome_of",
]
