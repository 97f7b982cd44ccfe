"""Bounded answer comparison: every call ends within its time limit, whatever the input.

math-verify hands untrusted LaTeX to sympy, and some inputs never finish:
`9^{9^{9^{9}}}` makes sympy build an integer with billions of digits while
holding the GIL, so a comparison in a worker *thread* cannot be stopped and
freezes every other coroutine of the process (the event loop included).  So:

* `too_costly` rejects, in microseconds and before sympy sees it, text that
  is built to explode: towers of powers (a power inside an exponent, at any
  depth of braces), huge integer literals, exponents or products of exponents,
  factorials of large or computed numbers, and answers far longer than any real one;
* everything else runs in a small *process* pool (`pebble.ProcessPool`):
  a comparison that outlives its limit has its worker process killed and
  replaced, and the caller gets `Verdict.TIMEOUT` on time.  The event loop
  only awaits a future, so it keeps running meanwhile.

The promise: `compare` and `compare_all` return within ``timeout_s +
POOL_START_ALLOWANCE_S`` of the call, whatever the answers and whatever the
pool is doing: a cold pool starts in a thread of its own (its start takes
seconds on a busy machine: the fork server imports math-verify), and a comparison
still waiting for the pool, or queued behind busy workers, at that deadline is
cancelled and is a `Verdict.TIMEOUT`.  `warm_up` starts the pool early, so
that a process that will grade (a search actor) does not spend its first limit on it.

A timed-out or rejected comparison counts as no match; `counting()` collects
how many there were (the `trees` rows report it as `grade_timeouts`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import enum
import logging
import multiprocessing
import re
import signal
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

# Limits of what is worth handing to sympy (a MATH/GSM8K answer is a few dozen characters).
MAX_ANSWER_CHARS = 1_000
MAX_LITERAL_DIGITS = 300
MAX_EXPONENT_DIGITS = 4  # 2^{1000} is a fine answer; 9^{99999} is an attack on sympy
MAX_FACTORIAL_DIGITS = 3  # 999! has 2,565 digits; sympy computes (99999)! for seconds
_POOL_WORKERS = 2
# What a call may take past its limit: a cold pool's start, or a wait for a busy worker.
# `compare` and `compare_all` return within `timeout_s + POOL_START_ALLOWANCE_S`.
POOL_START_ALLOWANCE_S = 1.5
# How long `pool_ready` waits for a pool to start: a start took about 10 s at load 9.
POOL_READY_WAIT_S = 120.0
# Kept back from the allowance for what follows the deadline: cancelling the comparison
# (its worker is killed in pebble's own thread) and waking the caller on a busy loop.
_RETURN_RESERVE_S = 0.25


class Verdict(enum.StrEnum):
    MATCH = "match"
    NO_MATCH = "no_match"
    # the comparison outlived its limit, or its worker ran out of memory or stack or
    # died on it: the worker was replaced
    TIMEOUT = "timeout"
    REJECTED = "rejected"  # too costly to try (see `too_costly`)

    @property
    def bounded(self) -> bool:
        """Whether the limit, not the mathematics, decided this verdict."""
        return self in (Verdict.TIMEOUT, Verdict.REJECTED)


@dataclass
class GradeStats:
    comparisons: int = 0
    timeouts: int = 0  # timed out or rejected before sympy: graded incorrect


_STATS: contextvars.ContextVar[GradeStats | None] = contextvars.ContextVar(
    "grade_stats", default=None
)


@contextlib.contextmanager
def counting() -> Iterator[GradeStats]:
    """Count the comparisons made inside the block (tasks it starts included)."""
    stats = GradeStats()
    token = _STATS.set(stats)
    try:
        yield stats
    finally:
        _STATS.reset(token)


# ------------------------------------------------------------------ the cheap filter
_DIGITS = re.compile(r"\d+")
_POWER = re.compile(r"\^|\*\*")
_PRODUCT = re.compile(r"\\cdot|\\times|\*|\)\s*\(|\d\s+\d")
# A bare operand: a number, a command or one letter ("x^2y" is x squared times y).
_TOKEN = re.compile(r"[-+]?\s*(?:\\[a-zA-Z]+|\d+(?:\.\d+)?|\w)")
_OPEN = {"(": ")", "{": "}", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _pairs(text: str) -> dict[int, int]:
    """Index of every bracket -> index of its partner (both ways), in one pass."""
    partner: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch in _OPEN:
            stack.append(i)
        elif ch in _CLOSE and stack:
            # a closer closes the innermost opener of any kind: the filter only needs
            # the extent of groups, not well-formed LaTeX
            j = stack.pop()
            partner[i], partner[j] = j, i
    return partner


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n":
        i += 1
    return i


def _operand_after(text: str, i: int, partner: dict[int, int]) -> tuple[int, int]:
    """[start, end) of the operand that starts at `i` (an exponent): a bracketed group
    (``\\left`` included) or a bare token."""
    i = _skip_space(text, i)
    if text.startswith("\\left", i):
        i = _skip_space(text, i + len("\\left"))
    if i < len(text) and text[i] in _OPEN and i in partner:
        return i, partner[i] + 1
    match = _TOKEN.match(text, i)
    return (i, match.end()) if match else (i, i)


def _operand_before(text: str, i: int, partner: dict[int, int]) -> tuple[int, int]:
    """[start, end) of the operand that ends just before `i` (a power's base, what a
    factorial applies to): a bracketed group (``\\right`` included) or a bare token."""
    j = i
    while j > 0 and text[j - 1] in " \t\n":
        j -= 1
    end = j
    if j > 0 and text[j - 1] in _CLOSE and j - 1 in partner:
        start = partner[j - 1]
        if text.endswith("\\left", 0, start):
            start -= len("\\left")
        return start, end
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "._"):
        j -= 1
    return j, end


def _size_digits(exponent: str) -> int:
    """How many decimal digits the exponent's value may have: its longest number, or,
    when its numbers are multiplied, all their digits together."""
    digits = [len(d) for d in _DIGITS.findall(exponent)]
    if not digits:
        return 0
    return sum(digits) if _PRODUCT.search(exponent) else max(digits)


def too_costly(text: str) -> str | None:
    """Why `text` is not worth handing to sympy, or None when it is.

    Linear in the text (one pass pairs the brackets): it runs on every answer.
    """
    if len(text) > MAX_ANSWER_CHARS:
        return f"answer is {len(text)} characters (limit {MAX_ANSWER_CHARS})"
    if any(len(d) > MAX_LITERAL_DIGITS for d in _DIGITS.findall(text)):
        return f"a number literal has more than {MAX_LITERAL_DIGITS} digits"
    partner = _pairs(text)
    for power in _POWER.finditer(text):
        start, end = _operand_after(text, power.end(), partner)
        exponent = text[start:end]
        if _POWER.search(exponent) or "\\exp" in exponent or re.search(r"\d\s*!", exponent):
            return "tower of powers"
        if _POWER.match(text, _skip_space(text, end)):  # 9^9^9, 9^{9}^{9}: a tower too
            return "tower of powers"
        size = _size_digits(exponent)
        if size > MAX_EXPONENT_DIGITS:
            return f"exponent {exponent[:40]} is too large"
        if size > 2 and text[: power.start()].rstrip().endswith("matrix}"):
            return f"power {exponent[:40]} of a matrix is too large"
        # a power of a group with powers inside, (9999^{9999})^{9999}: the exponents multiply
        base = text[slice(*_operand_before(text, power.start(), partner))]
        if base[:1] in _OPEN or base.startswith("\\left"):
            inner = sum(
                _size_digits(text[slice(*_operand_after(text, p.end(), partner))])
                for p in _POWER.finditer(base)
            )
            if inner and size + inner > MAX_EXPONENT_DIGITS:
                return (
                    f"power of a power, {text[power.start() - len(base) : end][:40]}, is too large"
                )
    for bang in re.finditer(r"(?<!\\)!+", text):  # "\!" is a LaTeX space, not a factorial
        start, end = _operand_before(text, bang.start(), partner)
        operand = text[start:end]
        if _POWER.search(operand) or "!" in operand or _POWER.search(text[:start].rstrip()[-2:]):
            return f"factorial of a computed number, {operand[:40]}"
        if any(len(d) > MAX_FACTORIAL_DIGITS for d in _DIGITS.findall(operand)):
            return f"factorial of a large number, {operand[:40]}"
    return None


# ------------------------------------------------------------------ the pool
def _latex(answer: str) -> str:
    """Math mode for a bare answer ("\\frac{1}{2}" -> "$\\frac{1}{2}$")."""
    bare = answer.replace("\\$", "")  # an escaped dollar ("\\$18.90") is not math mode
    if "$" in bare or "\\boxed" in answer or "\\(" in answer or "\\[" in answer:
        return answer
    return f"${answer}$"


def _verify(answer: str, reference: str) -> bool:
    """Runs in a pool worker process."""
    from math_verify import parse, verify  # type: ignore[import-untyped]

    # math-verify's own timeouts use SIGALRM; the pool bounds the time instead.
    gold = parse(_latex(reference), parsing_timeout=None)
    target = parse(_latex(answer), parsing_timeout=None)
    if not gold or not target:
        return False
    return bool(verify(gold, target, timeout_seconds=None))


def _worker_start() -> None:
    """Runs in each pool worker as it starts."""
    # math-verify warns on every call that its own (SIGALRM) timeouts are off; here the
    # pool bounds the time.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # pebble stops a worker with SIGTERM and a Python handler, which a worker stuck in
    # sympy's C code (a big-integer power) only runs when that returns: the kill waited
    # 3 s for pebble's SIGKILL, the worker meanwhile lost to the pool.  The default action
    # ends it at once, as the SIGKILL would; pebble stops a worker only while it holds the
    # worker's channel lock, so nothing is left half-sent.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _noop() -> None:
    """Runs in a pool worker: proves the pool is up."""


class _PoolStart:
    """One pool, started in a thread of its own: pebble starts its workers inside the
    first `schedule` call, and with the fork server importing math-verify that takes
    seconds, which on the event loop's thread would stall every coroutine and let a
    comparison overrun its limit.  `ready` holds the pool once a worker has run."""

    def __init__(self) -> None:
        self.ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
        # running from the start: a waiter that gives up (its deadline) cancels its own
        # asyncio wrapper, and that must not cancel the start for everyone else
        self.ready.set_running_or_notify_cancel()
        threading.Thread(target=self._start, name="grading-pool-start", daemon=True).start()

    def _start(self) -> None:
        try:
            # forkserver, not fork: forking a process that runs other threads (llama.cpp,
            # Ray's gRPC) stalled the workers for a minute here.  The fork server starts
            # once, clean, with math-verify preloaded, and forks warm workers from itself.
            # (Like spawn it imports the __main__ module: a script that grades must use an
            # `if __name__ == "__main__":` guard, as Ray's workers and `python -m` do.)
            # Imported here: importing the records (e.g. to read or publish a run) needs no
            # pool.
            import pebble  # type: ignore[import-untyped, unused-ignore]

            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["common.grading", "math_verify"])
            pool = pebble.ProcessPool(
                max_workers=_POOL_WORKERS, initializer=_worker_start, context=context
            )
            pool.schedule(_noop).result()
        except BaseException as error:  # handed to every waiter
            self.ready.set_exception(error)
        else:
            self.ready.set_result(pool)

    def usable(self) -> bool:
        if not self.ready.done():
            return True  # still starting
        return self.ready.exception() is None and self.ready.result().active


_start: _PoolStart | None = None
_start_lock = threading.Lock()


def _pool_start() -> _PoolStart:
    global _start
    with _start_lock:
        if _start is None or not _start.usable():
            _start = _PoolStart()
        return _start


def warm_up() -> None:
    """Start the comparison pool in the background, if it is not up yet (returns at once).

    A process that will grade calls it early, so that its first comparisons do not
    spend their limit on the pool's start."""
    _pool_start()


