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

The output root must be persistent (on a cluster: a bucket, or shared storage mounted
on the head node) for the ledger to carry over from night to night.

On a local folder the ledger is one JSON file replaced atomically.  On object storage
(`ObjectLedger`) it is one object per slice, `nightly-ledger/<seq>.json`, created with a
conditional put (create-if-absent): two nights racing for the next slice both try the
same sequence number, exactly one creates it, and the other re-reads the ledger and takes
the slice after it (or, for the same date, the slice just created).  A top-up extends a
night only by creating the *next* slice object as an extension of it, so it fails (and
the night simply stops) when another night has already taken the slice after it.
Nothing is read-modify-written across nights, so a slice can be neither lost nor
handed out twice.
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
from pipeline.run.summary import RunSummary
from pipeline.store.filesystem import is_remote, open_store

LEDGER = "nightly-ledger.json"
Status = Literal["running", "done", "failed"]


@dataclass(frozen=True)
class NightSlice:
    date: str
    run_id: str
    skip: int
    limit: int


class Ledger:
    def __new__(cls, output_root: Path | str) -> Ledger:
        if cls is Ledger and is_remote(str(output_root)):
            return super().__new__(ObjectLedger)
        return super().__new__(cls)

    def __init__(self, output_root: Path | str) -> None:
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

    def extend(self, date: str, limit: int) -> bool:
        """Grow the last night's slice to `limit`; False when a later night exists."""
        if self.nights[-1]["date"] != date:
            return False
        self.mark(date, "running", limit=limit)
        return True

    def unfinished(self, before: str) -> list[dict[str, Any]]:
        return [n for n in self.nights if n["date"] < before and n.get("status") != "done"]


class ObjectLedger(Ledger):
    """The ledger on a bucket: one object per slice, created with a conditional put."""

    FOLDER = "nightly-ledger"

    def __init__(self, output_root: Path | str) -> None:
        self.store = open_store(output_root).child(self.FOLDER)
        self.path = Path(self.FOLDER)  # only for messages; the objects live in `store`
        self.slots: list[dict[str, Any]] = []
        self.nights = []
        self._load()

    def _load(self) -> None:
        self.slots = []
        for name in self.store.names():
            if not name.endswith(".json"):
                continue
            try:
                slot = json.loads(self.store.read_text(name))
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{self.store.uri}/{name}: unreadable nightly ledger ({exc})"
                ) from None
            slot["seq"] = int(name.removesuffix(".json"))
            self.slots.append(slot)
        self.slots.sort(key=lambda slot: slot["seq"])
        nights: dict[str, dict[str, Any]] = {}
        for slot in self.slots:
            if slot.get("extends"):  # an extension is contiguous with its night by design
                nights[slot["date"]]["limit"] += slot["limit"]
                nights[slot["date"]]["last_seq"] = slot["seq"]
            else:
                nights[slot["date"]] = {**slot, "last_seq": slot["seq"]}
        self.nights = list(nights.values())

    def _write(self, night: dict[str, Any]) -> None:
        # Only the base slot object holds status and facts; its limit stays the base one.
        base = next(s for s in self.slots if s["seq"] == night["seq"])
        body = {k: v for k, v in night.items() if k not in ("seq", "last_seq", "limit")}
        body["limit"] = base["limit"]
        self.store.write_text(json.dumps(body, indent=2) + "\n", f"{night['seq']:08d}.json")

    def save(self) -> None:
        for night in self.nights:
            self._write(night)

    def plan(
        self, date: str, run_id: str, base_skip: int, per_night: int, first_limit: int | None = None
    ) -> NightSlice:
        for _ in range(20):  # each lost race means another night took a slice: re-read
            night = self.find(date)
            if night is not None:
                night["status"] = "running"
                night["updated_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                self._write(night)
                return NightSlice(night["date"], night["run_id"], night["skip"], night["limit"])
            skip = max((n["skip"] + n["limit"] for n in self.nights), default=base_skip)
            limit = per_night if first_limit is None else min(per_night, first_limit)
            seq = (self.slots[-1]["seq"] if self.slots else 0) + 1
            body = {"date": date, "run_id": run_id, "skip": skip, "limit": limit}
            body |= {"status": "running", "updated_at": dt.datetime.now(dt.UTC).isoformat()}
            if self.store.create_exclusive(json.dumps(body, indent=2).encode(), f"{seq:08d}.json"):
                self._load()
                return NightSlice(date, run_id, skip, limit)
            self._load()
        raise RuntimeError(f"{self.store.uri}: could not claim a nightly slice (20 races lost)")

    def mark(self, date: str, status: Status, **facts: Any) -> None:
        night = self.find(date)
        if night is None:
            raise KeyError(date)
        if "limit" in facts and facts["limit"] != night["limit"]:
            raise ValueError("a nightly slice grows only through extend()")
        facts.pop("limit", None)
        night.update(status=status, updated_at=dt.datetime.now(dt.UTC).isoformat(), **facts)
        self._write(night)

    def extend(self, date: str, limit: int) -> bool:
        self._load()
        night = self.find(date)
        if night is None:
            raise KeyError(date)
        more = limit - night["limit"]
        if more <= 0:
            return True
        seq = night["last_seq"] + 1
        skip = night["skip"] + night["limit"]
        body = {"date": date, "extends": True, "skip": skip, "limit": more}
        created = self.store.create_exclusive(json.dumps(body).encode(), f"{seq:08d}.json")
        self._load()
        return created


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
    from pipeline.store.run_folder import RunFolder

    trees = RunFolder.open(config.output_root, run_id).read("trees")
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
        if not ledger.extend(night.date, night.limit + more):  # a later night came first
            return summary, night
        night = NightSlice(night.date, night.run_id, night.skip, night.limit + more)
        summary = synthesize(night_config(config, night))
