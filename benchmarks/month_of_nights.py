"""A month of nights, rehearsed: 30 nightly jobs into one dataset repo, loaded back as a user would.

Each night is the real `python -m jobs.nightly` (its own process and local Ray cluster: Ray
Data, the search actors, the Serve deployments) on the model-free load model, so a night of
500 problems fits this 2-core machine.  Every night publishes to the local Hub server the
tests use (tests/hub_server.py: the real huggingface_hub upload path and the real
`datasets.load_dataset` read path), and after each night the whole sft config is loaded
back with `datasets.load_dataset` from a fresh cache, in a fresh process.

The load model answers "42" or "41" (`answers`), and 40% of the problems have 42 as their
reference, so trees of those problems have correct and incorrect answered nodes: SFT rows,
preference pairs and PRM rows, as a real night's mixed problems give.

Faults, each once (the night numbers are flags):
* overlap: a night starts when the previous one has finished searching and publishes;
* a night killed mid-search (SIGKILL of its process group once a third of its trees are
  committed), then rerun for the same date;
* a night killed mid-publish (SIGKILL while its first file is being uploaded), then rerun.

Printed, per night: files in that night's largest commit, commits, publish seconds, files
in the repo, entries in the largest folder, `load_dataset` seconds (whole sft config);
then the totals and the last lines:

    max_files_per_commit=  repo_files_after_30_nights=  max_folder_entries=
    rows_lost=  rows_doubled=  problems_searched_twice=  load_seconds_ratio=

`rows_lost` and `rows_doubled` compare, config by config, every row in the repo's Parquet
with every counted row of the nights' run folders (as multisets of whole rows).

    python -m benchmarks.month_of_nights [--nights 30] [--problems 500] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import functools
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
HUB_REPO = "bench/month-of-nights"
TOKEN = "hf_month_of_nights_benchmark_token"
FIRST_DATE = dt.date(2026, 11, 1)


@dataclass
class Night:
    index: int
    date: str
    published_s: float | None = None
    commit: str = ""  # the repo's head once the night was measured
    requests_before: int = 0
    commits: int = 0
    max_commit_files: int = 0
    repo_files: int = 0
    max_folder_entries: int = 0
    load_s: float = 0.0
    sft_rows_loaded: int = 0
    notes: list[str] = field(default_factory=list)


def _problems(path: Path, count: int, seed: int) -> None:
    """`count` distinct problems; 40% have 42 as their reference (the load model's answers
    are 42 or 41, so those trees mix correct and incorrect nodes)."""
    rng = random.Random(seed)
    with path.open("w") as out:
        for i in range(count):
            reference = "42" if rng.random() < 0.4 else str(rng.randint(100, 999))
            row = {
                "id": f"m{i:06d}",
                "problem": f"Problem {i}: what is the value?",
                "ref": reference,
            }
            out.write(json.dumps(row) + "\n")


def _config(
    out: Path, problems: Path, per_night: int, endpoint: str, scale: float
) -> dict[str, Any]:
    engine = {
        "kind": "load_model",
        "output_tokens": 16,
        "answer_every": 4,
        "answers": ["42", "41"],
        "time_scale": scale,
    }
    return {
        "output_root": str(out),
        "seed": 0,
        "budget": 96,
        "source": {
            "kind": "jsonl",
            "path": str(problems),
            "columns": {"problem": "problem", "reference": "ref", "id": "id"},
        },
        "search": {"algorithm": "bg_mcts", "step_max_tokens": 32},
        "policy": {"engine": engine, "num_cpus": 0},
        "scorer": {
            "engine": engine,
            "num_cpus": 0,
            "genprm": {"samples": 1, "max_analysis_tokens": 16},
        },
        "records": {"decontamination": {"enabled": False}},
        "publish": {"repo": HUB_REPO, "endpoint": endpoint, "private": True},
        "nightly": {"problems_per_night": per_night, "run_id_prefix": "night-"},
        "actors": 1,
        "trees_per_actor": 64,
        "actor_num_cpus": 0.5,
        "ray_num_cpus": 2,
    }


def _start_night(config: Path, date: str, log: Path) -> subprocess.Popen[bytes]:
    """`python -m jobs.nightly` in its own process group (a kill takes its Ray down too)."""
    # The test Hub speaks the LFS upload protocol, not Xet's (on the Hub, Xet is the default:
    # the shards suit both, a few large files per commit).
    env = {**os.environ, "HF_TOKEN": TOKEN, "HF_HUB_DISABLE_XET": "1"}
    env |= {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "RAY_AUTH_MODE": "disabled"}
    env |= {"RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.nightly", "--config", str(config), "--date", date],
        cwd=REPO_ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill(job: subprocess.Popen[bytes]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def _wait_for(what: Callable[[], bool], job: subprocess.Popen[bytes], limit_s: float) -> bool:
    """Poll until `what()` (True) or the job ends (False)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if what():
            return True
        if job.poll() is not None:
            return False
        time.sleep(0.2)
    raise TimeoutError(f"nothing happened within {limit_s} s")


