"""`bgmcts check <run>` as a user runs it: a subprocess on a real run folder.

The run is real SmolLM2-135M trees (`tests/fixtures/smollm2_trees.jsonl`) replayed
through the records code a pipeline run uses (`records_for`: math-verify grading, every
record type) into the crash-safe `ParquetSink`; the check reads it back from Parquet.
A second run adds one batch whose sft row goes on past its answer, as SmolLM2 does
when nothing cuts it, so the check has something to find.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline.records import RecordsSpec, records_for
from pipeline.records.rebuild import rebuild_result
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from search.answers import AnswerExtraction
from tests.deadlines import JOB_DEADLINE_S

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
TREES = REPO / "tests" / "fixtures" / "smollm2_trees.jsonl"
# what SmolLM2 writes after its answer when no stop string cuts it
RUN_ON = "\n\nProblem:\nLeo has 9 cards. He gets 3 more. The answer is 12."


def bgmcts_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "check", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=JOB_DEADLINE_S,
    )


async def _records(entry: dict[str, Any], run_id: str) -> dict[str, list[dict[str, Any]]]:
    tree = entry["tree"]
    return await records_for(
        rebuild_result(entry["nodes"], tree),
        tree["reference"],
        RecordsSpec(
            problem_id=f"smollm2-{tree['problem_id']}",
            run_id=run_id,
            policy_model=tree["policy_model"],
            prm_model=tree["prm_model"],
            extraction=AnswerExtraction.LAST_NUMBER,
        ),
    )


def write_run(
    output_root: Path, run_id: str, *, run_on: bool, without: tuple[str, ...] = ()
) -> Path:
    """A run of the real trees, one committed batch each; with `run_on`, one more batch
    holding a copy of the first sft row whose completion goes on past its answer.  The
    tables in `without` get no rows, as when no tree yields a row of them."""
    entries = [json.loads(line) for line in TREES.read_text(encoding="utf-8").splitlines()]
    sink = ParquetSink(RunFolder.open(output_root, run_id))
    batches = [asyncio.run(_records(entry, run_id)) for entry in entries]
    for records in batches:
        sink.write_batch({kind: rows for kind, rows in records.items() if kind not in without})
    if run_on:
        first = next(records for records in batches if records["sft"])
        row = copy.deepcopy(first["sft"][0])
        row["problem_id"] = "run-on"
        row["completion"][0]["content"] += RUN_ON
        sink.write_batch({"sft": [row]})
    return Path(sink.run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("out")
    return write_run(root, "clean", run_on=False), write_run(root, "dirty", run_on=True)


def table_row(stdout: str, table: str) -> list[str]:
    """The cells of one table's line of the printed Markdown table."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == table:
            return cells
    raise AssertionError(f"no {table} line in:\n{stdout}")


def test_a_clean_run_exits_0_with_dirty_rows_0_last(runs: tuple[Path, Path]) -> None:
    clean, _ = runs
    done = bgmcts_check(str(clean))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"run: {clean}"
    assert lines[-1] == "dirty_rows=0"
    for table in ("sft", "dpo", "step_dpo", "kto", "prm"):
        cells = table_row(done.stdout, table)
        assert int(cells[1]) > 0, (table, done.stdout)  # rows were read and checked
        assert cells[-1] == "0"  # dirty


def test_a_row_that_runs_on_past_its_answer_exits_1(runs: tuple[Path, Path]) -> None:
    clean, dirty = runs
    done = bgmcts_check(str(dirty))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-1] == "dirty_rows=1"
    header = table_row(done.stdout, "table")
    sft = dict(zip(header, table_row(done.stdout, "sft"), strict=True))
    clean_sft = table_row(bgmcts_check(str(clean)).stdout, "sft")
    assert int(sft["rows"]) == int(clean_sft[1]) + 1
    assert (sft["after answer"], sft["many answers"], sft["dirty"]) == ("1", "1", "1")


def test_no_run_folder_or_an_unreadable_part_exits_2_with_one_line(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    clean, _ = runs
    for missing in (tmp_path / "run=none", tmp_path):  # no such folder; not a run=<id>
        done = bgmcts_check(str(missing))
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == f"error: {missing} is not a run folder (expected .../run=<id>)\n"
    broken = tmp_path / "out" / clean.name
    broken.parent.mkdir()
    shutil.copytree(clean, broken)
    part = sorted((broken / "sft").glob("*.parquet"))[0]
    part.write_bytes(b"not parquet")
    done = bgmcts_check(str(broken))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr


def copy_of(run: Path, into: Path) -> Path:
    """A copy of a run folder to damage (named run=<id>, as the check wants)."""
    copy = into / "out" / run.name
    shutil.copytree(run, copy)
    return copy


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a check that refused the run (exit 2, nothing on stdout)."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    return done.stderr


@pytest.mark.parametrize("table", ["sft", "dpo", "nodes", "tree_nodes"])
def test_a_table_whose_parts_are_gone_exits_2_naming_it(
    runs: tuple[Path, Path], tmp_path: Path, table: str
) -> None:
    # Readers skip a batch with a missing part, so this run read as dirty_rows=0, exit 0.
    # tree_nodes is no table the check reads, but its loss hides its batches' rows too.
    broken = copy_of(runs[0], tmp_path)
    parts = sorted((broken / table).glob("*.parquet"))
    assert parts
    for part in parts:
        part.unlink()
    line = refused(bgmcts_check(str(broken)))
    many = "s" if len(parts) > 1 else ""
    assert f"table {table}: {len(parts)} committed part{many} missing (part-" in line, line


def test_a_table_whose_folder_is_gone_exits_2_naming_it(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    broken = copy_of(runs[0], tmp_path)
    shutil.rmtree(broken / "kto")
    line = refused(bgmcts_check(str(broken)))
    assert "table kto: " in line and "missing" in line, line


@pytest.mark.parametrize(
    ("table", "column", "named"),
    [
        ("sft", "completion", "completion"),
        ("prm", "completions", "completions"),
        ("dpo", "chosen_node_id", "chosen_node_id or node_id"),
        ("nodes", "label", "label"),
    ],
)
def test_a_part_without_a_column_the_checks_read_exits_2_naming_it(
    runs: tuple[Path, Path], tmp_path: Path, table: str, column: str, named: str
) -> None:
    # Before, a missing column was a KeyError: exit 1, which CI reads as "dirty rows".
    broken = copy_of(runs[0], tmp_path)
    part = sorted((broken / table).glob("*.parquet"))[-1]
    pq.write_table(pq.read_table(part).drop_columns([column]), part)
    line = refused(bgmcts_check(str(broken)))
    assert line == f"error: {broken}: table {table}: {part.name} has no column {named}\n"


def test_an_optional_column_missing_is_an_older_run_and_is_checked(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    # a run written before prm rows carried their separator: checked for what it has
    older = copy_of(runs[0], tmp_path)
    for part in (older / "prm").glob("*.parquet"):
        pq.write_table(pq.read_table(part).drop_columns(["separator", "ends_in_answer"]), part)
    done = bgmcts_check(str(older))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "dirty_rows=0"


def test_a_run_with_no_rows_of_a_table_is_not_refused(tmp_path: Path) -> None:
    # The sink writes no part for a table a batch has no rows of: nothing is missing.
    run = write_run(tmp_path, "no-pairs", run_on=False, without=("dpo", "step_dpo"))
    assert not list((run / "dpo").glob("*.parquet"))
    done = bgmcts_check(str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "dirty_rows=0"
    assert table_row(done.stdout, "dpo")[1] == "0"
    assert int(table_row(done.stdout, "sft")[1]) > 0
