"""Kill the synthesis job midway, rerun it with the same run id: every problem exactly once.

The job runs as a real subprocess (`python -m jobs.synthesize`) on its own local Ray
cluster with the real SmolLM2 model; the test SIGKILLs the whole process group
(driver, raylet, workers, Serve replicas) as soon as the first batch is committed, then
runs the same command again in this process.
It runs twice: with GenPRM on SmolLM2 as the scorer, and with a one-pass PRM (the
`transformers_prm` engine on the session's tiny random checkpoint,
`tests/prm_checkpoint.py`), whose trees read PRM input and write no PRM output.  Both are
the kill-resume-real-model scenario (tests/scenarios.py): the landing gate kills and reruns
a job on the load model (test_request_replay.py, tree for tree), on a bucket
(test_object_storage.py) and on vLLM with real weights (tests/vllm).
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
from tests.tiny_run import one_pass_scorer, start_synthesize_job, tiny_run_config

pytestmark = pytest.mark.e2e


# Four problems, two trees in flight: the first commit holds one or two trees, so the kill
# lands with problems still unsearched, and the rerun has little to do.
PROBLEMS = 4


def _write_config(tmp_path: Path, scorer: dict[str, Any] | None) -> Path:
    rows = [
        {
            "id": f"p{i}",
            "question": f"Tom has {i} apples and buys {i + 1} more. How many?",
            "answer": str(2 * i + 1),
        }
        for i in range(PROBLEMS)
    ]
    config = tiny_run_config(tmp_path, rows, budget=32, run_id="killed", ray_num_cpus=2)
    if scorer is not None:
        config["scorer"] = scorer
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _job(config: Path, log: Path) -> subprocess.Popen[bytes]:
    return start_synthesize_job(config, stderr=log.open("wb"))


@pytest.mark.scenario("kill-resume-real-model")
@pytest.mark.parametrize("kind", ["genprm", "one_pass"])
def test_killed_job_resumes_without_duplicates(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, ray_cluster: None
) -> None:
    scorer = None if kind == "genprm" else one_pass_scorer(request.getfixturevalue("tiny_prm"))
    config = _write_config(tmp_path, scorer)
    run_dir = tmp_path / "out" / "run=killed"
    job = _job(config, tmp_path / "killed.log")
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while not any((run_dir / "trees").glob("part-*.parquet")):
            assert job.poll() is None, "the job ended before the first batch was committed"
            assert time.monotonic() < deadline, f"no batch committed within {JOB_DEADLINE_S} s"
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    before = pq.read_table(run_dir / "trees").column("problem_id").to_pylist()
    assert 0 < len(before) < PROBLEMS, "the kill must land midway"

    # The rerun is the same command in this process, on the test process's shared cluster:
    # what is tested is what the killed run left, and a new cluster proves nothing more.
    assert synthesize_main(["--config", str(config)]) == 0
    trees = pq.read_table(run_dir / "trees").column("problem_id").to_pylist()
    assert Counter(trees) == Counter(f"p{i}" for i in range(PROBLEMS))  # each exactly once
    nodes = RunFolder.open(tmp_path / "out", "killed").read("nodes")
    keys = list(zip(*(nodes.column(c).to_pylist() for c in ("problem_id", "node_id")), strict=True))
    assert len(keys) == len(set(keys))  # no node row twice
    assert set(before) <= set(trees)
    if kind == "one_pass":  # the one-pass scorer scored them: input read, nothing decoded
        table = pq.read_table(run_dir / "trees")
        assert min(table.column("prm_input_tokens").to_pylist()) > 0
        assert set(table.column("prm_output_tokens").to_pylist()) == {0}
