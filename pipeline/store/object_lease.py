"""The run lease on object storage (s3://, gs://), where there is no `flock`.

A lease is a numbered object, `run=<id>/_lease/<generation>.json`, created with a
conditional put (`If-None-Match: *` on S3, `ifGenerationMatch=0` on GCS): of two
writers racing for the same generation exactly one succeeds.  The highest generation is
the current lease; it holds `{host, pid, since, expires_at, released}`.

* **Acquire**: read the highest generation; if it is released, expired, or held by a
  process of this host that no longer exists (a SIGKILLed run on the same machine), create
  the next generation; else fail with `RunFolderBusy` naming the holder.
* **Renew**: a daemon thread rewrites the holder's own object with a later `expires_at`
  every `ttl_s / 4`.  Only the holder writes its generation.
* **Release**: the holder marks its object released (a clean exit hands over at once).
* **Fence**: the generation is the holder's fencing token.  The sink calls `check()`
  right before each commit marker: when a later generation exists (this holder stalled
  past `ttl_s` without renewing and another writer took over), it raises `LeaseLost`
  and the run stops with one line (exit 2) without committing.  The marker carries the
  generation, so a batch that slips through (the holder stalled between its check and
  its marker) is still told apart: for each problem, readers count only the rows of the
  newest generation that committed it (`pipeline.store.run_folder`).

What is weaker than `flock`: a holder that dies on *another* machine (a killed head pod)
is taken over only after `ttl_s` (default 300 s) without renewals, and a holder that
stalls for longer than `ttl_s` can be overtaken while it still runs (its next commit
stops it, as above).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any, Self

from common.redact import redact_text
from pipeline.store.filesystem import Store
from pipeline.store.lease import Lease, LeaseLost, RunFolderBusy

LEASE_FOLDER = "_lease"
DEFAULT_TTL_S = 300.0


def _now() -> float:
    return time.time()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ObjectLease(Lease):
    """`with ObjectLease(run_store):` holds the run's writer lease on a bucket."""

    def __init__(self, run: Store, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.run = run
        self.ttl_s = ttl_s
        self.generation: int | None = None
        self.lost = False
        self._holder: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading ------------------------------------------------------------------
    def _generations(self) -> list[int]:
        names = self.run.names(LEASE_FOLDER)
        return sorted(int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit())

    def _read(self, generation: int) -> dict[str, Any]:
        try:
            data = json.loads(self.run.read_text(LEASE_FOLDER, f"{generation:08d}.json"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def is_live(holder: dict[str, Any]) -> bool:
        if not holder or holder.get("released"):
            return False
        if float(holder.get("expires_at", 0)) <= _now():
            return False
        same_host = holder.get("host") == socket.gethostname()
        return not (same_host and not _pid_alive(int(holder.get("pid", 0))))

    # -- the lease ----------------------------------------------------------------
    def acquire(self) -> Self:
        for _ in range(5):  # a lost race re-reads and tries the next generation
            generations = self._generations()
            latest = generations[-1] if generations else 0
            holder = self._read(latest) if latest else {}
            if self.is_live(holder):
                raise RunFolderBusy(
                    f"run folder {self.run.uri} is in use by {self.describe(holder)}; wait for "
                    f"it to finish (or for its lease to expire, {self.ttl_s:.0f} s after its last "
                    "renewal) or use another run id"
                )
            self._holder = {
                **self.holder_info(),
                "expires_at": _now() + self.ttl_s,
                "released": False,
            }
            if self.run.create_exclusive(self._body(), LEASE_FOLDER, f"{latest + 1:08d}.json"):
                self.generation = latest + 1
                self._thread = threading.Thread(target=self._renew_loop, daemon=True)
                self._thread.start()
                return self
        raise RunFolderBusy(f"run folder {self.run.uri}: lost the lease race 5 times; retry")

    def _body(self) -> bytes:
        return (json.dumps(self._holder) + "\n").encode()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                self.renew()
            except Exception as exc:  # a renewal failure is retried; expiry is the backstop
                print(f"warning: run lease renewal failed: {redact_text(exc)}", file=sys.stderr)

    def renew(self) -> None:
        assert self.generation is not None
        if self._generations()[-1:] != [self.generation]:
            self.lost = True
            print(
                f"warning: the run lease of {self.run.uri} was taken over by another writer; "
                "this run stops at its next commit",
                file=sys.stderr,
            )
            self._stop.set()
            return
        self._holder["expires_at"] = _now() + self.ttl_s
        self.run.write_bytes(self._body(), LEASE_FOLDER, f"{self.generation:08d}.json")

    def check(self) -> None:
        """The fence before a commit: raise `LeaseLost` when a later generation exists."""
        generations = self._generations()
        latest = generations[-1] if generations else None
        if not self.lost and latest == self.generation:
            return
        self.lost = True
        self._stop.set()  # a lost lease is never renewed (nor released) again
        holder = self._read(latest) if latest else {}
        raise LeaseLost(
            f"run folder {self.run.uri}: this run's lease (generation {self.generation}) was "
            f"taken over by {self.describe(holder)} (generation {latest}) after it went "
            f"unrenewed for {self.ttl_s:.0f} s; stopped without committing more (rerun the "
            "same run id once that run has ended to resume)"
        )

    def release(self) -> None:
        if self.generation is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self.lost:
            self._holder["released"] = True
            try:
                self.run.write_bytes(self._body(), LEASE_FOLDER, f"{self.generation:08d}.json")
                older = [g for g in self._generations() if g < self.generation]
                self.run.delete_many([self.run.join(LEASE_FOLDER, f"{g:08d}.json") for g in older])
            except Exception as exc:  # a failing bucket: the lease then simply expires
                # (never raise here: it would hide the error that ended the run)
                print(
                    f"warning: the run lease could not be released: {redact_text(exc)}",
                    file=sys.stderr,
                )
        self.generation = None


__all__ = ["DEFAULT_TTL_S", "LEASE_FOLDER", "LeaseLost", "ObjectLease"]
