"""`ray job submit` against a `ray start --head` cluster runs the synthesis job to the end.

A real head node with its dashboard (the Jobs API) is started for the test; the job
uploads this working directory, joins the cluster from RAY_ADDRESS and runs the
real SmolLM2 model on two problems with a tiny budget.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import tiny_run_config

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    # the job's `python` must be this interpreter (the head node inherits this PATH)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _ray() -> str:
    found = shutil.which("ray", path=_env()["PATH"])
    assert found, "the ray CLI is not installed next to this interpreter"
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_jobs_api(address: str, head: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert head.poll() is None, "ray start --head exited:\n" + log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{address}/api/version", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError("the Ray dashboard (Jobs API) did not come up within 180 s")


def test_ray_job_submit_runs_the_synthesize_job(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "question": "What is 3 + 4?", "answer": "7"},
        {"id": "b", "question": "What is 10 - 6?", "answer": "4"},
    ]
    config = tmp_path / "job.yaml"
    config.write_text(
        yaml.safe_dump(tiny_run_config(tmp_path, rows, budget=32, run_id="submitted"))
    )
    env = _env()
    dashboard_port = _free_port()
    # short: Ray's Unix sockets live under it (107-character path limit)
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # `ray start --block` in its own process group: the test stops exactly this cluster
    # (`ray stop` would stop every Ray cluster of this user on the machine).
    head = subprocess.Popen(
        [
            _ray(),
            "start",
            "--head",
            "--block",
            "--port",
            "0",
            "--num-cpus",
            "2",
            "--include-dashboard",
            "true",
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(dashboard_port),
            # not the default 52365: a cluster of another test running beside this one
            # holds it, and the job agent that cannot bind it never comes up
            "--dashboard-agent-listen-port",
            str(_free_port()),
            "--temp-dir",
            temp_dir,
        ],
        env=env,
        stdout=(tmp_path / "ray-head.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        _wait_for_jobs_api(address, head, tmp_path / "ray-head.log")
        command = [_ray(), "job", "submit", "--address", address, "--working-dir", "."]
        command += ["--", "python", "-m", "jobs.synthesize", "--config", str(config)]
        # The dashboard answers before the node's job agent is up, which takes more than a
        # minute when the other test worker loads both cores: retried for up to 180 s.
        deadline = time.monotonic() + 180
        while True:
            submit = subprocess.run(
                command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900
            )
            said = submit.stdout + submit.stderr
            # On a loaded machine the head's dashboard also drops a request now and then
            # before any job exists ("Remote end closed connection without response" while
            # checking the working dir's package): retried too, but never once a job was
            # created (its submission said so)
            created = "submitted successfully" in said
            waiting = not created and (
                "No available agent to submit job" in said or "ConnectionError" in said
            )
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(2)
        # a relative output root would land in Ray's temporary copy of --working-dir on the
        # head: the submitted job refuses it, one line naming the field, exit 2
        relative = tmp_path / "relative.yaml"
        relative.write_text(
            yaml.safe_dump({**yaml.safe_load(config.read_text()), "output_root": "out"})
        )
        refused = subprocess.run(
            [*command[: command.index("--config") + 1], str(relative)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=JOB_DEADLINE_S,
        )
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert f"error: {relative}: output_root 'out' is relative: under ray job submit" in (
        refused.stdout
    ), refused.stdout[-3000:] + refused.stderr[-3000:]
    assert "succeeded" in submit.stdout
    trees = pq.read_table(tmp_path / "out" / "run=submitted" / "trees").to_pylist()
    assert sorted(t["problem_id"] for t in trees) == ["a", "b"]
    assert all(t["c_used"] <= 32 for t in trees)
