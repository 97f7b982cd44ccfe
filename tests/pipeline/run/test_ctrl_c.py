"""Ctrl-C stops `bgmcts synth` with exit 130 (`jobs.exits`), whatever it is doing.

The job runs as a real subprocess (`python -m jobs.synthesize`) on its own local Ray
cluster and the model-free load model (`configs/smoke-sleep.yaml`, more problems than
it can finish before the signal is handled); SIGINT goes to the driver alone, as
``kill -INT`` sends it, at two phases: after the first committed tree, and while Ray
and the engines start.  The in-process tests of a KeyboardInterrupt that something
catches and drops are in test_interrupt.py.  The signal after the first commit is the
ctrl-c-mid-run scenario (tests/scenarios.py): its job runs minutes of search on its own
cluster, started in the landing gate's busiest minutes; the gate keeps the signal while
Ray and the engines start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.deadlines import JOB_DEADLINE_S
from tests.tiny_run import REPO, start_synthesize_job

pytestmark = pytest.mark.e2e

INTERRUPTED = "interrupted; rerun the same command to resume"
# 130, or (seldom, on a loaded machine) death by SIGINT after the job printed that it was
# interrupted, in the last moments of the interpreter's exit: a shell reports both as 130.
# What must never come back is 0, a run that carried on to its end.
STOPPED = (130, -signal.SIGINT)


def _config(tmp_path: Path) -> Path:
    config = yaml.safe_load((REPO / "configs" / "smoke-sleep.yaml").read_text())
    config["output_root"] = str(tmp_path / "out")
    config["run_id"] = "ctrl-c"
    config["source"]["count"] = 400  # minutes of search: the signal lands mid-run
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _interrupt_when(tmp_path: Path, ready: Callable[[Path], bool]) -> tuple[int, str, float, float]:
    """Start the job, send SIGINT to its driver once `ready(run folder)`, and return
    its exit status, its stderr, the seconds it took to exit after the signal and the
    seconds from its start to the signal."""
    run_dir = tmp_path / "out" / "run=ctrl-c"
    log = tmp_path / "stderr.log"
    launched = time.monotonic()
    job = start_synthesize_job(_config(tmp_path), stderr=log.open("wb"))
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while not ready(run_dir):
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, (
                f"the phase was not reached within {JOB_DEADLINE_S} s"
            )
            time.sleep(0.05)
        os.kill(job.pid, signal.SIGINT)
        sent = time.monotonic()
        try:
            status = job.wait(timeout=JOB_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGINT unheeded: the job still ran {JOB_DEADLINE_S} s later")
        return status, log.read_text(), time.monotonic() - sent, sent - launched
    finally:
        with contextlib.suppress(ProcessLookupError):  # its Ray, whatever the job did
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


@pytest.mark.scenario("ctrl-c-mid-run")
def test_ctrl_c_after_the_first_commit_exits_130_without_finishing(tmp_path: Path) -> None:
    status, stderr, took, started = _interrupt_when(
        tmp_path, lambda run: any((run / "_committed").glob("*"))
    )
    assert status in STOPPED, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == INTERRUPTED
    run = tmp_path / "out" / "run=ctrl-c"
    assert not (run / "report.md").exists()  # the run did not go on to its end
    assert len(list((run / "_committed").glob("*"))) < 400
    # it stops, not finishes: in less time than its start took on this machine's load
    # (seconds on an idle machine, minutes on CI's busiest), or a minute
    assert took < max(60.0, started), (took, started)


def test_ctrl_c_while_ray_and_the_engines_start_exits_130(tmp_path: Path) -> None:
    # run.json is written right before Ray starts: the signal lands in its start or in
    # the deployment of the engines, before any tree
    status, stderr, _, _ = _interrupt_when(tmp_path, lambda run: (run / "run.json").exists())
    assert status in STOPPED, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == INTERRUPTED
    assert not list((tmp_path / "out" / "run=ctrl-c" / "trees").glob("*.parquet"))
