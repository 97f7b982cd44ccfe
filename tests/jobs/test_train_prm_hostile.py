"""`bgmcts train-prm` on hostile input: one line and exit 2 before any training, a training
that stops being finite refused at its step, and a checkpoint that is replaced whole.

Each test breaks one thing in a copy of the session's run folder (a part cut short, text
that is not UTF-8, a row whose steps and labels differ in number, a NaN value), in the
tiny base (`--base` without its tokenizer, its weights cut short), or in the output, and
runs the real command (`jobs.cli.main`) on it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobs import cli
from jobs.exits import BAD_INPUT, FAILED
from pipeline.store.run_folder import RunFolder

pytestmark = pytest.mark.integration

pytest.importorskip("transformers")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["train-prm", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _one_line(err: str) -> None:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def _copy_run(prm_run: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the run folder and its first prm part."""
    run = Path(shutil.copytree(prm_run, tmp_path / "runs" / prm_run.name))
    return run, Path(RunFolder.at(run).parts("prm")[0])


def _rewrite_part(part: Path, change: Callable[[dict[str, list[Any]], Any], Any]) -> str:
    """The part's columns changed by `change` (which may return another schema) and
    written back under its own name (so the run's commit marker still counts it); the
    first row's problem id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(part)
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    schema = change(columns, table.schema) or table.schema
    pq.write_table(pa.table(columns, schema=schema), part)
    return str(columns["problem_id"][0])


def _args(run: Path | str, tiny_base: Path, out: Path, *more: str) -> list[str]:
    return [str(run), "--base", str(tiny_base), "--output", str(out), "--max-steps", "1", *more]


def test_a_part_cut_short_is_one_line(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, part = _copy_run(prm_run, tmp_path)
    part.write_bytes(part.read_bytes()[:200])
    status, out, err = _run(_args(run, tiny_base, tmp_path / "prm"), capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"prm part {part.name} cannot be read" in err
    assert "rows:" not in out and not (tmp_path / "prm").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]  # no staged folder left


def test_text_that_is_not_utf8_is_one_line(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa

    def bad_bytes(columns: dict[str, list[Any]], schema: Any) -> Any:
        columns["prompt"] = [p.encode() for p in columns["prompt"]]
        columns["prompt"][0] = b"\xff\xfe not text"
        at = schema.get_field_index("prompt")
        return schema.set(at, pa.field("prompt", pa.binary()))

    run, part = _copy_run(prm_run, tmp_path)
    _rewrite_part(part, bad_bytes)
    status, _, err = _run(_args(run, tiny_base, tmp_path / "prm"), capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"prm part {part.name} cannot be read (ArrowInvalid: Invalid UTF8" in err


def test_steps_and_labels_of_different_lengths_name_the_row(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def drop_a_label(columns: dict[str, list[Any]], schema: Any) -> None:
        columns["completions"][0] = [*columns["completions"][0], "one step more"]

    run, part = _copy_run(prm_run, tmp_path)
    problem = _rewrite_part(part, drop_a_label)
    status, _, err = _run(_args(run, tiny_base, tmp_path / "prm"), capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"prm row 0 (problem {problem!r}) cannot be trained on: it has " in err
    assert "steps and" in err and "labels" in err


def test_a_nan_value_names_the_row_before_training(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def nan_value(columns: dict[str, list[Any]], schema: Any) -> None:
        columns["values"][0] = [float("nan"), *columns["values"][0][1:]]

    run, part = _copy_run(prm_run, tmp_path)
    problem = _rewrite_part(part, nan_value)
    argv = _args(run, tiny_base, tmp_path / "prm", "--labels", "soft")
    status, out, err = _run(argv, capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"prm row 0 (problem {problem!r}) cannot be trained on: values[0] is nan" in err
    assert "step 1/" not in out and not (tmp_path / "prm").exists()


def test_a_url_with_credentials_is_one_redacted_line(
    tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "s3cr3tPassw0rd"
    for url, expected in (
        (f"s3://AKIAEXAMPLE:{secret}@no-such-bucket/runs/run=x", "credentials do not belong"),
        (f"https://user:{secret}@example.invalid/runs/run=x", "unsupported scheme https://"),
    ):
        status, out, err = _run(_args(url, tiny_base, tmp_path / "prm"), capsys)
        assert status == BAD_INPUT, err
        _one_line(err)
        assert "not a run folder location" in err and expected in err
        assert secret not in err + out and "<redacted>@" in err


def test_a_base_without_tokenizer_or_whole_weights_is_one_line(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_tokenizer = Path(shutil.copytree(tiny_base, tmp_path / "no-tokenizer"))
    for name in ("tokenizer_config.json", "tokenizer.json"):
        (no_tokenizer / name).unlink(missing_ok=True)
    status, _, err = _run(_args(prm_run, no_tokenizer, tmp_path / "prm"), capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"--base: {no_tokenizer} has no tokenizer" in err

    cut = Path(shutil.copytree(tiny_base, tmp_path / "cut"))
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    status, _, err = _run(_args(prm_run, cut, tmp_path / "prm"), capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"--base: {weights} is cut short" in err
    assert not (tmp_path / "prm").exists()


def test_an_output_that_cannot_be_made_is_refused_before_training(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    status, out, err = _run(_args(prm_run, tiny_base, blocker / "prm"), capsys)
    assert status == BAD_INPUT
    _one_line(err)
    assert f"--output: {blocker / 'prm'} cannot be written" in err
    assert "rows:" not in out and "step 1/" not in out  # nothing read, nothing trained


def test_a_loss_that_is_not_finite_stops_the_training_and_nothing_is_written(
    prm_run: Path,
    tiny_base: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """transformers' Trainer drops a NaN from the logged loss (final loss 0.0000) and
    trains on; the command stops at the step that gave it, naming its rows."""
    import torch

    from pipeline.training import prm_trainer

    real = prm_trainer.step_loss
    calls = []

    def nan_on_the_second_step(*args: Any) -> Any:
        calls.append(1)
        loss = real(*args)
        return loss * torch.tensor(float("nan")) if len(calls) == 2 else loss

    monkeypatch.setattr(prm_trainer, "step_loss", nan_on_the_second_step)
    out_dir = tmp_path / "prm"
    argv = _args(prm_run, tiny_base, out_dir, "--max-steps", "3", "--batch-size", "2")
    status, out, err = _run(argv, capsys)
    assert status == FAILED
    _one_line(err)
    assert err.startswith("error: step 2: the loss is nan on rows ")
    assert "nothing was saved" in err and "step 3/" not in out
    assert not out_dir.exists() and not list(tmp_path.iterdir())


def test_weights_that_overflow_stop_the_training_at_that_step(
    prm_run: Path, tiny_base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A learning rate past float32's range makes the first update infinite: refused at
    step 1, before anything is saved."""
    out_dir = tmp_path / "prm"
    argv = _args(prm_run, tiny_base, out_dir, "--max-steps", "3", "--learning-rate", "1e39")
    status, _, err = _run(argv, capsys)
    assert status == FAILED
    _one_line(err)
    assert err.startswith("error: step 1: the update left ") and "NaN or infinite" in err
    assert not out_dir.exists() and not list(tmp_path.iterdir())


