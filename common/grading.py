"""Bounded answer comparison: every call ends within its time limit, whatever the input.

math-verify hands untrusted LaTeX to sympy, and some inputs never finish:
`9^{9^{9^{9}}}` makes sympy build an integer with billions of digits while
holding the GIL, so a comparison in a worker *thread* cannot be stopped and
freezes every other coroutine of the process (the event loop included).  So:

* `too_costly` rejects, in microseconds and before sympy sees it, text that
  is built to explode: towers of powers (a power inside an exponent), huge
  integer literals or exponents, and answers far longer than any real one;
* everything else runs in a small *process* pool (`pebble.ProcessPool`):
  a comparison that outlives its limit has its worker process killed and
  replaced, and the caller gets `Verdict.TIMEOUT` on time.  The event loop
  only awaits a future, so it keeps running meanwhile.

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
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# Limits of what is worth handing to sympy (a MATH/GSM8K answer is a few dozen characters).
MAX_ANSWER_CHARS = 1_000
MAX_LITERAL_DIGITS = 300
MAX_EXPONENT_DIGITS = 4  # 2^{1000} is a fine answer; 9^{99999} is an attack on sympy
_POOL_WORKERS = 2
# How long a comparison may wait for a worker to start before its own limit runs.
_START_MARGIN_S = 5.0
# What a batch (`compare_all`) allows past its limit, once the pool is up: replacing the
# workers killed at the limit.
_BATCH_MARGIN_S = 1.0


class Verdict(enum.StrEnum):
    MATCH = "match"
    NO_MATCH = "no_match"
    TIMEOUT = "timeout"  # the comparison outlived its limit; its worker was replaced
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


# A power's exponent, braced or bare: "^{...}" (one brace level) or "^9", "**9".
_EXPONENT = re.compile(r"(?:\^|\*\*)\s*(\{(?:[^{}]|\{[^{}]*\})*\}|\(?[-+]?[\w.]+\)?)")
_DIGITS = re.compile(r"\d+")


def too_costly(text: str) -> str | None:
    """Why `text` is not worth handing to sympy, or None when it is."""
    if len(text) > MAX_ANSWER_CHARS:
        return f"answer is {len(text)} characters (limit {MAX_ANSWER_CHARS})"
    if "^" in text or "**" in text:
        # A power right after an exponent ("9^9^9", "2**3**4") is a tower too.
        if re.search(r"(?:\^|\*\*)\s*(?:\d+|\{[^{}]*\})\s*(?:\^|\*\*)", text) or re.search(
            r"(?:\^|\*\*)\s*\([^()]*(?:\^|\*\*)", text
        ):
            return "tower of powers"
        for match in _EXPONENT.finditer(text):
            exponent = match.group(1)
            if "^" in exponent or "**" in exponent or "\\exp" in exponent:
                return "tower of powers"
            if any(len(d) > MAX_EXPONENT_DIGITS for d in _DIGITS.findall(exponent)):
                return f"exponent {exponent[:40]} is too large"
    if any(len(d) > MAX_LITERAL_DIGITS for d in _DIGITS.findall(text)):
        return f"a number literal has more than {MAX_LITERAL_DIGITS} digits"
    if "!" in text and re.search(r"\d{4,}\s*!", text):
        return "factorial of a large number"
    return None


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


def _quiet() -> None:
    """Worker start: math-verify warns on every call that its own (SIGALRM) timeouts are
    off; here the pool bounds the time."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)


_pool: Any = None
_pool_lock = threading.Lock()


def _get_pool() -> Any:
    global _pool
    with _pool_lock:
        if _pool is None or not _pool.active:
            # forkserver, not fork: forking a process that runs other threads (llama.cpp,
            # Ray's gRPC) stalled the workers for a minute here.  The fork server starts
            # once, clean, with math-verify preloaded, and forks warm workers from itself.
            # (Like spawn it imports the __main__ module: a script that grades must use an
            # `if __name__ == "__main__":` guard, as Ray's workers and `python -m` do.)
            # Imported here: importing the records (e.g. to read or publish a run) needs no pool.
            import pebble  # type: ignore[import-untyped, unused-ignore]

            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["common.grading", "math_verify"])
            _pool = pebble.ProcessPool(
                max_workers=_POOL_WORKERS, initializer=_quiet, context=context
            )
        return _pool


