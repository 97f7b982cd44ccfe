"""Run a command and report the CPU seconds of its whole process tree, by kind of process.

Wall time on a shared machine says little; CPU time does.  A Ray job's workers are not
waited-for children of the command (so `time` misses them): this polls `ps` every 2 s,
keeps each descendant's latest CPU time, and at the end prints the sums for the policy
and scorer Serve replicas (the llama.cpp engines), the search actor, and everything else.

    python3 -m benchmarks.support.cpu_by_process make synth OUTPUT_ROOT=/tmp/out

Resolution: whole seconds (`ps` TIME); a process that ends between two polls loses at most
its last 2 s.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time


def kind(args: str) -> str:
    if "ServeReplica" in args and "policy" in args.lower():
        return "policy replica"
    if "ServeReplica" in args and "scorer" in args.lower():
        return "scorer replica"
    if "SearchActor" in args:
        return "search actor"
    return "other"


def main(command: list[str]) -> int:
    start = time.time()
    proc = subprocess.Popen(command)
    latest: dict[int, tuple[int, str]] = {}
    while True:
        done = proc.poll() is not None
        table = subprocess.run(
            ["ps", "-eo", "pid=,ppid=,times=,args="], capture_output=True, text=True
        ).stdout
        children: dict[int, list[int]] = collections.defaultdict(list)
        info: dict[int, tuple[int, str]] = {}
        for line in table.splitlines():
            parts = line.split(None, 3)
            if len(parts) == 4:
                pid, ppid = int(parts[0]), int(parts[1])
                children[ppid].append(pid)
                info[pid] = (int(parts[2]), parts[3])
        stack = [proc.pid]
        while stack:
            pid = stack.pop()
            if pid in info and info[pid][0] >= latest.get(pid, (0, ""))[0]:
                latest[pid] = info[pid]
            stack.extend(children.get(pid, ()))
        if done:
            break
        time.sleep(2)
    totals: collections.Counter[str] = collections.Counter()
    for cpu, args in latest.values():
        totals[kind(args)] += cpu
    summary = ", ".join(f"{k} {v} s" for k, v in sorted(totals.items()))
    print(
        f"wall {time.time() - start:.0f} s, exit {proc.returncode}; CPU: {summary}; "
        f"total {sum(totals.values())} s",
        file=sys.stderr,
    )
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
