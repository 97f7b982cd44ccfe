"""benchmarks/support/synthesis.py: a benchmark's variant of a shipped config is edited on
the typed config (a wrong field or value fails before any run), and the file it writes is
the config that `jobs.synthesize` reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.support.synthesis import (
    LOCAL,
    LOCAL_PRM,
    base_config,
    edited,
    run_variant,
    synthesize_once,
    write_config,
)
from pipeline.config import ConfigError, load_run_config


def test_a_shipped_config_reads_its_prompt_file_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # configs/ names the prompt file from the repository root
    config = base_config(LOCAL)
    assert config.policy.prompts.policy_instruction.startswith("Example problem:")


def test_edits_are_checked_like_the_config_file() -> None:
    config = base_config(LOCAL_PRM)
    one_pass = edited(config.scorer.one_pass, node_value="min")
    scorer = edited(config.scorer, one_pass=one_pass)
    assert edited(config, scorer=scorer).scorer.one_pass.node_value == "min"
    with pytest.raises(TypeError, match="node_valu"):
        edited(config.scorer.one_pass, node_valu="min")
    with pytest.raises(ConfigError, match="node_value"):
        edited(config.scorer.one_pass, node_value="median")


def test_a_variant_changes_only_what_it_names_and_writes_back_the_same_config(
    tmp_path: Path,
) -> None:
    base = base_config(LOCAL)
    source = {"kind": "arithmetic", "count": 3, "seed": 0, "max_steps": 2}
    search = {"algorithm": "repeated_sampling", "full_max_tokens": 96}
    config = run_variant(
        base, "variant", tmp_path, source=source, count=3, budget=120, search=search
    )
    assert config.trees_per_actor == 3 and config.budget == 120
    assert config.search.algorithm == "repeated_sampling"
    assert config.search.temperature == base.search.temperature
    assert config.search.answer_extraction == base.search.answer_extraction
    assert (config.policy, config.scorer, config.records) == (
        base.policy,
        base.scorer,
        base.records,
    )
    written = write_config(config, tmp_path / "variant.yaml")
    assert load_run_config(written) == config
    # only what the shipped config and the edits set: the file stays as short
    assert "admission" not in written.read_text()


def test_a_finished_run_is_not_searched_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = run_variant(
        base_config(LOCAL),
        "finished",
        tmp_path,
        source={"kind": "arithmetic", "count": 1},
        count=1,
        budget=10,
        search={"algorithm": "bg_mcts"},
    )
    (tmp_path / "finished.done").write_text("ok\n")
    synthesize_once(config, tmp_path)  # would fail: no Ray here, and no log is written
    assert "finished: done before, reused" in capsys.readouterr().out
    assert not (tmp_path / "finished.log").exists()
