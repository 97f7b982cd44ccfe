"""Property-style resume test: random kills at random moments, rerun until done.

A source with valid problems, duplicate ids and bad rows is synthesized by a real
`python -m jobs.synthesize` subprocess (its own local Ray cluster, Serve, the
model-free load model); each attempt is SIGKILLed (the whole process group)
after one or two more committed batches plus a random delay, while it still runs (a kill
that found the job already ended, or before its first commit, would test nothing the
rerun does not); a last attempt
runs to the end (in this process, on the session's cluster).  Then every valid
problem has exactly one tree, every bad row and every duplicate exactly one
`errors` row under its own key, and no node row is written twice.  The seed is
printed so a failure can be replayed.  This is the random-kills scenario
(tests/scenarios.py); the landing gate keeps one kill after the first commit
(test_resume_after_kill.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from jobs.synthesize import main as synthesize_main
from pipeline.store.run_folder import RunFolder
from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import start_synthesize_job, tiny_run_config

pytestmark = [pytest.mark.e2e, pytest.mark.scenario("random-kills")]

SEED = int(os.environ.get("RESUME_PROPERTY_SEED", "14"))
KILLS = 3
VALID = [f"p{i}" for i in range(8)]


def _source(tmp_path: Path) -> set[str]:
    """Writes problems.jsonl; returns the keys its bad rows and duplicates are reported under."""
    rows = [
        {"id": pid, "question": f"What is {i} + 1?", "answer": str(i + 1)}
        for i, pid in enumerate(VALID)
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(2, json.dumps({"id": "p1", "question": "a second p1", "answer": "0"}))  # line 3
    lines.insert(5, "{not json")  # line 6
    lines.insert(7, json.dumps({"id": "p9", "answer": "1"}))  # line 8: no question
    lines.append(json.dumps({"id": "p4", "question": "a second p4", "answer": "0"}))  # line 12
    (tmp_path / "problems.jsonl").write_text("\n".join(lines) + "\n")
    return {"problems.jsonl:line 3", "problems.jsonl:line 6", "p9", "problems.jsonl:line 12"}


def _job(config: Path) -> subprocess.Popen[bytes]:
    return start_synthesize_job(config)


def _commits(run_dir: Path) -> int:
    markers = run_dir / "_committed"
    return len(list(markers.iterdir())) if markers.is_dir() else 0


def test_random_kills_then_rerun_every_problem_exactly_once(
    ray_cluster: None, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    config = tiny_run_config(
        tmp_path,
        [],
        budget=48,
        engine={
            "kind": "load_model",
            "output_tokens": 8,
            "decode_base_ms": 37.5,
            "decode_per_seq_ms": 0,
        },
        run_id="prop",
        ray_num_cpus=2,
    )
    bad_keys = _source(tmp_path)  # replaces the empty problems.jsonl tiny_run_config wrote
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "out" / "run=prop"
    for attempt in range(KILLS):
        target = _commits(run_dir) + rng.randint(1, 2)
        delay = rng.uniform(0.0, 2.0)
        job = _job(path)
        try:
            deadline = time.monotonic() + JOB_DEADLINE_S
            while _commits(run_dir) < target and job.poll() is None:
                assert time.monotonic() < deadline, (
                    f"attempt {attempt}: no commit in {JOB_DEADLINE_S} s"
                )
                time.sleep(0.1)
            time.sleep(delay)
            assert job.poll() is None, f"seed {SEED}: attempt {attempt} ended before its kill"
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    # The last attempt: the job's command in this process, on the session's cluster
    # (resuming reads only the run's folder, so it needs no cluster of the killed jobs').
    assert synthesize_main(["--config", str(path)]) in (0, 1)  # 1: it wrote the bad rows

    trees = pq.read_table(run_dir / "trees").column("problem_id").to_pylist()
    assert Counter(trees) == Counter(VALID), f"seed {SEED}"
    errors = RunFolder.open(tmp_path / "out", "prop").read("errors").to_pylist()
    assert Counter(e["problem_id"] for e in errors if e["stage"] == "source") == Counter(bad_keys)
    assert all(e["stage"] == "source" for e in errors), errors
    nodes = RunFolder.open(tmp_path / "out", "prop").read("nodes")
    keys = list(zip(*(nodes.column(c).to_pylist() for c in ("problem_id", "node_id")), strict=True))
    assert len(keys) == len(set(keys))
