"""Nightly slices: each day takes the next unprocessed slice of the source.

A ledger under the output root records which slice (skip, limit) each date got and
whether it finished, so

* a new date takes the slice after the last one handed out;
* rerunning a date (after a crash) gets the same slice and run id, and the
  sink's resume skips what was already written;
* unfinished earlier nights are reported with the command that resumes them;
* with `nightly.budget_per_night` (a spend cap in cost units) a night admits
  problems only while the problems it has started cannot exceed the cap: each
  may spend up to B (a search never exceeds its budget), so it admits
  floor((cap - spent) / B) more, runs them to the end (no search is ever cut),
  then tops up with what early-stopped searches left unspent.  The slice recorded in
  the ledger is what the night admitted, so the next night continues right after it,
  and the night's spend is recorded too;
* with `max_wall_s` (a wall-time cap from the job's start, top-ups included) a night
  stops at a tree boundary (`pipeline.run.wall`): it commits and publishes what it has,
  tops up no more, and is recorded "failed" with reason "wall time" and the problems it
  `left`.  Its slice stays as it was, so rerunning the date searches exactly those (the
  committed trees are skipped; an abandoned tree was never committed).

The output root must be persistent (on a cluster: a bucket, or shared storage mounted
on the head node) for the ledger to carry over from night to night.

The ledger is one file per slice, `nightly-ledger/<seq>.json`, on a local folder and on
object storage alike, created with create-if-absent (`Store.create_exclusive`: a hard link
locally, a conditional put on a bucket): two nights racing for the next slice both try
the same sequence number, exactly one creates it, and the other re-reads the ledger and
takes the slice after it (or, for the same date, the slice just created).  A night writes
its status and spend only to its own slice file, so nights that overlap (one started by
cron while the previous one still runs) never erase each other's entries.  A top-up
extends a night only by creating the *next* slice file as an extension of it, so it fails
(and the night simply stops) when another night has already taken the slice after it.
Nothing is read-modify-written across nights, so a slice can be neither lost nor handed
out twice.  The one-file ledger of earlier versions (`nightly-ledger.json`, local roots
only) is carried over into slice files the first time it is read.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.config import RunConfig
from pipeline.run.summary import RunSummary
from pipeline.store.filesystem import open_store

FOLDER = "nightly-ledger"
# The ledger of earlier versions: one file listing every night, rewritten whole on each
# save (so two overlapping nights could erase each other's entries); local roots only.
LEGACY_LEDGER = "nightly-ledger.json"
Status = Literal["running", "done", "failed"]


@dataclass(frozen=True)
class NightSlice:
    date: str
    run_id: str
    skip: int
    limit: int


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Ledger:
    """The nightly ledger under an output root: one file (or object) per slice."""

    def __init__(self, output_root: Path | str, *, read_only: bool = False) -> None:
        """`read_only`: for a dry run, which must leave the ledger as it found it (an
        earlier version's one-file ledger is then not carried over, and not read)."""
        root = open_store(output_root)
        self.store = root.child(FOLDER)
        self.slots: list[dict[str, Any]] = []
        self.nights: list[dict[str, Any]] = []
        if not root.remote and not read_only:
            self._carry_over(root.local_path)
        self._load()

    def _slot_names(self) -> list[str]:
        return [name for name in self.store.names() if name.endswith(".json")]

    def _carry_over(self, root: Path) -> None:
        """Turn an earlier version's one-file ledger into slice files, once.

        The slice files are written into a staging folder that is renamed into place: a
        rename is atomic, and fails when another process carried the ledger over first.
        """
        legacy = root / LEGACY_LEDGER
        if not legacy.is_file() or self._slot_names():
            return
        try:
            nights = list(json.loads(legacy.read_text())["nights"])
        except FileNotFoundError:  # another process carried it over just now
            return
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{legacy}: unreadable nightly ledger ({exc})") from None
        staging = Path(tempfile.mkdtemp(prefix=f".{FOLDER}.", dir=root))
        staging.chmod(0o755)  # as a plain mkdir would make it (mkdtemp makes it private)
        for seq, night in enumerate(nights, start=1):
            (staging / f"{seq:08d}.json").write_text(json.dumps(night, indent=2) + "\n")
        try:
            os.rename(staging, self.store.local_path)  # replaces only a missing or empty folder
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not self._slot_names():
                raise ValueError(
                    f"{self.store.uri}: cannot carry over {legacy} (the folder is in the way)"
                ) from None
            return
        # Kept for the record under a name no version reads as a ledger.
        legacy.replace(legacy.with_name(f"{LEGACY_LEDGER}.carried-over"))

    def _load(self) -> None:
        self.slots = []
        for name in self._slot_names():
            try:
                slot = json.loads(self.store.read_text(name))
                slot["seq"] = int(name.removesuffix(".json"))
            except (json.JSONDecodeError, ValueError, TypeError) as exc:
                raise ValueError(
                    f"{self.store.uri}/{name}: unreadable nightly ledger ({exc})"
                ) from None
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
        """Rewrite the night's own base slot (never another night's): status and facts.

        The base slot keeps its own limit; extensions add theirs when read.
        """
        base = next(s for s in self.slots if s["seq"] == night["seq"])
        body = {k: v for k, v in night.items() if k not in ("seq", "last_seq", "limit")}
        body["limit"] = base["limit"]
        self.store.write_text(json.dumps(body, indent=2) + "\n", f"{night['seq']:08d}.json")

    def find(self, date: str) -> dict[str, Any] | None:
        return next((n for n in self.nights if n["date"] == date), None)

    def preview(
        self, date: str, run_id: str, base_skip: int, per_night: int, first_limit: int | None = None
    ) -> NightSlice:
        """The slice `plan` would hand `date` now, writing nothing (a dry run's)."""
        night = self.find(date)
        if night is not None:
            return NightSlice(night["date"], night["run_id"], night["skip"], night["limit"])
        skip = max((n["skip"] + n["limit"] for n in self.nights), default=base_skip)
        limit = per_night if first_limit is None else min(per_night, first_limit)
        return NightSlice(date, run_id, skip, limit)

    def plan(
        self, date: str, run_id: str, base_skip: int, per_night: int, first_limit: int | None = None
    ) -> NightSlice:
        """The slice of `date` (new: after the last one; `first_limit` caps a new slice)."""
        for _ in range(20):  # each lost race means another night took a slice: re-read
            night = self.find(date)
            if night is not None:
                night.update(status="running", updated_at=_now())
                self._write(night)
                return NightSlice(night["date"], night["run_id"], night["skip"], night["limit"])
            new = self.preview(date, run_id, base_skip, per_night, first_limit)
            skip, limit = new.skip, new.limit
            seq = (self.slots[-1]["seq"] if self.slots else 0) + 1
            body = {"date": date, "run_id": run_id, "skip": skip, "limit": limit}
            body |= {"status": "running", "updated_at": _now()}
            created = self.store.create_exclusive(
                json.dumps(body, indent=2).encode(), f"{seq:08d}.json"
            )
            self._load()
            if created:
                return NightSlice(date, run_id, skip, limit)
        raise RuntimeError(f"{self.store.uri}: could not claim a nightly slice (20 races lost)")

    def mark(self, date: str, status: Status, **facts: Any) -> None:
        night = self.find(date)
        if night is None:
            raise KeyError(date)
        if "limit" in facts and facts["limit"] != night["limit"]:
            raise ValueError("a nightly slice grows only through extend()")
        facts.pop("limit", None)
        night.update(status=status, updated_at=_now(), **facts)
        self._write(night)

    def extend(self, date: str, limit: int) -> bool:
        """Grow the night's slice to `limit`; False when a later night took the slice after it."""
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

    def unfinished(self, before: str) -> list[dict[str, Any]]:
        return [n for n in self.nights if n["date"] < before and n.get("status") != "done"]


def night_config(config: RunConfig, night: NightSlice) -> RunConfig:
    """The run config of one night: its own run id and its slice of the source."""
    source = config.source.model_copy(update={"skip": night.skip, "limit": night.limit})
    # An empty slice means the source is exhausted: a normal night, not a bad config.
    update = {"run_id": night.run_id, "source": source, "allow_empty": True}
    return config.model_copy(update=update)


def admissible(spend_cap: float, spent: float, budget: float) -> int:
    """Problems that may still start under `spend_cap`: each can spend up to `budget`
    (never more)."""
    return max(0, math.floor((spend_cap - spent) / budget + 1e-9))


def plan_night(
    config: RunConfig, date: dt.date, *, dry_run: bool = False
) -> tuple[Ledger, NightSlice]:
    """The ledger and the slice of `date`, claimed in the ledger (a dry run: the slice a
    real run would get now, the ledger left untouched)."""
    ledger = Ledger(config.output_root, read_only=dry_run)
    day = date.isoformat()
    spend_cap = config.nightly.budget_per_night
    claim = ledger.preview if dry_run else ledger.plan
    night = claim(
        day,
        run_id=f"{config.nightly.run_id_prefix}{day}",
        base_skip=config.source.skip,
        per_night=config.nightly.problems_per_night,
        first_limit=None if spend_cap is None else admissible(spend_cap, 0.0, config.budget),
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
    """Run one night's slice, within its spend cap (`nightly.budget_per_night`) when set.

    Returns the last invocation's summary and the slice as finally admitted.  A night
    stopped at its wall-time cap (`summary.stopped`) is not topped up: its slice stays as
    admitted, for the rerun to finish.
    """
    spend_cap = config.nightly.budget_per_night
    summary = synthesize(night_config(config, night))
    if spend_cap is None:
        return summary, night
    while True:
        spent = run_spent(config, night.run_id)
        # "envelope" is the ledger's key for the spend cap: every ledger written so far has it.
        ledger.mark(night.date, "running", spent=spent, envelope=spend_cap)
        if summary.stopped:  # the wall-time cap: the rest of the slice is the rerun's
            return summary, night
        # Top up only the last night: a later night already starts after this slice.
        last = ledger.nights[-1]["date"] == night.date
        room = config.nightly.problems_per_night - night.limit
        more = min(room, admissible(spend_cap, spent, config.budget)) if last else 0
        if more <= 0 or summary.problems < night.limit:  # nothing left, or source exhausted
            return summary, night
        if not ledger.extend(night.date, night.limit + more):  # a later night came first
            return summary, night
        night = NightSlice(night.date, night.run_id, night.skip, night.limit + more)
        summary = synthesize(night_config(config, night))
