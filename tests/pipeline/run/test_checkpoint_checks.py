"""A one-pass PRM checkpoint is checked whole before Ray starts, and again by the engine
when it loads (`actors.engines.checkpoint.verify_checkpoint`): one line naming the file and what is
wrong, exit 2, nothing run or written.

The first tests need no model: a folder of hand-written files (a config.json, a tokenizer's
settings, a safetensors file written with numpy) fails before anything would be built.
The integration tests take the session's tiny real checkpoint (`tests/prm_checkpoint.py`)
and break one thing in a copy: a weight file cut short, the classification head taken out,
a NaN weight, a config.json whose sizes the weights do not have.  Each goes through
`bgmcts synth --dry-run` (`jobs.synthesize.main`), the check a real run makes too; the
engine's own check and Serve's reporting of it are the last tests.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.exits import BAD_INPUT
from tests.prm_checkpoint import write_surface_prm
from tests.tiny_run import local_prm_config

WEIGHTS = "model.safetensors"


def _dry_run(tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`bgmcts synth --dry-run` on configs/local-prm.yaml scored by `checkpoint`: it must
    exit 2 with one line and write nothing; that line."""
    from jobs.synthesize import main

    config = local_prm_config(tmp_path / "out", checkpoint, problems=2, budget=32)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "local-prm.yaml"
    path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    status = main(["--config", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    assert err.startswith("error: scorer.engine.model: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()
    return err


def _cut(path: Path, keep: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - keep])


# -- faults found before any model is built (fast) ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2]", "config.json holds a list, not the object a model config is"),
        ("null", "config.json holds null, not the object a model config is"),
        ('{"architectures": ', "config.json is not readable JSON"),
        ('{"architectures": "LlamaForTokenClassification"}', "architectures is not a list"),
    ],
)
def test_a_config_json_of_the_wrong_shape_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    checkpoint = write_surface_prm(tmp_path / "prm")
    (checkpoint / "config.json").write_text(text)
    assert expected in _dry_run(tmp_path, checkpoint, capsys)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"step_separator": "\\n", ', "bgmcts_prm.json is not readable JSON"),
        ("[]", "bgmcts_prm.json holds a list, not the object a PRM layout is"),
        ("null", "bgmcts_prm.json holds null, not the object a PRM layout is"),
        ('{"step_separator": 1}', "step_separator is missing or not a string"),
    ],
)
def test_layout_metadata_that_is_not_a_layout_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    checkpoint = write_surface_prm(tmp_path / "prm")
    (checkpoint / "bgmcts_prm.json").write_text(text)
    assert expected in _dry_run(tmp_path, checkpoint, capsys)


def test_weights_cut_short_or_missing_and_no_tokenizer_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = write_surface_prm(tmp_path / "cut")
    _cut(cut / WEIGHTS, 5)
    assert f"{cut / WEIGHTS} is cut short: " in _dry_run(tmp_path / "a", cut, capsys)

    header = write_surface_prm(tmp_path / "header")
    (header / WEIGHTS).write_bytes((header / WEIGHTS).read_bytes()[:20])
    assert "no whole header" in _dry_run(tmp_path / "b", header, capsys)

    pickled = write_surface_prm(tmp_path / "bin")
    (pickled / WEIGHTS).rename(pickled / "pytorch_model.bin")
    assert "only pytorch_model.bin: save the checkpoint as safetensors" in _dry_run(
        tmp_path / "c", pickled, capsys
    )

    shards = write_surface_prm(tmp_path / "shards")
    index = {"weight_map": {"score.weight": "model-00001-of-00002.safetensors"}}
    (shards / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "model-00001-of-00002.safetensors is missing" in _dry_run(tmp_path / "d", shards, capsys)

    no_tokenizer = write_surface_prm(tmp_path / "no-tokenizer")
    (no_tokenizer / "tokenizer_config.json").unlink()
    assert "has no tokenizer" in _dry_run(tmp_path / "e", no_tokenizer, capsys)


# -- faults only the model's own description shows (a real tiny checkpoint) --------------


def _copy(tiny_prm: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_prm, tmp_path / "prm"))