def test_overwrite_keeps_the_old_checkpoint_until_the_new_one_is_whole(
    prm_run: Path,
    tiny_base: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run with --overwrite interrupted while it saves (weights written, the layout file
    not yet) leaves the old checkpoint whole under the name and nothing beside it; one
    that finishes replaces it."""
    from actors.engines.checkpoint import verify_checkpoint
    from actors.engines.step_layout import TrainedLayout

    out_dir = tmp_path / "prm"
    assert _run(_args(prm_run, tiny_base, out_dir), capsys)[0] == 0
    old = (out_dir / TrainedLayout.FILE).read_text()
    old_weights = (out_dir / "model.safetensors").read_bytes()

    def killed(self: Any, checkpoint: Any, extra: Any) -> None:
        raise KeyboardInterrupt  # as a kill would land, between the weights and the layout

    with monkeypatch.context() as patched:
        patched.setattr(TrainedLayout, "write", killed)
        argv = _args(prm_run, tiny_base, out_dir, "--overwrite", "--seed", "1")
        assert _run(argv, capsys)[0] == 130
    assert (out_dir / TrainedLayout.FILE).read_text() == old
    assert (out_dir / "model.safetensors").read_bytes() == old_weights
    verify_checkpoint(out_dir, token_classifier=True)
    assert [p.name for p in tmp_path.iterdir()] == ["prm"]

    argv = _args(prm_run, tiny_base, out_dir, "--overwrite", "--seed", "1")
    assert _run(argv, capsys)[0] == 0
    assert json.loads((out_dir / TrainedLayout.FILE).read_text())["hyperparameters"]["seed"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["prm"]
