"""`bgmcts report` never prints a rate that cannot be, and says when counts were clamped.

The run is real (`records_run`, tests/jobs/conftest.py); its trees parts are rewritten
with the engines' read counters a lying engine, an older tool or a damaged file leaves:
more prompt tokens served from the cache than sent, and counts below zero.  A live run
clamps an engine's counts before they are stored, so the trees cannot show them: the
search actors count those answers on the progress board, and the run's end writes them
into run.json (here through the board's and the run's own code, without a cluster).
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from actors.progress import Counters, ProgressBoard
from jobs import cli
from jobs.exits import BAD_INPUT, OK
from pipeline.config import parse_run_config
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import (
    _earlier_clamped,
    _summary_fields,
    record_snapshot,
    write_manifest,
)
from pipeline.store.run_folder import RunFolder
from search.protocols import ClampedCounts
from tests.tiny_run import run_config

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


def _flat(table: str) -> str:
    """A printed summary table's text, its wrapped cells joined again."""
    return " ".join(table.replace("│", " ").split())


def _board(**clamped: ClampedCounts) -> dict[str, Any]:
    """A progress board's snapshot after search actors counted these clamped answers (by
    counter prefix: "policy", "prm"), through the board's own code."""
    counters, board = Counters(), ProgressBoard()
    for engine, counts in clamped.items():
        counters.count_clamped(engine, counts)
    board.add(counters.take())
    return board.snapshot()


def _invocation(run: Path, snapshot: dict[str, Any], problems: Path) -> RunSummary:
    """One invocation's end, as `synthesize` writes it: what run.json held before
    (earlier invocations), the board's counts added, run.json written."""
    config = parse_run_config(
        run_config(problems, run.parent, budget=64, engine={"kind": "load_model"}, run_id="records")
    )
    folder = RunFolder.at(run)
    summary = RunSummary("records", run)
    summary.clamped = _earlier_clamped(folder)
    record_snapshot(summary, snapshot, config)
    write_manifest(config, folder, summary=_summary_fields(summary))
    return summary


def _copied_run(records_run: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the shared run to write to, and a one-problem source file for its config."""
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"id": "p", "question": "1 + 1?", "answer": "2"}\n')
    return run, problems


def test_answers_an_engine_counted_wrong_are_in_run_json_the_summary_and_the_report(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the counts were clamped before they were stored: the trees show nothing, and the
    # summary, run.json and the report said nothing either (only a replica's log did)
    run, problems = _copied_run(records_run, tmp_path)
    cached = ClampedCounts.of({"cached_above_sent"})
    first = _board(policy=cached + cached)
    _invocation(run, first, problems)
    # a rerun of the run (a resume) adds its answers to the first invocation's
    second = _board(
        policy=ClampedCounts.of({"negative"}),
        prm=ClampedCounts.of({"not_a_number"}) + ClampedCounts.of({"not_a_number"}),
    )
    summary = _invocation(run, second, problems)
    policy = (
        "policy engine (load_model) reported out-of-range token counts in 3 answers "
        "(cached > sent: 2, negative: 1); they were clamped"
    )
    scorer = (
        "scorer engine (load_model) reported out-of-range token counts in 2 answers "
        "(not a number: 2); they were clamped"
    )
    printed = io.StringIO()
    summary.render(printed)
    assert policy in _flat(printed.getvalue()) and scorer in _flat(printed.getvalue())
    recorded = json.loads((run / "run.json").read_text())["summary"]["clamped_answers"]
    assert recorded == {
        "policy": {
            "engine": "load_model",
            "answers": 3,
            "cached_above_sent": 2,
            "negative": 1,
            "not_a_number": 0,
        },
        "scorer": {
            "engine": "load_model",
            "answers": 2,
            "cached_above_sent": 0,
            "negative": 0,
            "not_a_number": 2,
        },
    }
    # `bgmcts report` rewrites the report from the Parquet, and from run.json what the
    # Parquet cannot hold
    assert cli.main(["report", str(run)]) == OK, capsys.readouterr().err
    assert policy in _flat(capsys.readouterr().out)
    report = (run / "report.md").read_text()
    section = report.split("## What the engines computed", 1)[1].split("\n## ", 1)[0]
    assert f"The {policy} as they entered. The {scorer} as they entered." in section
    assert json.loads((run / "report.json").read_text())["clamped_answers"] == recorded


def test_a_run_whose_engines_counted_right_says_nothing_of_it(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, problems = _copied_run(records_run, tmp_path)
    summary = _invocation(run, _board(), problems)
    assert not summary.clamped
    assert json.loads((run / "run.json").read_text())["summary"]["clamped_answers"] == {}
    assert cli.main(["report", str(run)]) == OK, capsys.readouterr().err
    assert "out-of-range" not in capsys.readouterr().out
    assert "out-of-range" not in (run / "report.md").read_text()


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ([3], "summary.clamped_answers is list"),
        ({"judge": {"engine": "x", "answers": 1}}, "summary.clamped_answers.judge: not an engine"),
        ({"policy": {"engine": "x", "answers": -1}}, "summary.clamped_answers.policy.answers"),
        ({"policy": {"answers": 1}}, "summary.clamped_answers.policy: not a mapping"),
    ],
)
def test_a_clamped_count_in_run_json_that_no_run_writes_is_one_line_naming_it(
    records_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    value: Any,
    field: str,
) -> None:
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    (run / "run.json").write_text(json.dumps({"summary": {"clamped_answers": value}}))
    assert cli.main(["report", str(run)]) == BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"run.json: {field}" in err, err
    # a run that starts over such a run.json replaces it, as it always did: a warning
    assert _earlier_clamped(RunFolder.at(run)) == {}
    assert "earlier clamped counts are not carried over" in capsys.readouterr().err
