"""The synthesis job's entrypoint: bad configs are one clear error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.synthesize import main
from pipeline.config import ConfigError, load_run_config


def test_local_config_is_valid() -> None:
    config = load_run_config("configs/local.yaml", output_root="/tmp/x")
    assert config.search.algorithm == "bg_mcts" and str(config.output_root) == "/tmp/x"
    assert config.policy.engine.kind == "llamacpp"


def test_bad_field_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "budget: -5\n"
        "source: {kind: bundled, dataset: gsm8k}\n"
        "search: {algorithm: bg_mcts, kapa: 1}\n"
    )
    assert main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "budget: Input should be greater than or equal to 1" in err
    assert "search.bg_mcts.kapa: Extra inputs are not permitted" in err


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_run_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("source: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(broken)


def test_every_entry_point_answers_bad_input_with_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each job goes through `jobs.exits.guarded`: one `error:` line, no traceback."""
    from jobs import cli, evaluate, nightly

    missing = str(tmp_path / "nope.yaml")
    calls = {
        "nightly --date": lambda: nightly.main(
            ["--config", "configs/nightly.yaml", "--output-root", str(tmp_path), "--date", "x"]
        ),
        "evaluate": lambda: evaluate.main(["--config", missing]),
        "report": lambda: cli.main(["report", str(tmp_path / "run=none")]),
    }
    for name, call in calls.items():
        assert call() == 2, name
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err, (name, err)
    assert main(["--config", missing]) == 2
