"""`ray job submit` to the multi-node rehearsal cluster, as a job on a real cluster runs.

The cluster (tests/cluster.py: head with the dashboard's Jobs API, two "GPU" nodes, a
CPU node; real raylets on one machine) is started with the environment a real cluster's
pods would have: the object store's credentials and endpoint (a real S3 HTTP API, moto's
server) and no PYTHONPATH pointing at this checkout.  The job uploads a working
directory holding the project and its config (`configs/rehearsal.yaml`, a relative path,
as a RayJob's entrypoint names one), and writes its run folder, request logs included,
to the bucket.  Placement is read back from Ray's state API: the job's driver, Serve's
controller and the progress board on the head, one replica each on the GPU nodes, the
two search actors on the CPU node.  (The placement settings' checks are the fast tests in
tests/pipeline/run/test_cluster_placement.py.)  This is the multi-node-submit scenario
(tests/scenarios.py): the landing gate submits a job to a one-node cluster
(test_ray_job_submit.py) and loses a node of a two-node one (test_node_loss.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.cluster import actor_nodes, cluster_run_config, rehearsal_cluster
from tests.deadlines import JOB_DEADLINE_S
from tests.s3_server import S3Server

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "common", "actors", "pipeline", "jobs")
BUCKET = "rehearsal"
REQUESTS = "runs/run=submitted/requests/"


def _working_dir(tmp_path: Path) -> Path:
    """What `--working-dir` uploads: the project's packages and the job's config."""
    work = tmp_path / "job"
    for package in PACKAGES:
        shutil.copytree(
            REPO / package, work / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (work / "configs").mkdir()
    config = cluster_run_config(Path("unused"), run_id="submitted")
    config["output_root"] = f"s3://{BUCKET}/runs"
    (work / "configs" / "rehearsal.yaml").write_text(yaml.safe_dump(config))
    return work


def _wait_for_jobs_api(address: str) -> None:
    deadline = time.monotonic() + JOB_DEADLINE_S  # a wait ends once the API answers
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"the Ray dashboard (Jobs API) did not come up within {JOB_DEADLINE_S} s")


def _follow(dashboard: str, s3: S3Server) -> tuple[set[str], str]:
    """Wait for the job to end; the request-log segments seen in the bucket meanwhile."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(dashboard)
    seen: set[str] = set()
    deadline = time.monotonic() + JOB_DEADLINE_S
    while time.monotonic() < deadline:
        seen.update(s3.keys(BUCKET, REQUESTS))
        status = str(client.get_job_status("rehearsal").value)
        if status in {"SUCCEEDED", "FAILED", "STOPPED"}:
            if status != "SUCCEEDED":
                print(client.get_job_logs("rehearsal")[-4000:])
            return seen, status
        time.sleep(0.5)
    raise AssertionError(f"the job did not end within {JOB_DEADLINE_S} s")


@pytest.mark.scenario("multi-node-submit")
def test_ray_job_submit_to_the_multi_node_cluster_writes_the_run_to_the_bucket(
    own_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from pipeline.store.run_folder import RunFolder

    work = _working_dir(tmp_path)
    ray_cli = Path(sys.executable).parent / "ray"
    with S3Server() as s3, s3.empty_bucket(BUCKET, monkeypatch.setenv):
        # the nodes' environment, as a real cluster's pods have it
        monkeypatch.delenv("PYTHONPATH", raising=False)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        with rehearsal_cluster() as cluster:
            _wait_for_jobs_api(cluster.dashboard)
            command = [str(ray_cli), "job", "submit", "--address", cluster.dashboard]
            command += ["--submission-id", "rehearsal", "--no-wait", "--working-dir", str(work)]
            command += ["--", "python", "-m", "jobs.synthesize"]
            command += ["--config", "configs/rehearsal.yaml"]
            for _ in range(30):  # the dashboard answers before the head's job agent is up
                submit = subprocess.run(
                    command, cwd=tmp_path, capture_output=True, text=True, timeout=JOB_DEADLINE_S
                )
                said = submit.stdout + submit.stderr
                # the agent not up yet, or a request the loaded dashboard dropped before any
                # job existed: retried (tests/test_ray_job_submit.py says why)
                created = "submitted successfully" in said
                if created or not (
                    "No available agent to submit job" in said or "ConnectionError" in said
                ):
                    break
                time.sleep(2)
            assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
            logged, status = _follow(cluster.dashboard, s3)
            ray.init(address=cluster.cluster.address, log_to_driver=False)
            try:
                supervisor = actor_nodes("JobSupervisor")
                policy = actor_nodes("PolicyServer")
                scorer = actor_nodes("ScorerServer")
                search = actor_nodes("SearchActor")
                controller = actor_nodes("ServeController")
                board = actor_nodes("ProgressBoard")
            finally:
                ray.shutdown()
            head, gpu, cpu = cluster.head, set(cluster.gpu), set(cluster.cpu)
        assert status == "SUCCEEDED"
        assert logged  # the request logs lived in the bucket while the trees ran
        # the job's driver, Serve's controller and the progress board on the head, the
        # node that lives as long as the cluster
        assert set(supervisor.values()) == {head}
        assert set(controller.values()) == {head} and set(board.values()) == {head}
        # one replica each on the GPU nodes (num_gpus), both search actors on the CPU node
        assert len(policy) == 1 and set(policy.values()) <= gpu
        assert len(scorer) == 1 and set(scorer.values()) <= gpu
        assert len(search) == 2 and set(search.values()) == cpu
        folder = RunFolder.open(f"s3://{BUCKET}/runs", "submitted")
        ids = folder.read("trees").column("problem_id").to_pylist()
        assert len(ids) == 8 and set(Counter(ids).values()) == {1}
        # and were cleaned as each tree was committed
        assert not s3.keys(BUCKET, REQUESTS)
