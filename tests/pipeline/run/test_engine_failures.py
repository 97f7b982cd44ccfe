"""Engine failures end to end, on a real local Ray cluster with the load model.

A problem that cannot fit the policy's context is checked in the run over hostile source
lines (tests/pipeline/problems/test_hostile_sources.py), which shares its run.

A policy replica killed mid-run (SIGKILL to its process) is restarted by Serve, its
in-flight requests are retried (read back from the search actors' log lines, so a kill
that hit no request fails the test), and the run completes with every problem exactly
once.  The run is `synthesize` in this process on the session's cluster: the replica is
one of this process's descendants, and Serve restarts it the same way there as on a
cluster of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from pipeline.config import parse_run_config
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import synthesize
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.own_processes import own_pids, own_worker_log_lines
from tests.tiny_run import tiny_run_config

# How many times the policy replica may be killed before a request in flight is retried,
# and how long each kill waits for the retry's log line.
KILLS = 3
RETRY_LOG_WAIT_S = 15

pytestmark = pytest.mark.e2e


def test_a_killed_policy_replica_is_restarted_and_the_run_completes(
    ray_cluster: None, tmp_path: Path
) -> None:
    engine = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 37.5,
        "decode_per_seq_ms": 0,
    }
    # 16 problems, 2 trees at a time: after the first commit about seven more waves of
    # trees are still to run, so the kill lands mid-run even on a loaded machine (with 8,
    # a loaded CI run once finished its last trees before the kill)
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(16)
    ]
    resilient = {"engine": engine, "max_retries": 6, "retry_backoff_s": 1.0}
    # The scorer answers in 10 ms, the policy in 300: a policy request is in flight nearly
    # all the time, so the kill lands on one (the retry below checks that it did).
    data = tiny_run_config(tmp_path, rows, budget=48, engine=engine)
    data["scorer"]["engine"] = {**engine, "decode_base_ms": 1.25}
    config = parse_run_config(data | {"run_id": "death", "policy": resilient})
    run_dir = tmp_path / "out" / "run=death"
    started = time.time()
    summaries: list[RunSummary] = []
    worker = threading.Thread(target=lambda: summaries.append(synthesize(config, progress=None)))
    worker.start()
    deadline = time.monotonic() + JOB_DEADLINE_S
    while not (run_dir / "_committed").is_dir() or not any((run_dir / "_committed").iterdir()):
        assert worker.is_alive(), "the run ended before a replica could be killed"
        assert time.monotonic() < deadline, f"no tree committed within {JOB_DEADLINE_S} s"
        time.sleep(0.1)
    # `actors.serve` logs "policy request failed (...); retry n" before each retry (the
    # error's own text may run over several lines).  On a loaded machine a kill can land
    # while no request is in flight (the actors grading or scoring): then the replacement
    # replica is killed too, up to KILLS times, until a request in flight was retried.
    retried: list[str] = []
    kills = 0
    while not retried and kills < KILLS and worker.is_alive():
        # after a kill, Serve's replacement takes a while to start
        up_deadline = time.monotonic() + JOB_DEADLINE_S
        while not (replicas := own_pids("ServeReplica:policy")) and worker.is_alive():
            assert time.monotonic() < up_deadline, "no policy replica among this cluster's"
            time.sleep(0.5)
        for pid in replicas:
            with contextlib.suppress(ProcessLookupError):  # one still exiting from a kill
                os.kill(pid, signal.SIGKILL)
        kills += bool(replicas)
        # Ray writes a worker's log lines to its file a moment later: wait for them a while
        log_deadline = time.monotonic() + RETRY_LOG_WAIT_S
        while not (retried := own_worker_log_lines("policy request failed (", since=started)):
            if time.monotonic() > log_deadline:
                break
            time.sleep(0.5)
    assert kills, "the run ended before its policy replica could be killed"
    worker.join(timeout=JOB_DEADLINE_S)
    assert summaries, "the run did not end after its policy replica was killed"
    # On a loaded machine a request can take longer than the wait above to learn that its
    # replica died: its retry's line is then written after the loop gave up, so the logs
    # are read once more now that the run is over (a run that retried nothing has none)
    log_deadline = time.monotonic() + RETRY_LOG_WAIT_S
    while not retried and time.monotonic() < log_deadline:
        retried = own_worker_log_lines("policy request failed (", since=started)
        if not retried:
            time.sleep(0.5)
    assert retried, "no policy request was retried"
    assert summaries[0].errors == 0
    trees = pq.read_table(run_dir / "trees").column("problem_id").to_pylist()
    assert Counter(trees) == Counter(r["id"] for r in rows)
    assert RunFolder.open(tmp_path / "out", "death").read("errors").num_rows == 0
