"""Ctrl-C is honoured even when the KeyboardInterrupt it raises is caught and dropped on
the way (`pipeline.run.interrupt`, `jobs.exits.guarded`): the job exits 130, and a
synthesis run stops at its next commit instead of finishing.

In process, with a real SIGINT sent to this process (`signal.raise_signal`); the drop is
what a finalizer, an atexit callback or a library's ``except BaseException`` does."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from jobs.exits import INTERRUPTED, OK, guarded
from pipeline.run.interrupt import honoured, interrupted
from pipeline.run.stream_rows import STREAM_SCHEMA, encode_records
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import _commit_stream


@pytest.fixture(autouse=True)
def _sigint_as_at_a_terminal() -> Iterator[None]:
    """Python's own SIGINT handler, as a command started from a terminal has: a test
    process started in the background by a non-interactive shell (a CI runner, `cmd &`)
    inherits SIGINT ignored, which the command rightly keeps ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def ctrl_c_dropped() -> None:
    """A SIGINT whose KeyboardInterrupt is caught where it lands and not raised again."""
    with contextlib.suppress(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def test_a_dropped_interrupt_still_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    def action() -> int:
        ctrl_c_dropped()
        return OK  # the run "finished": before, the command exited 0

    assert guarded(action, verbose=False) == INTERRUPTED
    assert capsys.readouterr().err == "interrupted; rerun the same command to resume\n"


def test_an_error_after_a_dropped_interrupt_is_the_interrupt() -> None:
    def action() -> int:
        ctrl_c_dropped()
        raise RuntimeError("release unlocked lock")  # what the dropped interrupt broke

    assert guarded(action, verbose=False) == INTERRUPTED


def test_an_interrupt_that_gets_through_exits_130_and_none_exits_as_the_action_says() -> None:
    def raised() -> int:
        signal.raise_signal(signal.SIGINT)
        return OK

    assert guarded(raised, verbose=False) == INTERRUPTED
    assert guarded(lambda: OK, verbose=False) == OK  # the record starts clear each time
    assert guarded(lambda: 1, verbose=False) == 1


def test_the_handler_is_put_back_and_an_ignored_sigint_stays_ignored() -> None:
    before = signal.getsignal(signal.SIGINT)
    guarded(lambda: OK, verbose=False)
    assert signal.getsignal(signal.SIGINT) is before
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup` or a background job starts it
    try:

        def action() -> int:
            signal.raise_signal(signal.SIGINT)
            return OK

        assert guarded(action, verbose=False) == OK
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_block_inside_another_keeps_its_record() -> None:
    with honoured():
        ctrl_c_dropped()
        with honoured():
            assert interrupted()
        assert interrupted()


class _Stream:
    """A search stage's output as the driver iterates it: one finished tree per block."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems

    def iter_batches(self, **_: Any) -> Iterator[pa.Table]:
        for pid in self.problems:
            records = {"trees": [{"problem_id": pid}]}
            row: dict[str, Any] = {"kind": "problem", "problem_id": pid, "skipped": 0}
            row |= {"problem": None, "reference": None, "records": encode_records(records)}
            yield pa.Table.from_pylist([row], schema=STREAM_SCHEMA)


class _Sink:
    """Commits in memory; the first commit is where Ctrl-C lands, and is dropped."""

    def __init__(self) -> None:
        self.committed: list[str] = []

    def write_batch(self, records: dict[str, list[dict[str, Any]]]) -> None:
        self.committed.append(records["trees"][0]["problem_id"])
        if len(self.committed) == 1:
            ctrl_c_dropped()


def test_a_run_stops_at_the_next_commit_after_a_dropped_interrupt() -> None:
    sink = _Sink()
    summary = RunSummary("r", "out/run=r")
    with honoured(), pytest.raises(KeyboardInterrupt):
        _commit_stream(_Stream(["p0", "p1", "p2"]), sink, summary, None, False, None)  # type: ignore[arg-type]
    assert sink.committed == ["p0"]  # before, all three: the run went on to its end
    assert summary.searched == 1
