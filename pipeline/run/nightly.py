"""Nightly slices: each day takes the next unprocessed slice of the source.

A ledger under the output root records which slice (skip, limit) each date got and
whether it finished, so

* a new date takes the slice after the last one handed out (or, first, a gap that a
  night left when the source ended inside its slice while a later night had already
  claimed the slice after it);
* a night whose source ends inside its slice (or before it) records the slice as ending
  where the source does, so the problems past the end are never counted as searched: a
  later night takes them once the source has grown to hold them;
* rerunning a date (after a crash) gets the same slice and run id, and the
  sink's resume skips what was already written;
* unfinished earlier nights are reported with the command that resumes them;
* with `nightly.budget_per_night` (a spend cap in cost units) a night admits
  problems only while the problems it has started cannot exceed the cap: each
  may spend up to B (a search never exceeds its budget), so it admits
  floor((cap - spent) / B) more, runs them to the end (no search is ever cut),
  then tops up with what early-stopped searches left unspent (not under the night
  allocator, which gives the slice's whole total to the slice's own problems).  The
  slice recorded in the ledger is what the night admitted, so the next night continues
  right after it, and the night's spend is recorded too;
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
out twice; the one exception is a night left "running" whose run folder is gone and whose
process is too: the next night records it failed (`night_ledger.GONE`), so it is named
with the command that resumes it, and rerunning its date searches its slice again.

Every planner, the dry run's included, starts from one reading of the ledger,
`night_ledger.read_ledger`, which checks every file against its schema before anything
is written: a bad file is one line naming it and the field (`LedgerError`, exit 2) and
is left as it is.  The one-file ledger of earlier versions (`nightly-ledger.json`, local
roots only) is part of that reading: a real run carries it over into slice files, a dry
run only reads it, so both plan the same slice.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import RunConfig
from pipeline.errors import OutputLocationError
from pipeline.run.night_ledger import (
    CARRIED_OVER,
    FOLDER,
    LedgerError,
    LedgerReading,
    SlotFile,
    Status,
    claimer,
    free_slice,
    read_ledger,
)
from pipeline.run.summary import RunSummary
from pipeline.store.filesystem import describe_os_error, open_store


@dataclass(frozen=True)
class NightSlice:
    date: str
    run_id: str
    skip: int
    limit: int

    def describe(self) -> str:
        """The slice in words: its problems' positions in the source."""
        if self.limit <= 0:
            return f"no problems (an empty slice at problem {self.skip})"
        return f"problems {self.skip}..{self.skip + self.limit - 1}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _slice(night: dict[str, Any]) -> NightSlice:
    return NightSlice(night["date"], night["run_id"], night["skip"], night["limit"])


