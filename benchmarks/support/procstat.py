"""CPU accounting from /proc, shared by the benchmarks that measure our processes' CPU.

`proc_table` reads every process's parent and CPU ticks once; `descendants` walks that
table from a root (the root included); `machine_ticks` gives the whole machine's busy
and total jiffies, to tell our CPU from other users'.  Linux only.
"""

from __future__ import annotations

import os
from collections import defaultdict


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, user + system ticks) for every readable process."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended while we read
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> list[int]:
    """`root` and every live process below it in `table`."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    todo, found = [root], []
    while todo:
        pid = todo.pop()
        if pid in table:
            found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat (iowait counts idle)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)
