"""`bgmcts report` never prints a rate that cannot be, and says when it clamped counts.

The run is real (`records_run`, tests/jobs/conftest.py); its trees parts are rewritten
with the engines' read counters a lying engine, an older tool or a damaged file leaves:
more prompt tokens served from the cache than sent, and counts below zero.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from jobs import cli
from jobs.exits import OK

PERCENT = re.compile(r"(-?\d+(?:\.\d+)?)%")


def _set(part: Path, column: str, values: list[int]) -> None:
    table = pq.read_table(part)
    at = table.column_names.index(column)
    field = table.schema.field(column)
    pq.write_table(table.set_column(at, field, pa.array(values, field.type)), part)


def test_counts_that_cannot_be_give_no_rate_outside_0_to_1_and_are_named(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # were "250.0%" and "-1.1%" in the report's engine table, without a word
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    parts = sorted((run / "trees").glob("*.parquet"))
    for part in parts[:2]:  # the policy's cache said 2.5 times what was sent
        sent = pq.read_table(part).column("policy_prompt_sent_tokens").to_pylist()
        _set(part, "policy_prompt_sent_tokens", [100] * len(sent))
        _set(part, "policy_prompt_cached_tokens", [250] * len(sent))
    rows = pq.read_table(parts[2]).num_rows
    _set(parts[2], "prm_input_tokens", [-90] * rows)  # the scorer's counts below zero
    _set(parts[2], "prm_prompt_cached_tokens", [1] * rows)
    assert cli.main(["report", str(run)]) == OK, capsys.readouterr().err
    report = (run / "report.md").read_text()
    section = report.split("## What the engines computed", 1)[1].split("\n## ", 1)[0]
    rates = [float(v) for v in PERCENT.findall(section)]
    assert rates and all(0 <= r <= 100 for r in rates), section
    assert "were clamped before these sums" in section
    assert "policy in 2 trees" in section and f"scorer in {rows} tree" in section
    reads = json.loads((run / "report.json").read_text())["engine_reads"]
    for engine in ("policy", "scorer"):
        rate = reads[engine]["hit_rate"]
        assert rate is None or 0 <= rate <= 1
        assert reads[engine]["computed"] >= 0 and reads[engine]["cached"] >= 0
    assert reads["policy"]["clamped_trees"] == 2