def _finish(job: subprocess.Popen[bytes], log: Path, limit_s: float) -> None:
    if job.wait(timeout=limit_s) != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"night exited {job.returncode}; log {log}:\n{tail}")


def _publish_seconds(hub: Any, since: int) -> float | None:
    """Seconds from the last publish's first request (it creates the repo, or finds it
    there) to its last request, among the Hub's requests from index `since` on."""
    requests = hub.requests[since:]
    times = hub.request_times[since : since + len(requests)]
    starts = [i for i, (m, p) in enumerate(requests) if (m, p) == ("POST", "/api/repos/create")]
    if not starts:
        return None
    return float(times[-1] - times[starts[-1]])


def _folder_entries(files: list[str]) -> int:
    children: dict[str, set[str]] = collections.defaultdict(set)
    for path in files:
        parts = path.split("/")
        for depth in range(len(parts)):
            children["/".join(parts[:depth])].add(parts[depth])
    return max((len(c) for c in children.values()), default=0)


_LOAD = """
import json, sys, time
import datasets
start = time.perf_counter()
data = datasets.load_dataset(sys.argv[1], "sft", revision=sys.argv[2])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rows": sum(len(d) for d in data.values())}))
"""


def _load_sft(endpoint: str, home: Path, revision: str = "main") -> tuple[float, int]:
    """`load_dataset(repo, "sft")`, every split, as the repo was at `revision`, from a
    fresh cache in a fresh process."""
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _LOAD, HUB_REPO, revision],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), int(result["rows"])


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def _rows_compared(hub: Any, out: Path) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """(rows lost, rows doubled, config -> (rows in the repo, rows written))."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

    from pipeline.publish.layout import CONFIGS
    from pipeline.store.run_folder import RunFolder

    in_repo: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for path, body in hub.files(HUB_REPO).items():
        parts = path.split("/")
        if parts[0] == "data" and path.endswith(".parquet"):
            for row in pq.read_table(io.BytesIO(body)).to_pylist():
                in_repo[parts[1]][_row_key(row)] += 1
    written: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for run_dir in sorted(out.glob("run=night-*")):
        folder = RunFolder.at(run_dir)
        for name in CONFIGS:
            for table in folder.tables(name):
                for row in table.to_pylist():
                    written[name][_row_key(row)] += 1
    lost = doubled = 0
    per_config = {}
    for name in CONFIGS:
        lost += sum((written[name] - in_repo[name]).values())
        doubled += sum((in_repo[name] - written[name]).values())
        per_config[name] = (sum(in_repo[name].values()), sum(written[name].values()))
    return lost, doubled, per_config


def _searched_twice(out: Path) -> tuple[int, int]:
    """(problems searched in more than one tree, trees) over every night's run folder."""
    from pipeline.store.run_folder import RunFolder

    ids: collections.Counter[str] = collections.Counter()
    for run_dir in sorted(out.glob("run=night-*")):
        table = RunFolder.at(run_dir).read("trees")
        ids.update(str(v) for v in table.column("problem_id").to_pylist())
    return sum(n - 1 for n in ids.values() if n > 1), sum(ids.values())


