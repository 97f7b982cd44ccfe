"""Handing training and generation to the TRL venv.

Fine-tuning a policy needs torch, transformers and TRL, which the project's venv does
not have (``make test-trl`` makes ``.venv-trl``).  The benchmarks that train write a job
file and run `TRAIN_MODULE` with that venv's Python; it trains each named row set,
answers prompts with each model and writes a result file (both files are described in
`benchmarks/data_value/train.py`).  `run_job` runs one such stage, its log in
``WORK/<stage>.log``; a stage whose result is already there is reused when asked, so an
interrupted benchmark resumes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.support.commands import REPO, run_module
from benchmarks.support.stages import RESULT, read_result, write_whole

DEFAULT_TRL_PYTHON = REPO / ".venv-trl" / "bin" / "python"
# the TRL venv's half: imports torch, TRL and nothing of the pipeline
TRAIN_MODULE = "benchmarks.data_value.train"


def check_trl_python(path: Path) -> None:
    """Stop with how to make the TRL venv when `path` is not there (before any stage runs,
    rather than an hour later at the first training)."""
    if not Path(path).is_file():
        raise SystemExit(
            f"error: no TRL python at {path}: `make test-trl` creates .venv-trl (trl, "
            "transformers, datasets, torch CPU, gguf; requirements-trl.txt), or pass "
            "--trl-python PATH"
        )


def run_job(
    trl_python: Path, work: Path, stage: str, job: dict[str, Any], *, reuse: bool
) -> dict[str, Any]:
    """Run `job` in the TRL venv as ``WORK/<stage>.job.json``; its result
    (``WORK/<stage>.result.json``).  With `reuse`, a result a finished run left is read
    instead of training again."""
    job_path, result_path = work / f"{stage}.job.json", work / f"{stage}{RESULT}"
    if reuse and result_path.is_file():
        print(f"[trl] {stage}: done before, reused", flush=True)
        return read_result(result_path)  # one line naming it when it is not whole
    write_whole(job_path, json.dumps(job))
    # written under another name first: a killed run leaves no result that looks finished
    partial = result_path.with_suffix(".partial")
    args = [str(job_path), str(partial)]
    run_module(TRAIN_MODULE, args, work / f"{stage}.log", python=trl_python)
    read_result(partial)  # whole before it takes the name a rerun reuses
    partial.rename(result_path)
    result = read_result(result_path)
    print(f"[trl] {stage}: {json.dumps(result.get('train', {}))}", file=sys.stderr)
    return result