def _rewrite(checkpoint: Path, change: Any) -> None:
    """The weights read with numpy, changed by `change` (a function of the dict), saved."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(checkpoint / WEIGHTS))
    change(tensors)
    save_file(tensors, str(checkpoint / WEIGHTS), metadata={"format": "pt"})


@pytest.mark.integration
def test_the_tiny_checkpoint_itself_passes(tiny_prm: Path) -> None:
    from actors.engines.checkpoint import verify_checkpoint

    checked = verify_checkpoint(tiny_prm, token_classifier=True)
    assert "score.weight" in checked.tensors and checked.layout is None


@pytest.mark.integration
def test_a_real_checkpoint_cut_short_is_one_line(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _copy(tiny_prm, tmp_path)
    _cut(checkpoint / WEIGHTS, 1000)
    err = _dry_run(tmp_path, checkpoint, capsys)
    assert f"{checkpoint / WEIGHTS} is cut short: " in err


@pytest.mark.integration
def test_a_checkpoint_without_its_head_is_one_line(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """transformers would load it with a random head and score without a word."""
    checkpoint = _copy(tiny_prm, tmp_path)
    _rewrite(checkpoint, lambda tensors: tensors.pop("score.weight"))
    err = _dry_run(tmp_path, checkpoint, capsys)
    assert "lacks its head (score.weight) in its weights" in err


@pytest.mark.integration
def test_a_nan_weight_is_one_line(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def poison(tensors: dict[str, Any]) -> None:
        tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = float("nan")

    checkpoint = _copy(tiny_prm, tmp_path)
    _rewrite(checkpoint, poison)
    err = _dry_run(tmp_path, checkpoint, capsys)
    assert "model.layers.1.mlp.up_proj.weight holds 1 values that are NaN or infinite" in err


@pytest.mark.integration
def test_a_config_whose_sizes_the_weights_lack_is_one_line(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _copy(tiny_prm, tmp_path)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "intermediate_size": 48}))
    err = _dry_run(tmp_path, checkpoint, capsys)
    assert "config.json gives it [48, 32] (its sizes do not match the weights)" in err


@pytest.mark.integration
def test_the_engine_refuses_a_checkpoint_changed_after_the_check(
    tmp_path: Path, tiny_prm: Path
) -> None:
    """The run's check passed; the folder then lost its head: the engine, loading it in
    its replica, refuses with the same line rather than serving a random head."""
    from actors.engines.transformers_prm import TransformersPRMConfig, TransformersPRMEngine
    from actors.errors import EngineError

    checkpoint = _copy(tiny_prm, tmp_path)
    TransformersPRMConfig(model=str(checkpoint)).check_model()
    _rewrite(checkpoint, lambda tensors: tensors.pop("score.weight"))
    with pytest.raises(EngineError, match=r"^engine\.model: .* lacks its head") as raised:
        TransformersPRMEngine(TransformersPRMConfig(model=str(checkpoint)), step_separator="\n")
    assert raised.value.field == "engine.model"


@pytest.mark.integration
def test_serve_reports_the_replicas_cause_not_only_that_it_failed(
    tmp_path: Path, tiny_prm: Path, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scorer deployment whose replica cannot load its checkpoint (the check before it
    is skipped here, as when the folder changes after it): the error names the field and
    the cause, as the check before Ray would have, instead of Serve's "Deploying
    application scorer failed"."""
    from actors import serve as served
    from actors.config import ScorerConfig
    from actors.errors import EngineError

    checkpoint = _copy(tiny_prm, tmp_path)
    _cut(checkpoint / WEIGHTS, 1000)
    monkeypatch.setattr(served, "check_scorer_engine", lambda config: None)
    scorer = ScorerConfig(
        kind="one_pass", engine={"kind": "transformers_prm", "model": str(checkpoint)}
    )
    try:
        with pytest.raises(EngineError) as raised:
            served.deploy_scorer(scorer, app="scorer")
    finally:
        from ray import serve

        with contextlib.suppress(Exception):
            serve.delete("scorer")
    assert str(raised.value).startswith(f"scorer.engine.model: {checkpoint / WEIGHTS} is cut")
    assert raised.value.field == "scorer.engine.model"
