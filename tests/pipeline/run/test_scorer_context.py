"""A one-pass scorer whose context cannot hold the longest path the policy may write is
refused before Ray starts (one line naming the field, exit 2); the shipped configs pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs import synthesize
from pipeline.config import load_run_config
from pipeline.errors import InputError
from pipeline.run.plan import ONE_PASS_PROMPT_ALLOWANCE, check_scorer_context, scorer_context_needed

REPO = Path(__file__).resolve().parents[3]
RUN_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if not p.name.startswith("eval-"))
PRM_GPU = REPO / "configs" / "math500-qwen2.5-7b-prm.yaml"


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_passes(path: Path) -> None:
    check_scorer_context(load_run_config(path))


def with_policy_context(tmp_path: Path, tokens: int) -> Path:
    config = yaml.safe_load(PRM_GPU.read_text())
    config["policy"]["engine"]["max_model_len"] = tokens
    config["output_root"] = str(tmp_path / "out")
    path = tmp_path / "prm.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_need_is_the_tighter_of_b_and_the_policys_context(tmp_path: Path) -> None:
    assert scorer_context_needed(load_run_config(PRM_GPU)) == (3584, "policy.engine.max_model_len")
    wide = load_run_config(with_policy_context(tmp_path, 32768))
    needed = 30000 + ONE_PASS_PROMPT_ALLOWANCE
    assert scorer_context_needed(wide) == (needed, "B=30,000 and the prompt")


def test_a_prm_that_cannot_read_the_longest_path_is_refused(tmp_path: Path) -> None:
    config = load_run_config(with_policy_context(tmp_path, 32768))
    with pytest.raises(InputError) as refused:
        check_scorer_context(config)
    message = str(refused.value)
    needed = f"{30000 + ONE_PASS_PROMPT_ALLOWANCE:,}"
    assert message.startswith("scorer.engine.max_model_len: 4,096 tokens cannot hold")
    assert f"({needed} tokens, from B=30,000 and the prompt)" in message
    assert f"raise it to {needed}" in message
    assert "(policy.engine.max_model_len: 4,096)" in message


def test_a_policy_context_the_prm_holds_passes_and_one_token_more_is_refused(
    tmp_path: Path,
) -> None:
    check_scorer_context(load_run_config(with_policy_context(tmp_path, 4096)))
    with pytest.raises(InputError, match=r"\(4,097 tokens, from policy\.engine\.max_model_len\)"):
        check_scorer_context(load_run_config(with_policy_context(tmp_path, 4097)))


def test_the_dry_run_refuses_it_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    path = with_policy_context(tmp_path, 32768)
    assert synthesize.main(["--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: scorer.engine.max_model_len: 4,096")
    assert not (tmp_path / "out").exists()  # nothing written
