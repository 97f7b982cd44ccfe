"""A search actor killed mid-run is restarted by Ray Data and its batch redone.

Real local Ray cluster, Ray Data, Serve deployments and sink; the engine is the
model-free load model so that each search takes a predictable few seconds and
the kill lands while trees are in flight (with the real model the timing would
depend on the machine's load).  The run joins the session's cluster (`ray_cluster`): the
killed actor's process is one of this test process's descendants either way, and Ray
Data's restart of it is the same on a shared cluster as on one of its own.

The kill must have had an effect for the test to pass: it lands while a tree's request
log is growing (a tree in flight on that actor), a new search actor process takes the
killed one's place, and the redone trees replay requests from their logs.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from pipeline.config import parse_run_config
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import synthesize
from pipeline.store.request_log import FOLDER
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.own_processes import own_pids

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytestmark = pytest.mark.e2e


def test_killed_search_actor_is_restarted_and_every_problem_written_once(
    ray_cluster: None, tmp_path: Path
) -> None:

    engine = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 25,
        "decode_per_seq_ms": 0,
    }
    config = parse_run_config(
        {
            "run_id": "actor-kill",
            "output_root": str(tmp_path / "out"),
            "budget": 120,
            "source": {"kind": "bundled", "dataset": "gsm8k", "limit": 8},
            "search": {"algorithm": "bg_mcts", "step_max_tokens": 16},
            "policy": {"engine": engine},
            "scorer": {"engine": engine, "genprm": {"max_analysis_tokens": 4}},
            "trees_per_actor": 2,
            "ray_num_cpus": 2,
        }
    )
    logs = tmp_path / "out" / "run=actor-kill" / FOLDER
    summaries: list[RunSummary] = []
    worker = threading.Thread(target=lambda: summaries.append(synthesize(config, progress=None)))
    killed: set[int] | None = None
    seen_after_kill: set[int] = set()
    worker.start()
    deadline = time.monotonic() + JOB_DEADLINE_S
    while time.monotonic() < deadline and worker.is_alive():
        pids = own_pids("SearchActor")
        if killed is None:
            # a tree under way: its request log holds a few answered requests
            growing = [p for p in logs.glob("*/*.jsonl") if p.stat().st_size > 1000]
            if pids and growing:
                for pid in pids:  # whichever holds the growing tree dies mid-batch
                    os.kill(pid, signal.SIGKILL)
                killed = set(pids)
        else:
            seen_after_kill.update(pid for pid in pids if pid not in killed)
        time.sleep(0.1)
    worker.join(timeout=JOB_DEADLINE_S)
    assert killed is not None, "no search actor was seen with a tree in flight to kill"
    assert summaries, "synthesize did not finish after the actor was killed"
    assert seen_after_kill, "no search actor process took the killed one's place"
    assert summaries[0].replayed_requests > 0, "no redone tree replayed its logged requests"
    trees = RunFolder.open(tmp_path / "out", "actor-kill").read("trees")
    ids = trees.column("problem_id").to_pylist()
    assert len(ids) == 8 and set(Counter(ids).values()) == {1}  # every problem, once
    assert summaries[0].errors == 0