class _UploadTrap:
    """Arms a kill of a night on the first file upload it makes (a PUT to the Hub's LFS)."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.armed_at: int | None = None

    def arm(self) -> None:
        self.armed_at = len(self.hub.requests)

    def sprung(self) -> bool:
        if self.armed_at is None:
            return False
        return any(
            m == "PUT" and p.startswith("/lfs-upload/")
            for m, p in self.hub.requests[self.armed_at :]
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--problems", type=int, default=500, help="problems per night")
    parser.add_argument("--time-scale", type=float, default=0.25, help="load model timing")
    parser.add_argument("--kill-search-night", type=int, default=10)
    parser.add_argument("--kill-publish-night", type=int, default=20)
    parser.add_argument(
        "--overlap-night", type=int, default=15, help="starts while the last publishes"
    )
    parser.add_argument("--out", type=Path, help="work folder (default: a temporary one)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO_ROOT))
    from tests.hub_server import HubServer

    work = args.out or Path(tempfile.mkdtemp(prefix="month-of-nights-"))
    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    problems = work / "problems.jsonl"
    _problems(problems, args.nights * args.problems + args.problems, seed=0)
    hub = HubServer().start()
    trap = _UploadTrap(hub)
    config = work / "nightly.yaml"
    config.write_text(
        yaml.safe_dump(_config(out, problems, args.problems, hub.endpoint, args.time_scale))
    )
    print(f"work folder {work}; Hub {hub.endpoint}; {args.nights} nights of {args.problems}")
    nights = [
        Night(i + 1, (FIRST_DATE + dt.timedelta(days=i)).isoformat()) for i in range(args.nights)
    ]
    wall = time.monotonic()
    previous: tuple[subprocess.Popen[bytes], Night, int] | None = None  # still publishing
    for night in nights:
        log = _log(work, night)
        job = _start_night(config, night.date, log)
        if previous is not None:  # this night started while the previous one publishes
            _finish(previous[0], _log(work, previous[1]), 1800)
            _measure(previous[1], hub, previous[2], work)
            night.notes.append("started while the previous night published")
            previous = None
        commits_before = len(hub.commit_sizes)
        night.requests_before = len(hub.requests)
        run_dir = out / f"run=night-{night.date}"
        if night.index == args.kill_search_night:
            third = max(1, args.problems // 3)
            if _wait_for(functools.partial(_at_least, run_dir, third), job, 1800):
                _kill(job)
                night.notes.append(f"killed mid-search ({_trees_committed(run_dir)} trees), rerun")
                job = _start_night(config, night.date, log)
        if night.index == args.kill_publish_night:
            trap.arm()
            hub.upload_delay_s = 5.0  # a slow link: the kill lands before the commit
            sprung = _wait_for(trap.sprung, job, 1800)
            hub.upload_delay_s = 0.0
            if sprung:
                _kill(job)
                made = len(hub.commit_sizes) - commits_before
                night.notes.append(f"killed mid-publish ({made} commits made), rerun")
                job = _start_night(config, night.date, log)
        # the night before the overlap: the next one starts once this one has searched (its
        # report is written just before its publish)
        report = run_dir / "report.md"
        if night.index + 1 == args.overlap_night and _wait_for(report.exists, job, 1800):
            previous = (job, night, commits_before)
            continue
        _finish(job, log, 1800)
        _measure(night, hub, commits_before, work)
    if previous is not None:
        _finish(previous[0], _log(work, previous[1]), 1800)
        _measure(previous[1], hub, previous[2], work)
    _report(nights, hub, out, time.monotonic() - wall)
    hub.stop()
    return 0


def _log(work: Path, night: Night) -> Path:
    return work / f"night-{night.index:02d}.log"


def _at_least(run_dir: Path, trees: int) -> bool:
    return _trees_committed(run_dir) >= trees


def _trees_committed(run_dir: Path) -> int:
    """Trees committed so far (markers name the problems each batch finishes)."""
    from pipeline.store.run_folder import RunFolder

    if not (run_dir / "_committed").is_dir():
        return 0
    return sum(len(b.done) for b in RunFolder.at(run_dir).batches().values())


def _measure(night: Night, hub: Any, commits_before: int, work: Path) -> None:
    files = sorted(hub.files(HUB_REPO))
    night.published_s = _publish_seconds(hub, night.requests_before)
    sizes = hub.commit_sizes[commits_before:]
    night.commits = len(sizes)
    night.max_commit_files = max(sizes, default=0)
    night.repo_files = len(files)
    night.max_folder_entries = _folder_entries(files)
    night.commit = hub.repos[("dataset", HUB_REPO)].commits[-1][0]
    home = work / "hf-home" / str(night.index)
    night.load_s, night.sft_rows_loaded = _load_sft(hub.endpoint, home, night.commit)
    print(
        f"night {night.index:2d} {night.date}: commits {night.commits} (max files "
        f"{night.max_commit_files}), publish {night.published_s} s, repo files "
        f"{night.repo_files}, largest folder {night.max_folder_entries}, load_dataset sft "
        f"{night.load_s:.2f} s ({night.sft_rows_loaded} rows) {' '.join(night.notes)}",
        flush=True,
    )


def _report(nights: list[Night], hub: Any, out: Path, wall_s: float) -> None:
    lost, doubled, per_config = _rows_compared(hub, out)
    twice, trees = _searched_twice(out)
    files = sorted(hub.files(HUB_REPO))
    print()
    print(
        "| night | date | commits | max files/commit | publish s | repo files | largest folder "
        "| load s | sft rows |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in nights:
        print(
            f"| {n.index} | {n.date} | {n.commits} | {n.max_commit_files} | {n.published_s} | "
            f"{n.repo_files} | {n.max_folder_entries} | {n.load_s:.2f} | {n.sft_rows_loaded} |"
        )
    print()
    print("| config | rows in the repo | rows written |")
    print("| --- | --- | --- |")
    for name, (repo_rows, written) in per_config.items():
        print(f"| {name} | {repo_rows} | {written} |")
    print()
    publish = [n.published_s for n in nights if n.published_s is not None]
    print(f"trees {trees}; wall {wall_s:.0f} s; commits {len(hub.commit_sizes)}")
    if publish:
        median = sorted(publish)[len(publish) // 2]
        print(f"publish seconds: median {median:.2f}, max {max(publish):.2f}")
    print(f"max_files_per_commit={max(hub.commit_sizes, default=0)}")
    print(f"repo_files_after_{len(nights)}_nights={len(files)}")
    print(f"max_folder_entries={_folder_entries(files)}")
    print(f"rows_lost={lost}")
    print(f"rows_doubled={doubled}")
    print(f"problems_searched_twice={twice}")
    # The ratio from loads made side by side at the end, each from a fresh cache: the repo
    # as it was after the first night (its commit) and as it is now, alternating, medians.
    first, last = [], []
    for repeat in range(3):
        root = out.parent / "hf-home" / f"ratio-{repeat}"
        first.append(_load_sft(hub.endpoint, root / "first", nights[0].commit)[0])
        last.append(_load_sft(hub.endpoint, root / "last", nights[-1].commit)[0])
    first_s, last_s = sorted(first)[1], sorted(last)[1]
    print(
        f"load_dataset sft, side by side: after night 1 {first_s:.2f} s (median of 3), "
        f"after night {len(nights)} {last_s:.2f} s"
    )
    ratio = last_s / first_s
    print(f"load_seconds_ratio={ratio:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
