"""One writer per run: an exclusive lease on the run folder, and the base of both leases.

Two processes writing one run id would both search everything (and opening a
sink deletes the other's uncommitted parts).  A writer holds an exclusive
`flock` on `<run folder>/_lease` for as long as it runs, and writes who it is
(host, pid, start time) into `_lease.json`.  The kernel drops the lock when the
process dies, however it dies (SIGKILL included), so a stale lease of a dead
process is simply taken over by the next writer, and two writers can never both
hold it: taking it over is the same atomic `flock` call.

A second writer fails at once with `RunFolderBusy`, one line naming the holder.

Every lease has a *generation*, a number that grows with each holder of the run folder:
the sink writes it into each commit marker (a fencing token, `pipeline.store.run_folder`)
and calls `check()` before each commit.  Here the generation is the count of holders so
far, kept in the lock file itself (written under the lock); `flock` cannot be taken over
while held, so `check()` never fails.  On object storage a holder can be overtaken (it
stalled past its lease's TTL): its `check()` raises `LeaseLost` instead of committing.

Scope: `flock` works on local disks and on NFSv4/Lustre-style shared file
systems that implement it; object storage (s3://, gs://) has no such lock, so a
run there holds a lease object created with a conditional put instead
(`pipeline.store.object_lease`; `RunFolder.lease()` picks one).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pipeline.errors import InputError

LOCK_FILE = "_lease"
HOLDER_FILE = "_lease.json"


class RunFolderBusy(InputError):
    """Another live process holds the run folder's lease."""


class LeaseLost(InputError):
    """Another writer took the run folder's lease over from this one (it stalled past its
    TTL): the run stops without committing more, one line, exit 2."""


class Lease:
    """What both leases share: who holds it, its generation, the check before a commit, and
    `with lease:` holding it for a block."""

    generation: int | None = None  # set while held: the fencing token of this holder

    def acquire(self) -> Self:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Raise `LeaseLost` if another writer holds the lease now (called before a commit)."""
        raise NotImplementedError

    @staticmethod
    def holder_info() -> dict[str, Any]:
        """Who takes the lease: host, pid and start time (what a refused writer is told)."""
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }

    @staticmethod
    def describe(holder: dict[str, Any] | None) -> str:
        if not holder:
            return "another process"
        return f"pid {holder.get('pid')} on {holder.get('host')} (since {holder.get('since')})"

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class FlockLease(Lease):
    """`with FlockLease(run_dir):` holds a local folder's writer lease (`flock`)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._fd: int | None = None

    def acquire(self) -> Self:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderBusy(
                f"run folder {self.run_dir} is in use by {describe_holder(self.run_dir)}; "
                "wait for it to finish or use another run id"
            ) from None
        self._fd = fd
        self.generation = _next_generation(fd)
        temp = self.run_dir / f"{HOLDER_FILE}.{os.getpid()}.tmp"
        temp.write_text(json.dumps(self.holder_info()) + "\n")
        os.replace(temp, self.run_dir / HOLDER_FILE)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        (self.run_dir / HOLDER_FILE).unlink(missing_ok=True)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        self.generation = None

    def check(self) -> None:
        """Nothing to check: a held `flock` cannot be taken over (only released or dropped
        with its process)."""


def _next_generation(fd: int) -> int:
    """The holder count in the lock file (held by us), plus one, written back.  An empty
    file (a folder from before generations, or a new one) counts as 0."""
    first = os.pread(fd, 64, 0).split(b"\n", 1)[0].strip()
    generation = (int(first) if first.isdigit() else 0) + 1
    data = f"{generation}\n".encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    return generation


RunLease = FlockLease  # the name the lease had before the object-store one existed


def read_holder(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / HOLDER_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def describe_holder(run_dir: str | Path) -> str:
    return Lease.describe(read_holder(run_dir))


__all__ = [
    "HOLDER_FILE",
    "LOCK_FILE",
    "FlockLease",
    "Lease",
    "LeaseLost",
    "RunFolderBusy",
    "RunLease",
    "describe_holder",
]
