"""A relative `output_root` under `ray job submit` is refused: one line, exit 2.

A submitted job's driver runs in Ray's unpacked copy of `--working-dir` on the head node,
so `out` would land in a temporary folder that goes with the cluster.  Ray's job supervisor
marks that driver with `RAY_JOB_CONFIG_JSON_ENV_VAR`; these tests set it on the real
command line (`python -m jobs.synthesize`, `jobs.nightly`, `jobs.evaluate`), as the supervisor
does, and check that a local run (no variable) still takes a relative root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.config import RAY_JOB_DRIVER_ENV
from tests.deadlines import JOB_DEADLINE_S

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REFUSED = (
    "output_root 'out' is relative: under ray job submit it would land in the job's "
    "temporary working directory on the head and be lost with the cluster; give an "
    "absolute path or a bucket URI (s3://, gs://), in the config or with --output-root"
)


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    config = {
        "run_id": "rel",
        "output_root": "out",
        "budget": 100,
        "source": {"kind": "arithmetic", "count": 2},
        "search": {"algorithm": "bg_mcts"},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _job(tmp_path: Path, *args: str, submitted: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop(RAY_JOB_DRIVER_ENV, None)
    if submitted:  # what Ray's job supervisor sets in the driver it starts
        env[RAY_JOB_DRIVER_ENV] = '{"runtime_env": {"working_dir": "gcs://_ray_pkg.zip"}}'
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=tmp_path,  # the job's working directory: where a relative root would land
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE_S,
    )


def test_a_submitted_job_refuses_a_relative_output_root_in_one_line(tmp_path: Path) -> None:
    config = _config(tmp_path)
    for args in (
        ("jobs.synthesize", "--config", str(config), "--dry-run"),
        ("jobs.synthesize", "--config", str(config)),  # a real run: refused before Ray
        ("jobs.nightly", "--config", str(config), "--date", "2026-01-01"),
    ):
        done = _job(tmp_path, *args, submitted=True)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr == f"error: {config}: {REFUSED}\n", args
        assert not (tmp_path / "out").exists(), args  # nothing written where it would be lost


def test_a_submitted_job_takes_an_absolute_root_and_a_local_run_a_relative_one(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    absolute = tmp_path / "kept"
    dry = ("jobs.synthesize", "--config", str(config), "--dry-run")
    done = _job(tmp_path, *dry, "--output-root", str(absolute), submitted=True)
    assert done.returncode == 0, done.stderr
    assert str(absolute / "run=rel") in done.stdout.replace("│\n│", "")
    done = _job(tmp_path, *dry, submitted=False)  # `make synth`: relative `out` as before
    assert done.returncode == 0, done.stderr
    assert "out/run=rel" in done.stdout


def test_a_submitted_evaluation_refuses_a_relative_output_dir(tmp_path: Path) -> None:
    config = REPO / "configs" / "eval-sim.yaml"  # output_dir: out/eval
    done = _job(tmp_path, "jobs.evaluate", "--config", str(config), submitted=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: {config}: output_dir 'out/eval' is relative: under ray job submit it would "
        "land in the job's temporary working directory on the head and be lost with the "
        "cluster; give an absolute path or a bucket URI (s3://, gs://), in the config or "
        "with --output-dir\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_dry_run_to_a_bucket_without_credentials_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """The dry run checks the bucket as the run does, and no credentials is one line."""
    config = _config(tmp_path)
    command = ["jobs.synthesize", "--config", str(config), "--dry-run"]
    done = subprocess.run(
        [sys.executable, "-m", *command, "--output-root", "s3://my-bucket/bgmcts"],
        cwd=tmp_path,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            "PYTHONPATH": str(REPO),
            # nowhere for botocore to find credentials: no files, no instance metadata
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_EC2_METADATA_DISABLED": "true",
        },
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE_S,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: output_root s3://my-bucket/bgmcts: no credentials found (set "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where a role "
        "provides them)"
    ]