async def pool_ready(timeout_s: float = POOL_READY_WAIT_S) -> bool:
    """Wait (at most `timeout_s`) for the comparison pool to be up, starting it if need be;
    whether it is.

    `compare` counts a cold pool's start inside its bound, so on a busy machine, where the
    start takes longer than the limit, the first comparisons of a process time out and
    their answers are left ungraded.  A caller that labels training data waits here first:
    its labels then do not depend on how busy the machine was when it began."""
    start = _pool_start()
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(start.ready)), timeout_s)
    except Exception:  # not up in time, or it cannot start: `compare` says so in its verdicts
        return False
    return True


def _stop(ready: concurrent.futures.Future[Any]) -> None:
    if ready.exception() is None:
        pool = ready.result()
        pool.stop()
        pool.join(timeout=5)


def shutdown_pool() -> None:
    """Stop the comparison workers (tests; a process exit stops them anyway)."""
    global _start
    with _start_lock:
        start, _start = _start, None
    if start is not None:
        if start.ready.done():
            _stop(start.ready)
        else:  # still starting: stopped as soon as it is up
            start.ready.add_done_callback(_stop)


# ------------------------------------------------------------------ comparisons
def _deadline(timeout_s: float) -> float:
    """The event-loop time by which a call with this limit has returned."""
    return (
        asyncio.get_running_loop().time() + timeout_s + POOL_START_ALLOWANCE_S - _RETURN_RESERVE_S
    )


