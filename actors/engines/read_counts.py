"""Token counts as an engine reports them, checked where they enter the pipeline.

Every engine's answer becomes a `Completion` or a `StepValues` (`actors.engines.base`),
and both pass their counts through `checked_counts` when they are made.  A count comes
from the engine's server (an OpenAI-compatible server's ``usage``, llama.cpp's
``timings``), and a server can say what cannot be: cached prompt tokens above the prompt
tokens (a proxy that adds up its retries' cache reads), a negative count, a string.
Summed into the trees table those make every rate built on them lie (a prefix-cache hit
rate of 250%, or -1.1%; fewer than no tokens computed), and admission steers by that
hit rate.  So each count is made a whole number of at least 0 and the cached tokens at
most the prompt tokens, and the first time an engine is seen doing it (per engine module
and kind of fault) a warning names the engine and the numbers, once per process.

A warning in a replica's log is gone with the cluster, so each answer also says which
faults its counts had: `count` and `checked_counts` add the fault's name (a field of
`search.protocols.ClampedCounts`) to the `faults` set they are given, the engine hands
it to its `Completion` / `StepValues` (`count_faults`), and the run counts those answers
per engine into its summary, run.json and report (`actors.progress`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from typing import Any

log = logging.getLogger(__name__)

# (engine, fault) already warned about in this process
_WARNED: set[tuple[str, str]] = set()
# frames that are not the engine: the dataclass machinery and the contract's own module
_NOT_THE_ENGINE = ("dataclasses", __name__, "actors.engines.base")


def _caller() -> str:
    """The module that made the answer being checked (the engine's own)."""
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module not in _NOT_THE_ENGINE and not module.startswith("<"):
            return module
        frame = frame.f_back  # type: ignore[assignment]
    return "an engine"


def _warn_once(engine: str, fault: str, message: str) -> None:
    engine = engine or _caller()  # named only when there is something to say
    if (engine, fault) in _WARNED:
        return
    _WARNED.add((engine, fault))
    log.warning(
        "%s: the engine %s; clamped so that no rate built on it leaves [0, 1] "
        "(said once per engine and fault)",
        engine,
        message,
    )


def count(value: Any, what: str, engine: str = "", faults: set[str] | None = None) -> int:
    """`value` as a whole number of at least 0 (0 for what is no count at all, such as
    a string, a bool or NaN), with the warning of the module docstring; `what` names it,
    and the fault's name goes into `faults`.  None is 0 without a word: the engine did
    not report it."""
    if type(value) is int and value >= 0:
        return value
    if value is None:
        return 0
    number = float("nan")
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            number = float(value)
    if not math.isfinite(number) or not number.is_integer():
        _found(faults, "not_a_number")
        _warn_once(engine, f"{what} no count", f"reported {what} {value!r:.40}, no count")
        return 0
    if number < 0:
        _found(faults, "negative")
        _warn_once(engine, f"{what} negative", f"reported {what} {value!r:.40}, below zero")
        return 0
    return int(number)


def _found(faults: set[str] | None, fault: str) -> None:
    if faults is not None:
        faults.add(fault)


def checked_counts(
    input_tokens: Any,
    cached_tokens: Any,
    output_tokens: Any = 0,
    *,
    engine: str = "",
    faults: set[str] | None = None,
) -> tuple[int, int, int]:
    """(input, cached, output) tokens as counts that can be: each a whole number >= 0,
    and cached <= input (module docstring); `engine` names it in the warning (default:
    the module that called), and the faults found go into `faults`."""
    sent = count(input_tokens, "prompt tokens", engine, faults)
    cached = count(cached_tokens, "cached prompt tokens", engine, faults)
    output = count(output_tokens, "output tokens", engine, faults)
    if cached > sent:
        _found(faults, "cached_above_sent")
        _warn_once(
            engine,
            "cached above sent",
            f"reported {cached} prompt tokens served from its cache of {sent} sent",
        )
        cached = sent
    return sent, cached, output


__all__ = ["checked_counts", "count"]
