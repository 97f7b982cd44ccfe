"""The nightly ledger's files: their schema, and the one reading every planner starts from.

The ledger (`pipeline.run.nightly`) is one file per slice under `nightly-ledger/`: a
night's base slot (`NightSlot`: date, run id, skip, limit, status and the facts of the
night) and the extensions a spend-capped night's top-ups add (`ExtensionSlot`).  An
earlier version kept every night in one file, `nightly-ledger.json` (`LegacyLedger`).

`read_ledger` reads all of it, checks every file against its schema and the files
against each other (one base slot per date, one date per run id, extensions contiguous
with their night, no problem in two nights' slices), and returns a `LedgerReading`.  A
file that breaks any of it is a `LedgerError`: one line naming the file and the field,
raised before anything is written, so a bad ledger is never rewritten.  The dry run and
the real run both plan from this reading, the one-file ledger included (the real run then
carries it over into slice files; the dry run only reads it).

A "running" night whose run folder does not exist and whose claimer is known to be gone
is read as failed (`GONE`): its slice is then unfinished, named at the next night's start
with the command that resumes it, and rerunning its date searches it again.  The claimer
is gone when it was this host's and its process has ended, when the slot does not say who
claimed it, or when it was another host's and the claim is older than `CLAIM_GRACE`
(the time between a claim and its run folder's first file: the source and engine checks).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from pipeline.config import RECORD_INT_LIMIT, RUN_ID_PATTERN
from pipeline.errors import InputError, OutputLocationError
from pipeline.store.filesystem import Store
from pipeline.store.run_folder import RUN_PREFIX

FOLDER = "nightly-ledger"
# The ledger of earlier versions: one file listing every night, rewritten whole on each
# save (so two overlapping nights could erase each other's entries); local roots only.
LEGACY_LEDGER = "nightly-ledger.json"
CARRIED_OVER = f"{LEGACY_LEDGER}.carried-over"
# Slot files are `<seq>.json`, seq zero-padded to 8 digits: the name a writer makes.
SLOT_NAME = re.compile(r"^([0-9]{8,})\.json$")
GONE = "run folder gone: no process is running it"
# A claim younger than this, by another host, may still be checking its source and
# engines before its run folder exists (checksums of multi-GB checkpoints take minutes).
CLAIM_GRACE = dt.timedelta(hours=1)
Status = Literal["running", "done", "failed"]


class LedgerError(InputError):
    """A ledger file that breaks the schema: one line naming it (and the field); exit 2."""


def _date(value: str) -> str:
    # dt.date.fromisoformat alone also takes "20261120" and "2026-W47-5"
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        raise ValueError(f"{value!r:.40} is not a YYYY-MM-DD date")
    try:
        dt.date.fromisoformat(value)  # the month and day exist
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a date ({exc})") from None
    return value


def _timestamp(value: str) -> str:
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r:.40} is not an ISO 8601 time") from None
    return value


Date = Annotated[str, AfterValidator(_date)]
Count = Annotated[int, Field(ge=0, le=RECORD_INT_LIMIT)]


class _Schema(BaseModel):
    # strict: "5", 5.0 and true are not counts; forbid: a misspelt key is not ignored
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


class NightSlot(_Schema):
    """A night's base slot: its date's slice and what the night recorded."""

    date: Date
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    skip: Count
    limit: Count
    # absent only in nights of the one-file ledger that never started
    status: Status | None = None
    updated_at: Annotated[str, AfterValidator(_timestamp)] | None = None
    reason: str | None = None
    spent: float | None = Field(None, ge=0)
    envelope: float | None = Field(None, gt=0)  # the spend cap the night ran under
    max_wall_s: float | None = Field(None, gt=0)
    left: Count | None = None
    searched: Count | None = None
    errors: Count | None = None
    host: str | None = None  # who claimed the night: to tell a live claim from a gone one
    pid: int | None = Field(None, ge=1, le=2**31 - 1)  # what os.kill takes


class ExtensionSlot(_Schema):
    """A top-up of a night: `limit` more problems right after its slice so far."""

    date: Date
    extends: Literal[True]
    skip: Count
    limit: Count


class LegacyLedger(_Schema):
    nights: list[NightSlot]


@dataclass(frozen=True)
class SlotFile:
    """One slot as read: its sequence number, where it is, and its checked body."""

    seq: int
    where: str  # the file (or, for the one-file ledger, the file and the night's index)
    body: dict[str, Any]

    @property
    def extends(self) -> bool:
        return bool(self.body.get("extends"))


@dataclass
class LedgerReading:
    """The whole ledger as read and checked, before anything is written.

    `nights`: one dict per date (the base slot's fields, `limit` the whole slice with its
    extensions, `seq` and `last_seq` its first and last slot), in order of their claims;
    a night whose run is gone reads as failed (`gone` lists their dates).  `legacy`: the
    one-file ledger these slots came from, not yet carried over into slice files;
    `legacy_stale`: a one-file ledger whose nights were carried over already (a carry-over
    that stopped before setting it aside).
    """

    slots: list[SlotFile]
    nights: list[dict[str, Any]]
    legacy: Path | None = None
    legacy_stale: Path | None = None
    gone: list[str] = field(default_factory=list)

    def find(self, date: str) -> dict[str, Any] | None:
        return next((n for n in self.nights if n["date"] == date), None)


def read_ledger(root: Store, *, now: dt.datetime | None = None) -> LedgerReading:
    """The ledger under `root`, checked whole (`LedgerError` on the first bad file)."""
    if not root.remote and root.local_path.exists() and not root.local_path.is_dir():
        raise OutputLocationError(f"output_root {root.uri}: not a folder")
    folder = root.child(FOLDER)
    slots = _read_slots(folder)
    legacy = _read_legacy(root)
    reading = LedgerReading(slots, [])
    if legacy is not None:
        path, nights = legacy
        if not slots:
            reading.slots = nights
            reading.legacy = path
        elif _carried_over(nights, slots):
            reading.legacy_stale = path
        else:
            raise LedgerError(
                f"{path}: an earlier version's nightly ledger beside {folder.uri} with other "
                f"nights in it; merge its nights into {folder.uri} by hand or move it aside "
                "(nothing was written)"
            )
    reading.nights = _nights(reading.slots)
    reading.gone = _settle_gone(root, reading.nights, now or dt.datetime.now(dt.UTC))
    return reading


def _bad(where: str, problem: str) -> LedgerError:
    return LedgerError(f"{where}: bad nightly ledger: {problem} (nothing was written)")


def _read_slots(folder: Store) -> list[SlotFile]:
    if not folder.remote and folder.local_path.exists() and not folder.local_path.is_dir():
        raise LedgerError(f"{folder.uri}: bad nightly ledger: not a folder (nothing was written)")
    names = [name for name in folder.names() if name.endswith(".json")]
    seqs: dict[str, int] = {}
    for name in names:
        match = SLOT_NAME.match(name)
        seq = int(match[1]) if match else -1
        if not match or name != f"{seq:08d}.json":
            raise _bad(
                f"{folder.uri}/{name if name.isprintable() else repr(name)}",
                "not a slot file name (<seq>.json, seq zero-padded to 8 digits)",
            )
        seqs[name] = seq
    try:
        raw = folder.read_many([folder.join(name) for name in names])
    except OSError as exc:  # one file at a time, to name the one that fails
        for name in names:
            try:
                folder.read_bytes(name)
            except OSError as one:
                raise LedgerError(
                    f"{folder.uri}/{name}: unreadable nightly ledger ({one.strerror or one})"
                ) from None
        raise LedgerError(f"{folder.uri}: unreadable nightly ledger ({exc})") from None
    slots = []
    for name in names:
        where = f"{folder.uri}/{name}"
        data = _json(raw[folder.join(name)], where)
        model: type[_Schema] = (
            ExtensionSlot if isinstance(data, dict) and "extends" in data else NightSlot
        )
        slots.append(SlotFile(seqs[name], where, _checked(data, model, where)))
    return sorted(slots, key=lambda slot: slot.seq)


def _read_legacy(root: Store) -> tuple[Path, list[SlotFile]] | None:
    if root.remote:  # earlier versions kept the one-file ledger on local roots only
        return None
    path = root.local_path / LEGACY_LEDGER
    try:
        data = _json(path.read_bytes(), str(path))
    except (FileNotFoundError, NotADirectoryError):  # no ledger there (a write says why)
        return None
    except OSError as exc:
        raise LedgerError(f"{path}: unreadable nightly ledger ({exc.strerror or exc})") from None
    nights = _checked(data, LegacyLedger, str(path))["nights"]
    return path, [
        SlotFile(seq, f"{path} (nights[{seq - 1}])", night)
        for seq, night in enumerate(nights, start=1)
    ]


def _carried_over(nights: list[SlotFile], slots: list[SlotFile]) -> bool:
    """The one-file ledger's nights are the first slot files: it was carried over."""
    keys = ("date", "run_id", "skip")
    firsts = [slot for slot in slots if not slot.extends][: len(nights)]
    return len(firsts) == len(nights) and all(
        [old.body.get(k) for k in keys] == [new.body.get(k) for k in keys]
        for old, new in zip(nights, firsts, strict=True)
    )