async def compare(answer: str | None, reference: str, timeout_s: float = 5.0) -> Verdict:
    """Whether `answer` equals `reference` mathematically, decided within `timeout_s`.

    Equal strings match at once; text too costly for sympy is rejected at once;
    otherwise math-verify runs in a worker process that is killed (and replaced)
    when it outlives `timeout_s`.  A parse error is no match.  The call returns
    within ``timeout_s + POOL_START_ALLOWANCE_S``, a cold pool's start included.
    """
    return await _counted(answer, reference, timeout_s, _deadline(timeout_s))


async def _counted(
    answer: str | None, reference: str, timeout_s: float, deadline: float
) -> Verdict:
    stats = _STATS.get()
    verdict = await _compare(answer, reference, timeout_s, deadline)
    if stats is not None:
        stats.comparisons += 1
        stats.timeouts += verdict.bounded
    return verdict


async def _compare(
    answer: str | None, reference: str, timeout_s: float, deadline: float
) -> Verdict:
    if answer is None:
        return Verdict.NO_MATCH
    if answer.strip() == reference.strip():
        return Verdict.MATCH
    if too_costly(answer) or too_costly(reference):
        return Verdict.REJECTED
    if timeout_s <= 0:
        return Verdict.TIMEOUT
    future: Any = None
    try:
        async with asyncio.timeout_at(deadline):
            pool = await asyncio.wrap_future(_pool_start().ready)
            # pebble's own timer kills the worker `timeout_s` after it starts the
            # comparison; the deadline also bounds the wait for a free worker
            future = pool.schedule(_verify, args=(answer, reference), timeout=timeout_s)
            matched = await asyncio.wrap_future(future)
    except TimeoutError:  # ours (the deadline) or pebble's (the worker was killed)
        return Verdict.TIMEOUT
    except (MemoryError, RecursionError):  # the worker's, raised in it: the input's size
        return Verdict.TIMEOUT
    except Exception as error:
        from pebble import ProcessExpired  # type: ignore[import-untyped, unused-ignore]

        # a worker killed by the system (out of memory) on this input: bounded, not maths
        if isinstance(error, ProcessExpired | BrokenProcessPool):
            return Verdict.TIMEOUT
        return Verdict.NO_MATCH  # math-verify failed on odd input: not a match
    finally:
        if future is not None:
            future.cancel()  # a no-op once done; kills the worker of one still running
    return Verdict.MATCH if matched else Verdict.NO_MATCH


