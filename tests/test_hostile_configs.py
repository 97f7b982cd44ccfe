"""Hostile configs: each is exit 2 and one line naming the file and the field, through the
real entry points (`jobs.synthesize --dry-run`, `jobs.evaluate`, `jobs.nightly`), with real
files.  Each once got further, or failed worse:

* a number no record can hold (`budget: 10000000000000000000` passed --dry-run, then
  failed writing the trees row);
* a YAML alias bomb ("billion laughs"), which loaded and then grew past 3 GB when the run
  dumped its config;
* a config that is not UTF-8 (Latin-1 in a comment: UnicodeDecodeError, exit 1, no file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
import yaml

from jobs import evaluate, nightly, synthesize
from pipeline.config import (
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    RECORD_INT_LIMIT,
    ConfigError,
    load_config,
    load_run_config,
)
from pipeline.evaluation.config import EvalConfig

LOAD_MODEL = {"engine": {"kind": "load_model"}}


def _run_config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "hostile",
        "output_root": str(tmp_path / "out"),
        "budget": 64,
        "source": {"kind": "arithmetic", "count": 3},
        "search": {"algorithm": "bg_mcts"},
        "policy": LOAD_MODEL,
        "scorer": LOAD_MODEL,
        **extra,
    }


def _write(tmp_path: Path, config: dict[str, Any], name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    assert "Traceback" not in err
    return lines[0]


def _dry_run(path: Path) -> int:
    return synthesize.main(["--config", str(path), "--dry-run"])


# -- 4: numbers a record cannot hold -------------------------------------------------------


def test_the_bound_is_what_a_float64_record_column_takes() -> None:
    """pyarrow takes an int into a float64 column (trees.budget) only up to 2**53."""
    pa.array([RECORD_INT_LIMIT, -RECORD_INT_LIMIT], type=pa.float64())
    with pytest.raises(pa.ArrowInvalid):
        pa.array([RECORD_INT_LIMIT + 1], type=pa.float64())


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"budget": 10_000_000_000_000_000_000}, "budget"),
        ({"seed": 2**63}, "seed"),
        ({"source": {"kind": "arithmetic", "count": 3, "limit": 10**19}}, "source.limit"),
        ({"source": {"kind": "arithmetic", "count": 3, "seed": -(2**60)}}, "source.seed"),
        ({"nightly": {"budget_per_night": float("inf")}}, "nightly.budget_per_night"),
        ({"search": {"algorithm": "bg_mcts", "c": float("inf")}}, "search.c"),
    ],
)
def test_dry_run_refuses_a_number_no_record_can_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any], field: str
) -> None:
    path = _write(tmp_path, _run_config(tmp_path, **extra))
    assert _dry_run(path) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {path}: {field}: "), line
    assert "2**53" in line or "not a finite number" in line


def test_dry_run_takes_the_largest_budget_a_record_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _run_config(tmp_path, budget=RECORD_INT_LIMIT))
    assert _dry_run(path) == 0, capsys.readouterr().err


def test_evaluation_budgets_are_checked_too(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {"methods": ["bg_mcts"], "budgets": [64, 2**64], "environment": {"kind": "simulated"}},
        "eval.yaml",
    )
    with pytest.raises(ConfigError, match=r"eval\.yaml: budgets\.1: 18446744073709551616 is"):
        load_config(path, EvalConfig)


# -- 5: alias bombs, and other YAML that costs more than it says ------------------------


def _laughs(levels: int = 9) -> str:
    """Billion laughs as nested mappings: level i is 9 aliases of level i - 1, so 9**10
    values once expanded, from a file of about a kilobyte."""
    lines = ["  l0: &l0 {" + ", ".join(f"k{j}: lol" for j in range(9)) + "}"]
    for i in range(1, levels + 1):
        lines.append(f"  l{i}: &l{i} {{" + ", ".join(f"k{j}: *l{i - 1}" for j in range(9)) + "}")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_a_run_config_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In `policy.autoscaling` (a free-form mapping) the bomb validated and --dry-run
    passed; the run then dumped the config and grew past 3 GB."""
    config = _run_config(tmp_path)
    del config["policy"]
    path = tmp_path / "bomb.yaml"
    path.write_text(
        yaml.safe_dump(config)
        + "policy:\n  engine: {kind: load_model}\n  autoscaling:\n"
        + _laughs()
    )
    assert _dry_run(path) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {path}: more than {MAX_YAML_NODES:,} values once aliases")


def test_an_alias_bomb_in_an_evaluation_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text(
        "methods: [bg_mcts]\nbudgets: [64]\nenvironment:\n  kind: simulated\n  params:\n"
        + _laughs().replace("  l", "    l")
    )
    with pytest.raises(ConfigError, match=r"eval\.yaml: more than 100,000 values"):
        load_config(path, EvalConfig)


def test_anchors_within_the_bound_still_work() -> None:
    """configs/eval-math500.yaml shares method settings through anchors and merge keys."""
    config = load_config("configs/eval-math500.yaml", EvalConfig)
    assert len(config.methods) > 5


@pytest.mark.parametrize(
    ("tail", "says"),
    [
        ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", f"nested deeper than {MAX_YAML_DEPTH}"),
        ("x: &r [1, *r]\n", "alias *r refers to itself"),
        ("seed: " + "9" * 5_000 + "\n", "an integer of more than 100 digits at line"),
    ],
)
def test_yaml_past_a_bound_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: str, says: str
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("budget: 16\nsource: {kind: arithmetic}\nsearch: {algorithm: bg_mcts}\n" + tail)
    assert _dry_run(path) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {path}: ") and says in line, line


# -- 6: not UTF-8 ----------------------------------------------------------------------------


def _latin1(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.yaml"
    text = "# café: the nightly config\n" + yaml.safe_dump(_run_config(tmp_path))
    path.write_bytes(text.encode("latin-1"))
    return path


def test_a_config_that_is_not_utf8_names_the_file_and_byte_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _latin1(tmp_path)
    calls = {
        "synthesize": lambda: _dry_run(path),
        "nightly": lambda: nightly.main(["--config", str(path), "--date", "2026-11-25"]),
        "evaluate": lambda: evaluate.main(["--config", str(path)]),
    }
    for name, call in calls.items():
        assert call() == 2, name
        line = _one_error_line(capsys)
        expected = f"error: {path}: not UTF-8: byte 0xe9 at offset 5 (line 1); save it as UTF-8"
        assert line == expected, (name, line)


def test_a_utf8_bom_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(_run_config(tmp_path)).encode())
    assert load_run_config(path).budget == 64
    path.write_bytes(b"\xef\xbb\xbf# caf\xe9\n")  # the offset counts the BOM's 3 bytes
    with pytest.raises(
        ConfigError, match=r"bom\.yaml: not UTF-8: byte 0xe9 at offset 8 \(line 1\)"
    ):
        load_run_config(path)
