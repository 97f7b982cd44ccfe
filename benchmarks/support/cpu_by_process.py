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
from pathlib import Path


def kind(args: str) -> str:
    if "ServeReplica" in args and "policy" in args.lower():
        return "policy replica"
    if "ServeReplica" in args and "scorer" in args.lower():
        return "scorer replica"
    if "SearchActor" in args:
        return "search actor"
    return "other"


def run_measured(
    command: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> tuple[int, dict[str, int], float]:
    """Run `command` (its output to `log`, else inherited); its exit code, the CPU seconds
    of its process tree by kind of process, and its wall seconds."""
    start = time.time()
    sink = log.open("w") if log is not None else None
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=sink)
        latest = _poll_tree(proc)
    finally:
        if sink is not None:
            sink.close()
    totals: collections.Counter[str] = collections.Counter()
    for cpu, args in latest.values():
        totals[kind(args)] += cpu
    return int(proc.returncode), dict(totals), time.time() - start


def _poll_tree(proc: subprocess.Popen[bytes]) -> dict[int, tuple[int, str]]:
    """Each descendant's latest CPU time (and command line), polled until `proc` ends."""
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
            return latest
        time.sleep(2)


def main(command: list[str]) -> int:
    code, totals, wall = run_measured(command)
    summary = ", ".join(f"{k} {v} s" for k, v in sorted(totals.items()))
    print(
        f"wall {wall:.0f} s, exit {code}; CPU: {summary}; total {sum(totals.values())} s",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