async def compare_all(
    pairs: Sequence[tuple[str | None, str]], timeout_s: float = 5.0
) -> list[Verdict]:
    """`compare` of every pair at once, all decided within one time limit.

    Every comparison is handed to the pool together, under one deadline:
    ``timeout_s + POOL_START_ALLOWANCE_S`` from the call, a cold pool's start
    included.  Whatever has not finished by then is cancelled and counts as
    `Verdict.TIMEOUT` (`grade_timeouts` in the trees rows).  So a batch of slow
    comparisons costs one limit, not one limit each: the pool has only
    `_POOL_WORKERS` workers, and queued comparisons would otherwise wait their turn.
    """
    if not pairs:
        return []
    deadline = _deadline(timeout_s)
    return list(await asyncio.gather(*(_counted(a, b, timeout_s, deadline) for a, b in pairs)))


async def answers_match(answer: str | None, reference: str, timeout_s: float = 5.0) -> bool:
    """`compare` as a bool: a timeout or a rejection counts as no match."""
    return await compare(answer, reference, timeout_s) is Verdict.MATCH


__all__ = [
    "POOL_START_ALLOWANCE_S",
    "GradeStats",
    "Verdict",
    "answers_match",
    "compare",
    "compare_all",
    "counting",
    "shutdown_pool",
    "too_costly",
    "warm_up",
]