class Ledger:
    """The nightly ledger under an output root: one file (or object) per slice.

    It starts from `read_ledger`, the one reading (and check) of the files that the dry
    run plans from too; it writes only through `plan`, `mark`, `extend`, `end_at` and
    `settle`, so a ledger that fails the check is never written.
    """

    def __init__(self, output_root: Path | str, *, read_only: bool = False) -> None:
        """`read_only`: for a dry run, which must leave the ledger as it found it (an
        earlier version's one-file ledger is then read, not carried over)."""
        self.root = open_store(output_root)
        self.store = self.root.child(FOLDER)
        self.read_only = read_only
        self.reading = read_ledger(self.root)
        if not read_only:
            self._carry_over()
        self.slots: list[SlotFile] = []
        self.nights: list[dict[str, Any]] = []
        self._use(self.reading)

    def _use(self, reading: LedgerReading) -> None:
        self.slots = reading.slots
        # copies: `reading` stays the ledger as first read (what a rerun of a date finds)
        self.nights = [dict(night) for night in reading.nights]

    def _load(self) -> None:
        self._use(read_ledger(self.root))

    def _carry_over(self) -> None:
        """Turn an earlier version's one-file ledger into slice files, once.

        The slice files are written into a staging folder that is renamed into place: a
        rename is atomic, and fails when another process carried the ledger over first.
        """
        legacy = self.reading.legacy or self.reading.legacy_stale
        if legacy is None:
            return
        with self._writing():
            self._carry_over_files(legacy)

    def _carry_over_files(self, legacy: Path) -> None:
        if self.reading.legacy is not None:
            root = self.root.local_path
            staging = Path(tempfile.mkdtemp(prefix=f".{FOLDER}.", dir=root))
            staging.chmod(0o755)  # as a plain mkdir would make it (mkdtemp makes it private)
            for slot in self.reading.slots:
                (staging / f"{slot.seq:08d}.json").write_text(
                    json.dumps(slot.body, indent=2) + "\n"
                )
            try:
                os.rename(staging, self.store.local_path)  # replaces only a missing or empty folder
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
                if not self.store.names():
                    raise LedgerError(
                        f"{self.store.uri}: cannot carry over {legacy} (the folder is in the way)"
                    ) from None
            self.reading = read_ledger(self.root)  # the slot files now (another's, if it won)
        # Kept for the record under a name no version reads as a ledger.
        with contextlib.suppress(FileNotFoundError):  # another process set it aside first
            legacy.replace(legacy.with_name(CARRIED_OVER))
        self.reading.legacy = self.reading.legacy_stale = None

    def _slot_file(self, seq: int) -> SlotFile:
        return next(slot for slot in self.slots if slot.seq == seq)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A write the output root refuses (read-only, no access, a file in the way) is one
        line naming the output root, exit 2, as for the run folder."""
        try:
            yield
        except OutputLocationError:
            raise
        except OSError as exc:
            raise OutputLocationError(describe_os_error(self.root.uri, exc)) from None

    def _write_slot(self, seq: int, body: dict[str, Any]) -> None:
        if self.read_only:
            raise RuntimeError(f"{self.store.uri}: the ledger was opened read-only")
        with self._writing():
            self.store.write_text(json.dumps(body, indent=2) + "\n", f"{seq:08d}.json")

    def _create(self, body: dict[str, Any], seq: int) -> bool:
        """Create slot `seq` unless it exists (another night's claim): whether it did."""
        with self._writing():
            return self.store.create_exclusive(
                json.dumps(body, indent=2).encode(), f"{seq:08d}.json"
            )

    def _write(self, night: dict[str, Any]) -> None:
        """Rewrite the night's own base slot (never another night's): status and facts.

        The base slot keeps its own limit; extensions add theirs when read.
        """
        base = self._slot_file(night["seq"])
        body = {k: v for k, v in night.items() if k not in ("seq", "last_seq", "limit")}
        body["limit"] = base.body["limit"]
        self._write_slot(night["seq"], body)

    def find(self, date: str) -> dict[str, Any] | None:
        return next((n for n in self.nights if n["date"] == date), None)

    def settle(self, *, keep: str | None = None) -> list[str]:
        """Record the nights whose run is gone (`GONE`) as failed, but `keep`'s (a night
        being claimed again); the dates recorded."""
        settled = []
        for date in self.reading.gone:
            night = self.find(date)
            if date == keep or night is None:
                continue
            self._write(night | {"updated_at": _now()})
            settled.append(date)
        return settled

    def preview(
        self, date: str, run_id: str, base_skip: int, per_night: int, first_limit: int | None = None
    ) -> NightSlice:
        """The slice `plan` would hand `date` now, writing nothing (a dry run's)."""
        night = self.find(date)
        if night is not None:
            return _slice(night)
        size = per_night if first_limit is None else min(per_night, first_limit)
        skip, limit = free_slice(self.nights, base_skip, size)
        return NightSlice(date, run_id, skip, limit)

    def plan(
        self, date: str, run_id: str, base_skip: int, per_night: int, first_limit: int | None = None
    ) -> NightSlice:
        """The slice of `date` (new: the first problems no night holds, after the last
        slice; `first_limit` caps a new slice), claimed: written as running, by this
        process."""
        for _ in range(20):  # each lost race means another night took a slice: re-read
            night = self.find(date)
            if night is not None:
                night.update(status="running", updated_at=_now(), **claimer())
                self._write(night)
                return _slice(night)
            new = self.preview(date, run_id, base_skip, per_night, first_limit)
            seq = (self.slots[-1].seq if self.slots else 0) + 1
            body = {"date": date, "run_id": run_id, "skip": new.skip, "limit": new.limit}
            body |= {"status": "running", "updated_at": _now(), **claimer()}
            created = self._create(body, seq)
            self._load()
            if created:
                return new
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
        """Grow the night's slice to `limit`; False when a later night took the slice after
        it (or any problem of the growth is in another night's slice)."""
        self._load()
        night = self.find(date)
        if night is None:
            raise KeyError(date)
        more = limit - night["limit"]
        if more <= 0:
            return True
        skip = night["skip"] + night["limit"]
        if any(
            n["date"] != date
            and n["limit"]
            and n["skip"] < skip + more
            and skip < n["skip"] + n["limit"]
            for n in self.nights
        ):
            return False  # a night filling a gap grows only into the gap
        seq = night["last_seq"] + 1
        body = {"date": date, "extends": True, "skip": skip, "limit": more}
        created = self._create(body, seq)
        self._load()
        return created

    def end_at(self, date: str, problems: int) -> NightSlice:
        """The source ended inside the night's slice, after `problems` of them: record the
        slice as ending there, so that no problem past the end is ever counted as searched
        (a later night takes them, once the source has grown to hold them)."""
        night = self.find(date)
        if night is None:
            raise KeyError(date)
        if problems >= night["limit"]:
            return _slice(night)
        # the night's own slots, in order: each keeps what lies before the end
        held = 0
        for slot in self.slots:
            if slot.body["date"] != date:
                continue
            keep = max(0, min(slot.body["limit"], problems - held))
            skip = night["skip"] + held
            held += keep
            if (slot.body["skip"], slot.body["limit"]) == (skip, keep):
                continue
            if slot.extends:
                self._write_slot(slot.seq, {**slot.body, "skip": skip, "limit": keep})
            else:  # the base slot with the night's own facts, as this process holds them
                body = {k: v for k, v in night.items() if k not in ("seq", "last_seq")}
                self._write_slot(slot.seq, body | {"limit": keep, "updated_at": _now()})
        self._load()
        ended = self.find(date)
        assert ended is not None
        return _slice(ended)

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
    real run would get now, the ledger left untouched).  Both plan from one reading of the
    ledger (`read_ledger`); the real run first records the nights whose run is gone as
    failed."""
    ledger = Ledger(config.output_root, read_only=dry_run)
    day = date.isoformat()
    spend_cap = config.nightly.budget_per_night
    if not dry_run:  # the dry run reads them as failed too, and writes nothing
        ledger.settle(keep=day)
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
    exhausted = summary.problems < night.limit  # the source ended inside the slice
    if exhausted:
        night = ledger.end_at(night.date, summary.problems)
    _record_night(night, spend_cap=spend_cap)
    if spend_cap is None:
        return summary, night
    while True:
        spent = run_spent(config, night.run_id)
        # "envelope" is the ledger's key for the spend cap: every ledger written so far has it.
        ledger.mark(night.date, "running", spent=spent, envelope=spend_cap)
        _record_night(night, spent=spent, spend_cap=spend_cap)
        if summary.stopped:  # the wall-time cap: the rest of the slice is the rerun's
            return summary, night
        # Top up only the last night: a later night already starts after this slice.  Never
        # under the night allocator: its last window already gave out everything the probes
        # left, and a problem added now would join that window, so a replay of the window
        # would no longer give the second trees it committed.
        tops_up = ledger.nights[-1]["date"] == night.date and not config.allocation.enabled
        room = config.nightly.problems_per_night - night.limit
        more = min(room, admissible(spend_cap, spent, config.budget)) if tops_up else 0
        if more <= 0 or exhausted:
            return summary, night
        if not ledger.extend(night.date, night.limit + more):  # a later night came first
            return summary, night
        night = NightSlice(night.date, night.run_id, night.skip, night.limit + more)
        summary = synthesize(night_config(config, night))
        exhausted = summary.problems < night.limit
        if exhausted:
            night = ledger.end_at(night.date, summary.problems)


def _record_night(
    night: NightSlice, *, spent: float | None = None, spend_cap: float | None = None
) -> None:
    """The night's slice, spend and cap on Ray's metrics endpoint (`pipeline.run.metrics`)."""
    from pipeline.run.metrics import record_night

    run, date, skip, limit = night.run_id, night.date, night.skip, night.limit
    record_night(run, date, skip=skip, limit=limit, spent=spent, spend_cap=spend_cap)