def _json(data: bytes, where: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # json.loads keeps the last of a repeated key: which one a writer meant is unknown
        keys = [key for key, _ in pairs]
        twice = next((key for key in keys if keys.count(key) > 1), None)
        if twice is not None:
            raise _bad(where, f"{twice}: given twice in one object")
        return dict(pairs)

    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=unique)
    except UnicodeDecodeError as exc:
        raise LedgerError(f"{where}: unreadable nightly ledger (not UTF-8: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{where}: unreadable nightly ledger (not JSON: {exc})") from None


def _checked(data: Any, model: type[_Schema], where: str) -> dict[str, Any]:
    """`data` validated against `model`, as plain JSON values (the keys it had)."""
    if not isinstance(data, dict):
        raise _bad(where, f"expected a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            problem = f"{loc}: missing"
        elif error["type"] == "extra_forbidden":
            problem = f"{loc}: not a ledger field"
        elif error["type"] == "value_error":  # a validator's own words name the value
            problem = f"{loc}: {message}"
        else:
            problem = f"{loc}: {message} (got {error['input']!r:.60})"
        raise _bad(where, " ".join(problem.split())) from None


def _nights(slots: list[SlotFile]) -> list[dict[str, Any]]:
    """The nights the slots make, checked against each other."""
    nights: dict[str, dict[str, Any]] = {}
    where: dict[str, str] = {}
    run_ids: dict[str, str] = {}
    for slot in slots:
        date = slot.body["date"]
        night = nights.get(date)
        if slot.extends:
            if night is None:
                raise _bad(slot.where, f"extends night {date}, which no earlier slot claims")
            end = night["skip"] + night["limit"]
            if slot.body["skip"] != end:
                raise _bad(
                    slot.where,
                    f"skip: {slot.body['skip']} does not continue night {date}'s slice (ends "
                    f"at {end})",
                )
            night["limit"] += slot.body["limit"]
            night["last_seq"] = slot.seq
            continue
        if night is not None:
            raise _bad(slot.where, f"date: {date} is claimed twice (also in {where[date]})")
        run_id = slot.body["run_id"]
        if run_id in run_ids:
            raise _bad(slot.where, f"run_id: {run_id} is claimed twice (also in {run_ids[run_id]})")
        nights[date] = {**slot.body, "seq": slot.seq, "last_seq": slot.seq}
        where[date] = run_ids[run_id] = slot.where
    claimed = sorted(
        (n["skip"], n["skip"] + n["limit"], n["date"]) for n in nights.values() if n["limit"]
    )
    for (_, end, first), (start, _, second) in itertools.pairwise(claimed):
        if start < end:
            raise _bad(
                where[second],
                f"skip: night {second}'s slice overlaps night {first}'s (in {where[first]}): "
                "a slice is handed out once",
            )
    return list(nights.values())


def _settle_gone(root: Store, nights: list[dict[str, Any]], now: dt.datetime) -> list[str]:
    """Read "running" nights whose run folder is gone, and whose claimer is, as failed."""
    gone = []
    for night in nights:
        if night.get("status") != "running" or _claimer_alive(night, now):
            continue
        if root.child(RUN_PREFIX + night["run_id"]).is_dir():
            continue  # its run says how far it got; a rerun of the date resumes it
        night.update(status="failed", reason=GONE)
        gone.append(night["date"])
    return gone


def _claimer_alive(night: dict[str, Any], now: dt.datetime) -> bool:
    host, pid = night.get("host"), night.get("pid")
    if host is None or pid is None:
        return False  # written by hand or by an earlier version: nobody to wait for
    if host == socket.gethostname():
        if pid == os.getpid():
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, another user's
            return True
        return True
    updated = dt.datetime.fromisoformat(night.get("updated_at") or "1970-01-01T00:00:00")
    if updated.tzinfo is None:
        updated = updated.replace(tzinfo=dt.UTC)
    return abs(now - updated) < CLAIM_GRACE  # a claim "from the future" is no live one


def claimer() -> dict[str, Any]:
    """Who claims a night now: recorded in its slot, to tell a live claim from a gone one."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def free_slice(nights: list[dict[str, Any]], base_skip: int, size: int) -> tuple[int, int]:
    """The (skip, limit) a new night takes: the first problems no night's slice holds.

    From `base_skip` when the ledger is empty, else from the first night's start: after the
    last slice, or in a gap that a night left when the source ended inside its slice while
    a later night was already claimed (the gap is what the source has grown into since).
    """
    if not nights:
        return base_skip, size
    start = min(n["skip"] for n in nights)
    for skip, end in sorted((n["skip"], n["skip"] + n["limit"]) for n in nights if n["limit"]):
        if skip > start:
            return start, min(size, skip - start)
        start = max(start, end)
    return start, size


__all__ = [
    "CARRIED_OVER",
    "CLAIM_GRACE",
    "FOLDER",
    "GONE",
    "LEGACY_LEDGER",
    "ExtensionSlot",
    "LedgerError",
    "LedgerReading",
    "LegacyLedger",
    "NightSlot",
    "SlotFile",
    "Status",
    "claimer",
    "free_slice",
    "read_ledger",
]
