"""A one-pass scorer's engine is checked before Ray starts: a step separator that is not
one token of the model's vocabulary, a checkpoint that is not there, each one line naming
the field, exit 2, nothing started or written (the dry run refuses them too).

The first tests' engine config is the test's own (as `tests/actors/test_engine_factory.py`
adds one): its vocabulary is three words, and its checkpoint folder is the `model` path.
The last ones run `jobs.synthesize` on configs/local-prm.yaml with the real
`transformers_prm` engine config: a missing checkpoint (the message says how to train
one), a causal LM's checkpoint, and a separator that SmolLM2's real tokenizer (the
session's tiny checkpoint, `tests/prm_checkpoint.py`) splits in two.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from actors.config import ScorerConfig
from actors.engines.load_model import LoadModelConfig
from actors.engines.step_layout import Tokenize
from actors.errors import EngineError
from jobs.exits import BAD_INPUT, guarded
from pipeline.config import RunConfig, parse_run_config
from pipeline.errors import InputError
from pipeline.run.plan import check_engines, plan_run
from pipeline.run.synthesis import synthesize
from tests.tiny_run import REPO, local_prm_config

VOCABULARY = {"\n": 1, "<extra_0>": 2, "step": 3}


def three_words(config: FolderPRMConfig) -> Tokenize:
    """The test model's tokenizer: a text of its vocabulary is one token, any other text
    one token per character."""
    return lambda text: [VOCABULARY[text]] if text in VOCABULARY else [0] * len(text)


class FolderPRMConfig(LoadModelConfig):
    """A one-pass PRM engine config whose model is a local checkpoint folder."""

    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = f"{__name__}:three_words"

    def check_model(self) -> str | None:
        if not Path(self.model).is_dir():
            raise EngineError(
                f"engine.model: {self.model} is not a checkpoint folder here", field="engine.model"
            )
        return None


def _config(tmp_path: Path, model: Path, separator: str) -> RunConfig:
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"problem": "1 + 1?", "answer": "2", "id": "a"}) + "\n")
    base = parse_run_config(
        {
            "output_root": str(tmp_path / "out"),
            "source": {"kind": "jsonl", "path": str(problems)},
            "search": {"algorithm": "bg_mcts"},
        }
    )
    scorer = ScorerConfig(
        kind="one_pass",
        engine=FolderPRMConfig(model=str(model)),
        one_pass={"step_separator": separator},
    )
    return base.model_copy(update={"scorer": scorer})


@pytest.fixture(autouse=True)
def _refused_before_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run here must be refused before Ray starts: reaching it fails the test.  (The
    test process may already hold the shared cluster, so `ray.is_initialized()` cannot
    tell.)"""
    from pipeline.run import synthesis

    def reached(*args: object, **kwargs: object) -> bool:
        raise AssertionError("the run reached Ray: it should have been refused before")

    monkeypatch.setattr(synthesis, "start_ray", reached)


def _exit(config: RunConfig, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = guarded(lambda: synthesize(config) and 0, verbose=False)
    return status, capsys.readouterr().err


def test_a_separator_of_several_tokens_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, tmp_path, "\n\n")
    status, err = _exit(config, capsys)
    assert status == BAD_INPUT
    assert err == (
        "error: scorer.one_pass.step_separator='\\n\\n': the step separator '\\n\\n' is 2 "
        "tokens in this model's vocabulary ([0, 0]); it must be exactly one\n"
    )
    assert not (tmp_path / "out").exists()  # nothing written
    with pytest.raises(InputError, match=r"^scorer\.one_pass\.step_separator="):
        plan_run(config)  # the dry run refuses it too
    check_engines(_config(tmp_path, tmp_path, "<extra_0>"))  # one token: fine


def test_a_missing_checkpoint_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = _exit(_config(tmp_path, tmp_path / "no-such-checkpoint", "\n"), capsys)
    assert status == BAD_INPUT
    assert err == (
        f"error: scorer.engine.model: {tmp_path / 'no-such-checkpoint'} is not a "
        "checkpoint folder here\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_trained_with_another_layout_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bgmcts train-prm` writes how it laid paths out beside the checkpoint: serving it
    with another separator or prompt format would read values where it learned none."""
    (tmp_path / "bgmcts_prm.json").write_text(
        json.dumps({"step_separator": "<extra_0>", "prompt_format": "plain", "steps": "lines"})
    )
    status, err = _exit(_config(tmp_path, tmp_path, "\n"), capsys)
    assert status == BAD_INPUT
    assert err == (
        "error: scorer.one_pass.step_separator='\\n': the checkpoint "
        f"{tmp_path} was trained with '<extra_0>' (bgmcts_prm.json); serve it as it was "
        "trained\n"
    )
    with pytest.raises(InputError, match=r"^scorer\.one_pass\.step_separator="):
        plan_run(_config(tmp_path, tmp_path, "\n"))  # the dry run refuses it too
    check_engines(_config(tmp_path, tmp_path, "<extra_0>"))  # as trained: fine


# -- the same refusals through the real command, on a real checkpoint -------------------


def _local_prm(tmp_path: Path, checkpoint: Path, **one_pass: str) -> Path:
    """configs/local-prm.yaml with its scorer on `checkpoint` and its output under tmp_path."""
    config = local_prm_config(tmp_path / "out", checkpoint, problems=2, budget=32)
    config["scorer"]["one_pass"].update(one_pass)
    path = tmp_path / "local-prm.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_shipped_config_without_its_checkpoint_says_how_to_make_it(tmp_path: Path) -> None:
    missing = tmp_path / "checkpoints" / "local-prm"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "jobs.synthesize", "--config", str(_local_prm(tmp_path, missing))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == BAD_INPUT
    assert done.stderr == (
        f"error: scorer.engine.model: {missing} is not a folder here; train one from a run's "
        f"trees: make prm RUNS=<run folder> PRM_OUT={missing} (bgmcts train-prm)\n"
    )
    assert not (tmp_path / "out").exists()  # nothing written


def _main(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`python -m jobs.synthesize --config CONFIG` in this process: status and stderr."""
    from jobs.synthesize import main

    status = main(["--config", str(config)])
    return status, capsys.readouterr().err


def test_a_causal_lm_checkpoint_exits_2_naming_the_model(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    causal = shutil.copytree(tiny_prm, tmp_path / "causal")
    meta = json.loads((causal / "config.json").read_text())
    (causal / "config.json").write_text(json.dumps({**meta, "architectures": ["LlamaForCausalLM"]}))
    status, err = _main(_local_prm(tmp_path, causal), capsys)
    assert status == BAD_INPUT
    assert err == (
        f"error: scorer.engine.model: {causal} is a LlamaForCausalLM, not a token classifier "
        "(*ForTokenClassification or *ForProcessRewardModel)\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_two_token_separator_of_the_real_tokenizer_exits_2_naming_it(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Math-Shepherd's step tag "ки" is two tokens in SmolLM2's vocabulary
    status, err = _main(_local_prm(tmp_path, tiny_prm, step_separator="ки"), capsys)
    assert status == BAD_INPUT
    assert err.startswith("error: scorer.one_pass.step_separator='ки': the step separator ")
    assert "'ки' is 2 tokens in this model's vocabulary" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
