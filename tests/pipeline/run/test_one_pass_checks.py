"""A one-pass scorer's engine is checked before Ray starts: a step separator that is not
one token of the model's vocabulary, a checkpoint that is not there, each one line naming
the field, exit 2, nothing started or written (the dry run refuses them too).

The engine config is the test's own (as `tests/actors/test_engine_factory.py` adds one):
its vocabulary is three words, and its checkpoint folder is the `model` path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from actors.config import ScorerConfig, SleepConfig
from actors.engines.base import EngineError
from jobs.exits import BAD_INPUT, guarded
from pipeline.config import RunConfig, parse_run_config
from pipeline.errors import InputError
from pipeline.run.plan import check_engines, plan_run
from pipeline.run.synthesis import synthesize

VOCABULARY = {"\n": 1, "<extra_0>": 2, "step": 3}


class FolderPRMConfig(SleepConfig):
    """A one-pass PRM engine config whose model is a local checkpoint folder."""

    scores_steps: ClassVar[bool] = True

    def check_model(self) -> str | None:
        if not Path(self.model).is_dir():
            raise EngineError(f"engine.model: {self.model} is not a checkpoint folder here")
        return None

    def check_step_separator(self, separator: str) -> None:
        if separator not in VOCABULARY:
            raise ValueError(f"{separator!r} is not one token of this model's vocabulary")


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


def _exit(config: RunConfig, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    import ray

    status = guarded(lambda: synthesize(config) and 0, verbose=False)
    assert not ray.is_initialized()  # refused before Ray starts
    return status, capsys.readouterr().err


def test_a_separator_of_several_tokens_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, tmp_path, "\n\n")
    status, err = _exit(config, capsys)
    assert status == BAD_INPUT
    assert err == (
        "error: scorer.one_pass.step_separator='\\n\\n': '\\n\\n' is not one token of "
        "this model's vocabulary\n"
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
