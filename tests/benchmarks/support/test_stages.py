"""A benchmark's work dir is resumed from only when what is in it is whole.

`python -m benchmarks.self_improve --work-dir DIR` (its `main`, in this process) on a work
dir holding a stage file cut short - a result, a run's marker, the exported GGUF, the
trained PRM - exits 2 with one line naming the file before any stage runs (nothing is
written: not even the held-out problems); so does a work dir that cannot be made.  The
files the stages write are written whole (`write_whole`), and a stage result is read back
whole or refused (`read_result`, what `run_job` reuses).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.self_improve.main import POLICY_GGUF, PRM_CHECKPOINT, main
from benchmarks.support.stages import StageError, read_result, write_whole
from benchmarks.support.trl import run_job
from tests.prm_checkpoint import write_surface_prm


def _refused(work: Path, capsys: pytest.CaptureFixture[str]) -> str:
    before = sorted(p.name for p in work.iterdir()) if work.is_dir() else None
    capsys.readouterr()
    argv = ["--mode", "tiny", "--trl-python", sys.executable, "--work-dir", str(work)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    after = sorted(p.name for p in work.iterdir()) if work.is_dir() else None
    assert after == before  # no stage ran, nothing was written
    return err


def test_a_result_cut_short_is_one_line_before_any_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "round0.result.json"
    result.write_text(json.dumps({"train": {}, "samples": {"base": [["x"]]}})[:-7])
    err = _refused(tmp_path, capsys)
    assert f"{result} is not a whole stage result (JSONDecodeError)" in err
    result.write_text("[1, 2]")  # JSON, but not a result
    assert "is not a stage result (not a JSON object)" in _refused(tmp_path, capsys)


def test_a_marker_cut_short_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "round0-x.done"
    marker.write_text("o")
    assert f"{marker} is not a finished run's marker" in _refused(tmp_path, capsys)


def test_an_export_cut_short_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / POLICY_GGUF
    writer = GGUFWriter(path, arch="llama")
    writer.add_tensor("token_embd.weight", np.ones((64, 64), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path.write_bytes(path.read_bytes()[:-100])
    assert f"{path} is cut short: " in _refused(tmp_path, capsys)


def test_a_trained_prm_with_weights_cut_short_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_surface_prm(tmp_path / PRM_CHECKPOINT)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])
    err = _refused(tmp_path, capsys)
    assert f"{weights} is cut short" in err and f"delete {folder} to train it again" in err


def test_a_work_dir_that_cannot_be_made_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert f"--work-dir: {blocker} is a file, not a folder" in _refused(blocker / "work", capsys)


def test_stage_files_are_written_whole_and_read_back_whole(tmp_path: Path) -> None:
    path = write_whole(tmp_path / "round1.result.json", json.dumps({"train": {"a": 1}}))
    assert read_result(path) == {"train": {"a": 1}}
    assert [p.name for p in tmp_path.iterdir()] == ["round1.result.json"]  # no temp left
    path.write_text('{"train": ')
    with pytest.raises(StageError, match=r"round1\.result\.json is not a whole stage result"):
        run_job(Path(sys.executable), tmp_path, "round1", {}, reuse=True)
