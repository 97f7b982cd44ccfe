"""Running one of the project's commands in a child process, its output kept in a log file.

The long benchmarks run the project's own entrypoints (``python -m jobs.synthesize``,
``jobs.train_prm``, the TRL half in another venv) as child processes: a crash there must
not take the benchmark's finished stages with it, and the child's many log lines belong
in a file, not between the tables the benchmark prints.  `run_logged` is the one way they
do it: the child runs in the repository root with `child_env`, and a failure raises with
the end of its log, so the reason is on screen without opening the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# how much of a failed child's log the error shows: a traceback and the lines before it
LOG_TAIL_CHARS = 3000


def child_env(root: Path = REPO) -> dict[str, str]:
    """This process's environment for a child that runs the project's code.

    The repository (`root`: another checkout of it, for a benchmark that runs an earlier
    revision beside this one) goes first on PYTHONPATH, so `python -m jobs.x` works from
    any venv and runs that checkout's code, in Ray's workers too (they inherit it);
    a Ray child starts its own local cluster without a login or telemetry unless the
    caller set otherwise; Hugging Face libraries stay offline (the models are local) and
    tokenizers do not start threads of their own on the shared cores.
    """
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
        "RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0"),
        "RAY_ADDRESS": os.environ.get("RAY_ADDRESS", "local"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def log_tail(log: Path, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `chars` characters of a log file ("" when there is none)."""
    return log.read_text(errors="replace")[-chars:] if log.is_file() else ""


def run_logged(command: Sequence[str], log: Path, *, what: str, root: Path = REPO) -> float:
    """Run `command` in the repository root (or `root`), stdout and stderr both into `log`.

    Returns the wall seconds it took; a non-zero exit raises RuntimeError naming `what`
    and the log, with the log's tail.
    """
    started = time.perf_counter()
    with log.open("w") as sink:
        done = subprocess.run(
            list(command), cwd=root, env=child_env(root), stdout=sink, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}, log {log}):\n{log_tail(log)}")
    return time.perf_counter() - started


def run_module(
    module: str,
    args: Sequence[str],
    log: Path,
    *,
    python: Path | str = sys.executable,
    root: Path = REPO,
) -> float:
    """``python -m module args`` with `run_logged` (the project's venv unless `python`; this
    checkout's code unless `root`)."""
    return run_logged(
        [str(python), "-m", module, *args], log, what=f"python -m {module}", root=root
    )