def _noop() -> None:
    """Runs in a pool worker: proves the pool is up."""


async def _ready() -> None:
    """Wait until the pool's workers run (a cold start takes seconds: the fork server
    imports math-verify)."""
    pool = _get_pool()
    if getattr(pool, "_bgmcts_ready", False):
        return
    await asyncio.wait_for(asyncio.wrap_future(pool.schedule(_noop)), 120)
    pool._bgmcts_ready = True


def shutdown_pool() -> None:
    """Stop the comparison workers (tests; a process exit stops them anyway)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.stop()
            _pool.join(timeout=5)
            _pool = None


async def compare(answer: str | None, reference: str, timeout_s: float = 5.0) -> Verdict:
    """Whether `answer` equals `reference` mathematically, decided within `timeout_s`.

    Equal strings match at once; text too costly for sympy is rejected at once;
    otherwise math-verify runs in a worker process that is killed (and replaced)
    when it outlives `timeout_s`.  A parse error is no match.
    """
    stats = _STATS.get()
    verdict = await _compare(answer, reference, timeout_s)
    if stats is not None:
        stats.comparisons += 1
        stats.timeouts += verdict.bounded
    return verdict


async def _compare(answer: str | None, reference: str, timeout_s: float) -> Verdict:
    if answer is None:
        return Verdict.NO_MATCH
    if answer.strip() == reference.strip():
        return Verdict.MATCH
    if too_costly(answer) or too_costly(reference):
        return Verdict.REJECTED
    if timeout_s <= 0:
        return Verdict.TIMEOUT
    future = _get_pool().schedule(_verify, args=(answer, reference), timeout=timeout_s)
    try:
        # The pool's own timer kills the worker; wait_for is a backstop (a worker that
        # has not started yet still answers within the limit plus a margin).
        matched = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s + _START_MARGIN_S)
    except (TimeoutError, concurrent.futures.TimeoutError):
        future.cancel()
        return Verdict.TIMEOUT
    except asyncio.CancelledError:
        future.cancel()
        raise
    except Exception:  # math-verify failed on odd input, or its worker died: not a match
        return Verdict.NO_MATCH
    return Verdict.MATCH if matched else Verdict.NO_MATCH


async def compare_all(
    pairs: Sequence[tuple[str | None, str]], timeout_s: float = 5.0
) -> list[Verdict]:
    """`compare` of every pair at once, all decided within one time limit.

    The pool is started first (a cold start is not the comparisons' time); then
    every comparison is handed to it together, and whatever has not finished
    `timeout_s` (plus `_BATCH_MARGIN_S` for replacing killed workers) later is
    cancelled and counts as `Verdict.TIMEOUT` (`grade_timeouts` in the trees
    rows).  So a batch of slow comparisons costs one limit, not one limit each:
    the pool has only `_POOL_WORKERS` workers, and queued comparisons would
    otherwise wait their turn.
    """
    if not pairs:
        return []
    await _ready()
    tasks = [asyncio.ensure_future(compare(a, b, timeout_s)) for a, b in pairs]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s + _BATCH_MARGIN_S)
    for task in pending:
        task.cancel()
    stats = _STATS.get()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
        if stats is not None:  # cancelled before `compare` could count them
            stats.comparisons += len(pending)
            stats.timeouts += len(pending)
    return [t.result() if t in done else Verdict.TIMEOUT for t in tasks]


async def answers_match(answer: str | None, reference: str, timeout_s: float = 5.0) -> bool:
    """`compare` as a bool: a timeout or a rejection counts as no match."""
    return await compare(answer, reference, timeout_s) is Verdict.MATCH


__all__ = [
    "GradeStats",
    "Verdict",
    "answers_match",
    "compare",
    "compare_all",
    "counting",
    "shutdown_pool",
    "too_costly",
]
