"""How much memory this machine has, for the checks that refuse a cache it cannot hold.

An engine's cache bounded by a number of tokens or MiB (llama.cpp's KV cache and prompt
cache, the CPU PRM's kept keys and values) is allocated as the run goes: a bound larger
than the machine's memory is no bound, and the run is killed for memory hours in, far
from the field that allowed it.  The CPU engines run where their config is checked (and
check again in their replica), so the bound is compared with this machine's memory.
"""

from __future__ import annotations

import os
from pathlib import Path

from actors.errors import EngineError

# cgroup v2's and v1's memory limits: a container's memory, when lower than the host's
_CGROUP_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the host's, or its container's limit when
    lower; None where neither can be read."""
    try:
        total: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in _CGROUP_LIMITS:
        try:
            limit = int(path.read_text().strip())
        except (OSError, ValueError):  # absent, or "max": no limit of its own
            continue
        if total is None or 0 < limit < total:
            total = limit
    return total


def size(count: int) -> str:
    """Bytes as a person reads them (binary units, as memory is sold and reported)."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{count:,} bytes" if unit == "bytes" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def check_fits(field: str, needed: int, what: str) -> None:
    """Refuse `field` when `what` (a cache it bounds) may take more than this machine's
    memory: one line naming the field and both sizes (`EngineError` on `field`)."""
    memory = machine_memory()
    if memory is not None and needed > memory:
        raise EngineError(
            f"{field}: {what} may take {size(needed)}, more than this machine's "
            f"{size(memory)} of memory; lower it",
            field=field,
        )


__all__ = ["check_fits", "machine_memory", "size"]
