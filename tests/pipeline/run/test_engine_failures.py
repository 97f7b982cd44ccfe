"""Engine failures end to end, on a real local Ray cluster with the sleep engine.

* A problem that cannot fit the policy's context is an `errors` row (not a tree),
  the job exits 1, and a rerun searches it again.  The job's command (`jobs.synthesize`'s
  `main`) runs in this process and joins the session's cluster (`ray_cluster`): nothing
  here needs a cluster of its own.
* A policy replica killed mid-run (SIGKILL to its process) is restarted by Serve,
  its in-flight requests are retried, and the run completes with every problem
  exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from jobs.synthesize import main as synthesize_main
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import start_synthesize_job, tiny_run_config

pytestmark = pytest.mark.e2e


def _job(config: Path) -> subprocess.Popen[bytes]:
    return start_synthesize_job(config, stderr=subprocess.PIPE)


def _config(tmp_path: Path, rows: list[dict[str, str]], **extra: Any) -> Path:
    config = tiny_run_config(tmp_path, rows, budget=48, ray_num_cpus=2, **extra)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_problem_that_cannot_fit_the_context_is_an_error_and_retried(
    ray_cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = {"kind": "sleep", "latency_s": 0.05, "output_tokens": 8, "context_length": 300}
    rows = [
        {"id": "short", "question": "What is 1 + 1?", "answer": "2"},
        {"id": "huge", "question": "word " * 2000, "answer": "2"},
    ]
    path = _config(tmp_path, rows, engine=engine, run_id="ctx")
    for _ in range(2):  # the rerun tries the failed problem again
        code = synthesize_main(["--config", str(path)])
        assert code == 1, capsys.readouterr().err[-2000:]
    folder = RunFolder.open(tmp_path / "out", "ctx")
    assert folder.read("trees").column("problem_id").to_pylist() == ["short"]
    errors = folder.read("errors").to_pylist()
    assert [e["problem_id"] for e in errors] == ["huge", "huge"]
    assert "the policy's context is 300" in errors[0]["message"]


def _replicas(session: int, name: str) -> list[int]:
    """PIDs of this job's processes (its own session) whose title contains `name`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != session:
                continue
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ProcessLookupError):
            continue
        if name in title:
            found.append(int(entry.name))
    return found


def test_a_killed_policy_replica_is_restarted_and_the_run_completes(tmp_path: Path) -> None:
    engine = {"kind": "sleep", "latency_s": 0.3, "output_tokens": 8}
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)
    ]
    resilient = {"engine": engine, "max_retries": 6, "retry_backoff_s": 1.0}
    path = _config(tmp_path, rows, engine=engine, run_id="death")
    config = yaml.safe_load(path.read_text())
    config["policy"] = resilient
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "out" / "run=death"
    job = _job(path)
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while not (run_dir / "_committed").is_dir() or not any((run_dir / "_committed").iterdir()):
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        replicas = _replicas(job.pid, "ServeReplica:policy")
        assert replicas, "no policy replica found among the job's processes"
        for pid in replicas:
            os.kill(pid, signal.SIGKILL)
        _, err = job.communicate(timeout=JOB_DEADLINE_S)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 0, err.decode()[-2000:]
    trees = pq.read_table(run_dir / "trees").column("problem_id").to_pylist()
    assert Counter(trees) == Counter(r["id"] for r in rows)
    assert RunFolder.open(tmp_path / "out", "death").read("errors").num_rows == 0
