"""Nightly slices: each day takes the next unprocessed slice of the source.

A ledger file under the output root records which slice (skip, limit) each date
got and whether it finished, so

* a new date takes the slice after the last one handed out;
* rerunning a date (after a crash) gets the same slice and run id, and the
  sink's resume skips what was already written;
* unfinished earlier nights are reported with the command that resumes them;
* with `nightly.budget_per_night` (a spend envelope in cost units) a night admits
  problems only while the problems it has started cannot exceed the envelope: each
  may spend up to B (a search never exceeds its budget), so it admits
  floor((envelope - spent) / B) more, runs them to the end (no search is ever cut),
  then tops up with what early-stopped searches left unspent.  The slice recorded in
  the ledger is what the night admitted, so the next night continues right after it,
  and the night's spend is recorded too.

The output root must be persistent (on a cluster: shared storage mounted on
the head node) for the ledger to carry over from night to night.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.config import RunConfig
from pipeline.summary import RunSummary

LEDGER = "nightly-ledger.json"
Status = Literal["running", "done", "failed"]


@dataclass(frozen=True)
class NightSlice:
    date: str
    run_id: str
    skip: int
    limit: int


class Ledger:
    def __init__(self, output_root: Path) -> None:
        self.path = Path(output_root).expanduser() / LEDGER
        self.nights: list[dict[str, Any]] = []
        if self.path.is_file():
            try:
                self.nights = list(json.loads(self.path.read_text())["nights"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{self.path}: unreadable nightly ledger ({exc})") from None

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_suffix(".tmp")
        temp.write_text(json.dumps({"nights": self.nights}, indent=2) + "\n")
        os.replace(temp, self.path)  # atomic: a crash never leaves half a ledger

    def find(self, date: str) -> dict[str, Any] | None:
        return next((n for n in self.nights if n["date"] == date), None)

    def plan(
        self, date: str, run_id: str, base_skip: int, per_night: int, first_limit: int | None = None
    ) -> NightSlice:
        """The slice of `date` (new: after the last one; `first_limit` caps a new slice)."""
        night = self.find(date)
        if night is None:
            skip = max((n["skip"] + n["limit"] for n in self.nights), default=base_skip)
            limit = per_night if first_limit is None else min(per_night, first_limit)
            night = {"date": date, "run_id": run_id, "skip": skip, "limit": limit}
            self.nights.append(night)
        night["status"] = "running"
        night["updated_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.save()
        return NightSlice(night["date"], night["run_id"], night["skip"], night["limit"])

    def mark(self, date: str, status: Status, **facts: Any) -> None:
        night = self.find(date)
        if night is None:
            raise KeyError(date)
        night.update(status=status, updated_at=dt.datetime.now(dt.UTC).isoformat(), **facts)
        self.save()

    def unfinished(self, before: str) -> list[dict[str, Any]]:
        return [n for n in self.nights if n["date"] < before and n.get("status") != "done"]


def night_config(config: RunConfig, night: NightSlice) -> RunConfig:
    """The run config of one night: its own run id and its slice of the source."""
    source = config.source.model_copy(update={"skip": night.skip, "limit": night.limit})
    # An empty slice means the source is exhausted: a normal night, not a bad config.
    update = {"run_id": night.run_id, "source": source, "allow_empty": True}
    return config.model_copy(update=update)


def admissible(envelope: float, spent: float, budget: float) -> int:
    """Problems that may still start: each can spend up to `budget` (never more)."""
    return max(0, math.floor((envelope - spent) / budget + 1e-9))


def plan_night(config: RunConfig, date: dt.date) -> tuple[Ledger, NightSlice]:
    ledger = Ledger(config.output_root)
    day = date.isoformat()
    envelope = config.nightly.budget_per_night
    night = ledger.plan(
        day,
        run_id=f"{config.nightly.run_id_prefix}{day}",
        base_skip=config.source.skip,
        per_night=config.nightly.problems_per_night,
        first_limit=None if envelope is None else admissible(envelope, 0.0, config.budget),
    )
    return ledger, night


def run_spent(config: RunConfig, run_id: str) -> float:
    """Cost units spent by a run so far: the sum of C_used over its committed trees."""
    from pipeline.sink import ParquetSink

    trees = ParquetSink(config.output_root, run_id, readonly=True).read("trees")
    return float(sum(trees.column("c_used").to_pylist()))


def run_night(
    config: RunConfig,
    ledger: Ledger,
    night: NightSlice,
    synthesize: Callable[[RunConfig], RunSummary],
) -> tuple[RunSummary, NightSlice]:
    """Run one night's slice, within `nightly.budget_per_night` when it is set.

    Returns the last invocation's summary and the slice as finally admitted.
    """
    envelope = config.nightly.budget_per_night
    summary = synthesize(night_config(config, night))
    if envelope is None:
        return summary, night
    while True:
        spent = run_spent(config, night.run_id)
        ledger.mark(night.date, "running", spent=spent, envelope=envelope)
        # Top up only the last night: a later night already starts after this slice.
        last = ledger.nights[-1]["date"] == night.date
        room = config.nightly.problems_per_night - night.limit
        more = min(room, admissible(envelope, spent, config.budget)) if last else 0
        if more <= 0 or summary.problems < night.limit:  # nothing left, or source exhausted
            return summary, night
        night = NightSlice(night.date, night.run_id, night.skip, night.limit + more)
        ledger.mark(night.date, "running", limit=night.limit)
        summary = synthesize(night_config(config, night))
