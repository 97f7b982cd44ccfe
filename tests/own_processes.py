"""The processes of this test process's own local Ray cluster, found by their titles.

A local cluster started by `ray.init` is this process's descendants (the raylet and the
workers it forks); Ray titles a worker after its actor (`ray::SearchActor`,
`ray::ServeReplica:policy:PolicyServer`).  Read from /proc (Linux).  Descent keeps a
test from killing the other pytest-xdist worker's processes of the same name.
"""

from __future__ import annotations

import os
from pathlib import Path


def own_pids(title: str) -> list[int]:
    """PIDs of this process's descendants whose command line contains `title`."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        # the parent PID is the second field after the command's closing parenthesis
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [pid for pid, cmd in commands.items() if title in cmd and descends(pid)]


def own_worker_log_lines(containing: str, since: float) -> list[str]:
    """Lines with `containing` in the stdout and stderr files of this process's local Ray
    cluster's workers, written to since `since` (a `time.time()`).  Ray keeps no public
    handle on a local cluster's log folder, so its node object is read (ray._private)."""
    import ray._private.worker as ray_worker

    node = ray_worker._global_node
    assert node is not None, "no local Ray cluster in this process"
    lines = []
    for path in sorted(Path(node.get_logs_dir_path()).glob("worker-*")):
        if path.suffix in (".out", ".err") and path.stat().st_mtime >= since:
            text = path.read_text(errors="replace")
            lines.extend(line for line in text.splitlines() if containing in line)
    return lines
