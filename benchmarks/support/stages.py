"""A long benchmark's stage results in its work dir: written whole, and checked whole
before a rerun resumes from them.

A benchmark resumes by reusing what an earlier run of it left in ``--work-dir``: a
stage's result file (``<stage>.result.json``, `benchmarks.support.trl.run_job`), a
finished run's marker (``<run id>.done``, `benchmarks.support.synthesis.synthesize_once`),
a trained checkpoint or an exported GGUF.  So every such file is written under another
name and renamed into place (`write_whole`: a kill leaves the old file or none, never half
of one), and `check_work_dir` refuses, one line naming the file, a work dir holding one
that is not whole anyway (a disk that filled, a copy cut short, a hand edit), before any
stage runs, rather than failing an hour later on a traceback.  `StageError` is an
`InputError`: the benchmark's command exits 2 with the line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common.folders import folder_problem
from pipeline.errors import InputError

RESULT = ".result.json"
MARKER = ".done"
MARKER_TEXT = "ok\n"


class StageError(InputError):
    """A work dir, or a stage file in it, that cannot be resumed from (one line)."""


def write_whole(path: Path, text: str) -> Path:
    """`text` as `path`, written beside it under a name of this process's own and renamed
    over it: a reader finds the old file or the new one, whole."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path


def read_result(path: Path) -> dict[str, Any]:
    """A stage's result file: one JSON object, or a `StageError` naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise StageError(
            f"{path} is not a whole stage result ({type(exc).__name__}); delete it to run "
            "that stage again"
        ) from None
    if not isinstance(data, dict):
        raise StageError(f"{path} is not a stage result (not a JSON object); delete it")
    return data


def prepare_work_dir(work: Path) -> Path:
    """The work dir, made if missing; one that cannot be is a `StageError`."""
    problem = folder_problem(work)
    if problem is not None:
        raise StageError(f"--work-dir: {problem}")
    return work


def check_work_dir(
    work: Path, *, checkpoints: Iterable[Path] = (), ggufs: Iterable[Path] = ()
) -> None:
    """Every stage file already in `work` whole, before any stage runs: each result a
    JSON object, each marker what `synthesize_once` writes, each of `checkpoints` (PRM
    folders a stage reuses) and `ggufs` (exports) that is there whole."""
    for path in sorted(work.glob(f"*{RESULT}")):
        read_result(path)
    for path in sorted(work.glob(f"*{MARKER}")):
        try:
            whole = path.read_text(encoding="utf-8") == MARKER_TEXT
        except (OSError, UnicodeDecodeError):
            whole = False
        if not whole:
            raise StageError(f"{path} is not a finished run's marker; delete it to run again")
    for folder in checkpoints:
        if folder.exists():
            _check_checkpoint(folder)
    for path in ggufs:
        if path.exists():
            from actors.engines.gguf_file import gguf_fault

            fault = gguf_fault(path)
            if fault is not None:
                raise StageError(f"{fault}; delete it to export again")


def _check_checkpoint(folder: Path) -> None:
    from actors.engines.checkpoint import CheckpointError, verify_checkpoint
    from actors.engines.step_layout import TrainedLayout

    if not TrainedLayout.written(folder):
        return  # not finished: the stage trains it again
    try:
        verify_checkpoint(folder, token_classifier=True)
    except CheckpointError as exc:
        raise StageError(f"{exc}; delete {folder} to train it again") from None


__all__ = [
    "MARKER",
    "MARKER_TEXT",
    "RESULT",
    "StageError",
    "check_work_dir",
    "prepare_work_dir",
    "read_result",
    "write_whole",
]
