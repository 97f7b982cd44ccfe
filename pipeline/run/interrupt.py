"""Ctrl-C that is not lost: a SIGINT is remembered as well as raised.

Python turns SIGINT into a KeyboardInterrupt raised wherever the main thread is at that
moment.  Code that catches it there and carries on (a finalizer, an atexit callback, a
library's ``except BaseException`` around a wait, a lock's cleanup that fails in its
place) loses it, and the run goes on to finish and exit 0 as if nothing was pressed.
Where the main thread is when the signal lands is a matter of timing, so a Ctrl-C that
works on an idle machine can be lost on a loaded one.

`honoured` installs a SIGINT handler that records the signal before raising it, so a
lost KeyboardInterrupt is raised again at the next safe point (`raise_if_interrupted`:
the synthesis run checks after each commit and before it writes its report), and the
job exits 130 whatever became of the first one (`jobs.exits.guarded`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_interrupted = threading.Event()


@contextlib.contextmanager
def honoured() -> Iterator[None]:
    """Within the block a SIGINT is recorded, then handled as before (by default: a
    KeyboardInterrupt).  The record starts clear.  An ignored SIGINT (a job started with
    ``nohup`` or in the background by a non-interactive shell) stays ignored, and only
    the main thread may set a handler: elsewhere the block only clears the record.  A
    block inside another keeps the outer one's handler and record."""
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "records_sigint", False):  # inside another block: its record
        yield
        return
    _interrupted.clear()
    own = threading.current_thread() is threading.main_thread() and previous not in (
        signal.SIG_IGN,
        None,  # a handler set from C, which Python cannot put back
    )
    if not own:
        yield
        return

    def record(signum: int, frame: FrameType | None) -> None:
        _interrupted.set()
        if callable(previous):
            previous(signum, frame)  # Python's default raises KeyboardInterrupt
        else:  # SIG_DFL would kill the process, with no report of what was committed
            raise KeyboardInterrupt

    record.records_sigint = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, record)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupted() -> bool:
    """Has a SIGINT arrived inside `honoured` (whether or not its KeyboardInterrupt
    got through)?"""
    return _interrupted.is_set()


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a SIGINT that arrived, if one did: a safe point
    where a run stops even when the first KeyboardInterrupt was caught and dropped."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


__all__ = ["honoured", "interrupted", "raise_if_interrupted"]
