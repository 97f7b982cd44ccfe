"""The run config's `allocation:` key: off by default (the run as before), a bad setting one
line naming its field, and the dry run's plan of an enabled allocator.  Real config files,
the real command line's `main`; nothing starts Ray."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobs.synthesize import main as synth_main
from pipeline.config import RunConfig, load_run_config
from pipeline.errors import InputError
from pipeline.run.allocation import AllocationConfig
from tests.tiny_run import tiny_run_config

ROWS = [{"id": f"p{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(5)]
LOAD = {"kind": "load_model"}


def _write(tmp_path: Path, **extra: object) -> Path:
    config = tiny_run_config(tmp_path, ROWS, budget=1000, engine=LOAD, **extra)
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(config))
    return path


def test_off_by_default_and_the_default_run_config_is_unchanged(tmp_path: Path) -> None:
    config = load_run_config(_write(tmp_path))
    assert config.allocation == AllocationConfig() and not config.allocation.enabled
    assert RunConfig.model_validate(config.model_dump(mode="json")) == config


@pytest.mark.parametrize(
    ("allocation", "named"),
    [
        ({"enabled": True, "probe_fraction": 1.5}, "allocation.probe_fraction"),
        ({"enabled": True, "window": 0}, "allocation.window"),
        ({"enabled": "maybe"}, "allocation.enabled"),
        ({"enabled": True, "probe": 0.5}, "allocation.probe"),
        ({"enabled": True, "max_multiple": 0.5}, "allocation: max_multiple"),
    ],
)
def test_a_bad_setting_is_one_line_naming_its_field(
    tmp_path: Path, allocation: dict[str, object], named: str
) -> None:
    path = _write(tmp_path, allocation=allocation)
    with pytest.raises(InputError) as caught:
        load_run_config(path)
    message = str(caught.value)
    assert "\n" not in message and named in message and str(path) in message, message


def test_the_dry_run_prints_the_allocation_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, allocation={"enabled": True, "window": 2})
    assert synth_main(["--config", str(path), "--dry-run"]) == 0
    flat = " ".join(re.sub(r"[│┌┐└┘├┤─]", " ", capsys.readouterr().out).split())
    assert "night allocator on: a probe tree per problem at B=650 (probe_fraction 0.65" in flat
    assert "the night's total 5,000 cost units (5 problems x B=1,000)" in flat
    assert "allocation windows 3 of up to 2 problems in source order" in flat
    assert "expected rows not known before the probes; on the simulated world" in flat
    # off: the plan says nothing of it
    assert synth_main(["--config", str(_write(tmp_path)), "--dry-run"]) == 0
    assert "night allocator" not in capsys.readouterr().out
