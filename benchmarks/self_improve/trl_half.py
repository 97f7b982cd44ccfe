"""Hands training and generation to `benchmarks.data_value.train` in the TRL venv.

One call per stage; the job and its result are files under WORK (``<stage>.job.json``,
``<stage>.result.json``), and a stage whose result exists is not run again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.data_value.measure import REPO
from benchmarks.self_improve.plan import Mode


def hyper(mode: Mode) -> dict[str, Any]:
    """The same training and generation settings for every checkpoint."""
    return {
        "steps": mode.sft_steps,
        "batch_size": mode.batch_size,
        "learning_rate": mode.learning_rate,
        "seed": 0,
        "max_length": 512,
        "eval_batch_size": 64,
        "max_new_tokens": mode.max_new_tokens,
    }


def run_stage(trl_python: Path, work: Path, stage: str, job: dict[str, Any]) -> dict[str, Any]:
    """Run one job in the TRL venv (or read the result a finished run left)."""
    job_path, result_path = work / f"{stage}.job.json", work / f"{stage}.result.json"
    if result_path.is_file():
        print(f"[trl] {stage}: done before, reused", flush=True)
        cached: dict[str, Any] = json.loads(result_path.read_text())
        return cached
    job_path.write_text(json.dumps(job))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    partial = result_path.with_suffix(".partial")
    with (work / f"{stage}.log").open("w") as log:
        done = subprocess.run(
            [str(trl_python), "-m", "benchmarks.data_value.train", str(job_path), str(partial)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        tail = (work / f"{stage}.log").read_text()[-3000:]
        raise RuntimeError(f"TRL stage {stage} failed (log {work / f'{stage}.log'}):\n{tail}")
    partial.rename(result_path)
    result: dict[str, Any] = json.loads(result_path.read_text())
    print(f"[trl] {stage}: {json.dumps(result.get('train', {}))}", file=sys.stderr)
    return result
