"""Cost per kept row: run.json, report.json and report.md say the same numbers, and they are
the run's tokens over each table's rows.

The run is real (`records_run`, tests/jobs/conftest.py: real SmolLM2 trees through the
records, grading and Parquet sink); its end is written by the run's own code
(`_finish_run`: the rows counted, run.json, the report), without a cluster.  Copies of it
lose a table's rows, get prices or lose the cache columns (a run written before they were
counted), as real folders do.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from jobs import cli
from jobs.exits import OK
from jobs.synthesize import main as synth_main
from pipeline.config import RunConfig, parse_run_config
from pipeline.records import TRAINING_TYPES
from pipeline.report.row_cost import TOKEN_FIELDS
from pipeline.run.gpu_hours import gpu_shape, rows_per_gpu_hour
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import _finish_run
from pipeline.store.run_folder import RunFolder
from tests.tiny_run import run_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CACHE_COLUMNS = (
    "policy_prompt_sent_tokens",
    "policy_prompt_cached_tokens",
    "prm_prompt_cached_tokens",
)
PRICES = {"policy_output": 2.0, "policy_input": 0.1, "prm_input": 0.5, "prm_output": 1.0}


def _config(tmp_path: Path, **extra: Any) -> RunConfig:
    problems = tmp_path / "problems.jsonl"
    problems.write_text('{"id": "p", "question": "1 + 1?", "answer": "2"}\n')
    return parse_run_config(
        run_config(
            problems,
            tmp_path / "out",
            budget=64,
            engine={"kind": "load_model"},
            run_id="records",
            **extra,
        )
    )


def _set(part: Path, column: str, values: list[int]) -> None:
    table = pq.read_table(part)
    at = table.column_names.index(column)
    field = table.schema.field(column)
    pq.write_table(table.set_column(at, field, pa.array(values, field.type)), part)


def _copied(records_run: Path, tmp_path: Path) -> Path:
    """A copy of the shared run whose policy engine reported its prompt tokens and both
    engines their cache reads.  The shared run's trees were rebuilt from logged trees
    without them (0 sent: an engine that reports no prompt tokens); here each tree's
    requests held twice its output in prompt tokens, sent four times (once per choice),
    three quarters of it read from the policy's cache, and half of each path from the
    scorer's."""
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    for part in sorted((run / "trees").glob("*.parquet")):
        table = pq.read_table(part)
        output = table.column("policy_output_tokens").to_pylist()
        paths = table.column("prm_input_tokens").to_pylist()
        _set(part, "policy_input_tokens", [2 * n for n in output])
        _set(part, "policy_prompt_sent_tokens", [8 * n for n in output])
        _set(part, "policy_prompt_cached_tokens", [6 * n for n in output])
        _set(part, "prm_prompt_cached_tokens", [n // 2 for n in paths])
    return run


def _finished(records_run: Path, tmp_path: Path, **extra: Any) -> tuple[Path, RunConfig]:
    """A copy of the shared run (`_copied`, unless the test made one), ended by the
    run's own code (run.json and the report)."""
    run = tmp_path / "out" / records_run.name
    if not run.exists():
        _copied(records_run, tmp_path)
    config = _config(tmp_path, **extra)
    folder = RunFolder.at(run)
    summary = RunSummary("records", run)
    _finish_run(config, folder, summary, time.perf_counter() - 90.0, {})
    return run, config


def _cost(run: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    manifest = json.loads((run / "run.json").read_text())["summary"]
    report = json.loads((run / "report.json").read_text())
    return manifest, report, (run / "report.md").read_text()


def _section(markdown: str) -> str:
    """The cost-per-row section, up to its rows per GPU-hour (which name the tables too)."""
    section = markdown.split("## Cost per kept row", 1)[1].split("\n## ", 1)[0]
    return section.split("Measured over the invocation", 1)[0]


def _gpu_section(markdown: str) -> str:
    section = markdown.split("## Cost per kept row", 1)[1].split("\n## ", 1)[0]
    return "Measured over the invocation" + section.split("Measured over the invocation", 1)[1]


def _table(section: str) -> dict[str, list[str]]:
    """The cost table's rows by table name (cells after the name)."""
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in TRAINING_TYPES:
            rows[cells[0]] = cells[1:]
    return rows


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def _sums(run: Path) -> dict[str, int]:
    """The trees' token totals, recomputed from the Parquet apart from the report's code."""
    trees = pq.read_table(run / "trees").to_pylist()

    def total(column: str) -> int:
        return sum(t[column] for t in trees)

    return {
        "policy_output_tokens": total("policy_output_tokens"),
        "policy_input_tokens": total("policy_input_tokens"),
        "policy_prompt_sent_tokens": total("policy_prompt_sent_tokens"),
        "policy_prompt_computed_tokens": total("policy_prompt_sent_tokens")
        - total("policy_prompt_cached_tokens"),
        "prm_input_tokens": total("prm_input_tokens"),
        "prm_prompt_computed_tokens": total("prm_input_tokens") - total("prm_prompt_cached_tokens"),
        "prm_output_tokens": total("prm_output_tokens"),
    }


def test_run_json_report_json_and_report_md_say_the_same_cost_per_row_with_prices(
    records_run: Path, tmp_path: Path
) -> None:
    run, _ = _finished(records_run, tmp_path, prices=PRICES)
    manifest, report, markdown = _cost(run)
    cost = manifest["cost_per_row"]
    assert report["cost_per_row"] == cost  # one function, the same Parquet
    sums = _sums(run)
    rows = {t: pq.read_table(run / t).num_rows if (run / t).is_dir() else 0 for t in TRAINING_TYPES}
    assert rows["sft"] > 0 and rows["prm"] > 0
    assert sums["policy_prompt_sent_tokens"] > sums["policy_prompt_computed_tokens"] > 0
    money = (
        sums["policy_output_tokens"] * 2.0
        + sums["policy_input_tokens"] * 0.1
        + sums["prm_input_tokens"] * 0.5
        + sums["prm_output_tokens"] * 1.0
    ) / 1e6
    assert cost["money"] == pytest.approx(money) and cost["currency"] == "USD"
    # the report's Totals weigh the same money
    assert report["money"] == pytest.approx(cost["money"])
    table = _table(_section(markdown))
    header = next(x for x in _section(markdown).splitlines() if x.startswith("| table |"))
    assert header.endswith("| money (USD) |"), header
    for name in TRAINING_TYPES:
        entry, n = cost["tables"][name], rows[name]
        assert entry["rows"] == n, name
        if not n:
            continue
        for field in TOKEN_FIELDS:
            assert entry[field] == pytest.approx(sums[field] / n), (name, field)
        assert entry["money"] == pytest.approx(money / n)
        cells = table[name]
        assert _number(cells[0]) == n
        shown = [_number(c) for c in cells[1:]]
        expected = [entry[f] for f in TOKEN_FIELDS] + [entry["money"]]
        assert shown == pytest.approx(expected, abs=0.05), name  # one decimal; money six
        assert shown[-1] == pytest.approx(entry["money"], abs=1e-6)  # six decimals


def test_without_prices_there_is_no_money_and_a_table_without_rows_says_no_rows(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _copied(records_run, tmp_path)
    shutil.rmtree(run / "dpo")  # a run that kept no DPO pairs
    run, _ = _finished(records_run, tmp_path)
    manifest, report, markdown = _cost(run)
    cost = manifest["cost_per_row"]
    assert cost["money"] is None and cost["currency"] is None
    assert cost["tables"]["dpo"] == {
        "rows": 0,
        **dict.fromkeys(TOKEN_FIELDS),
        "money": None,
    }
    section = _section(markdown)
    assert "money" not in section
    table = _table(section)
    assert table["dpo"] == ["0"] + ["no rows"] * len(TOKEN_FIELDS)
    assert "inf" not in section and "nan" not in section.lower()
    assert report["cost_per_row"] == cost
    # `bgmcts report` later rewrites the same numbers from the same Parquet
    assert cli.main(["report", str(run)]) == OK, capsys.readouterr().err
    assert json.loads((run / "report.json").read_text())["cost_per_row"] == cost


def _drop_cache_columns(run: Path, *, null: bool) -> None:
    """The trees parts as a run written before the cache reads were counted: the columns
    absent (the oldest parts) or null (parts written with the schema that has them)."""
    for part in sorted((run / "trees").glob("*.parquet")):
        table = pq.read_table(part)
        for column in CACHE_COLUMNS:
            at = table.column_names.index(column)
            if null:
                field = table.schema.field(column)
                table = table.set_column(at, field, pa.nulls(table.num_rows, field.type))
            else:
                table = table.remove_column(at)
        pq.write_table(table, part)


@pytest.mark.parametrize("null", [True, False], ids=["null", "absent"])
def test_a_run_from_before_the_cache_columns_says_unknown_and_does_not_crash(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], null: bool
) -> None:
    run = _copied(records_run, tmp_path)
    _drop_cache_columns(run, null=null)
    run, _ = _finished(records_run, tmp_path, prices=PRICES)
    manifest, report, markdown = _cost(run)
    cost = manifest["cost_per_row"]
    assert report["cost_per_row"] == cost
    for field in ("policy_prompt_sent_tokens", "policy_prompt_computed_tokens"):
        assert cost["tokens"][field] is None
        assert cost["tables"]["sft"][field] is None
    assert cost["tables"]["sft"]["prm_prompt_computed_tokens"] is None
    # what the trees always had is still there, and the money
    assert cost["tables"]["sft"]["policy_output_tokens"] > 0
    assert cost["tables"]["sft"]["prm_input_tokens"] > 0 and cost["money"] > 0
    section = _section(markdown)
    cells = _table(section)["sft"]
    assert cells[2] == cells[3] == cells[5] == "unknown", cells
    assert "written before the engines' cache reads were counted" in section
    assert cli.main(["report", str(run)]) == OK, capsys.readouterr().err


def test_an_engine_that_reports_no_prompt_tokens_leaves_them_unknown_not_free(
    records_run: Path, tmp_path: Path
) -> None:
    # the shared run as it is: its policy generated, and its trees say no prompt was sent
    run = tmp_path / "out" / records_run.name
    shutil.copytree(records_run, run)
    assert sum(pq.read_table(run / "trees").column("policy_prompt_sent_tokens").to_pylist()) == 0
    run, _ = _finished(records_run, tmp_path)
    manifest, report, markdown = _cost(run)
    sft = manifest["cost_per_row"]["tables"]["sft"]
    assert sft["policy_prompt_sent_tokens"] is None
    assert sft["policy_prompt_computed_tokens"] is None
    assert sft["policy_output_tokens"] > 0  # known
    assert report["cost_per_row"] == manifest["cost_per_row"]
    assert "or its engine reports no prompt tokens" in _section(markdown)


def test_rows_per_gpu_hour_of_a_load_model_run_are_in_run_json_and_the_report(
    records_run: Path, tmp_path: Path
) -> None:
    # the load model's replicas stand for one simulated GPU each (policy and scorer: 2)
    run, _ = _finished(records_run, tmp_path)
    manifest, _, markdown = _cost(run)
    block = manifest["gpu_hours"]
    assert block["gpus"] == 2.0
    assert block["shape"] == (
        "policy 1 x 1 simulated GPU (load model), scorer 1 x 1 simulated GPU (load model)"
    )
    rows = {t: RunFolder.at(run).count(t) for t in TRAINING_TYPES}
    assert block["rows"] == rows  # nothing before this invocation
    hours = 2 * block["wall_time_s"] / 3600
    assert block["gpu_hours"] == pytest.approx(hours, rel=1e-3)
    section = _gpu_section(markdown)
    said = re.search(r"([\d,.]+) s on (.+?), ([\d.]+) GPU-hours", section)
    assert said is not None, section
    assert _number(said[1]) == pytest.approx(block["wall_time_s"], abs=0.5)
    assert _number(said[3]) == pytest.approx(block["gpu_hours"], abs=5e-4)
    lines = {
        cells[0]: cells[1:]
        for line in section.splitlines()
        if (cells := [c.strip() for c in line.strip("|").split("|")])[0] in TRAINING_TYPES
        and len(cells) == 3
    }
    for name, per_hour in block["rows_per_gpu_hour"].items():
        assert per_hour == pytest.approx(rows[name] / block["gpu_hours"])
        assert _number(lines[name][1]) == pytest.approx(per_hour, abs=0.05)


def test_gpu_shapes_of_the_shipped_configs_and_what_autoscaling_leaves_unknown(
    tmp_path: Path,
) -> None:
    import yaml

    def config(name: str) -> RunConfig:
        return parse_run_config(yaml.safe_load((CONFIGS / name).read_text()))

    shape = gpu_shape(config("math500-qwen2.5-7b.yaml"))
    assert shape is not None and shape.gpus == 2.0
    nightly = gpu_shape(config("nightly.yaml"))
    assert nightly is not None and nightly.gpus == 4.0
    assert gpu_shape(config("local.yaml")) is None  # llama.cpp: no GPU, no figure
    # a simulated GPU that runs twice as fast as the wall holds two GPUs' time
    fast = _config(tmp_path, scorer={"engine": {"kind": "load_model", "time_scale": 0.5}})
    assert (shape := gpu_shape(fast)) is not None and shape.gpus == 3.0
    scaled = _config(
        tmp_path,
        policy={"engine": {"kind": "vllm", "model": "m"}, "num_gpus": 1, "autoscaling": {}},
    )
    block = rows_per_gpu_hour(gpu_shape(scaled), {}, {"sft": 3}, 60.0)
    assert block is not None and block["gpu_hours"] is None
    assert "autoscaled" in block["unknown"]
    # rows of earlier invocations are not this one's
    block = rows_per_gpu_hour(gpu_shape(fast), {"sft": 5}, {"sft": 8, "dpo": 2}, 1200.0)
    assert block is not None and block["rows"]["sft"] == 3 and block["rows"]["dpo"] == 2
    assert block["rows_per_gpu_hour"]["sft"] == pytest.approx(3 / (3.0 * 1200 / 3600))


def test_the_dry_run_says_it_gives_no_rows_per_gpu_hour_before_a_run_and_shows_a_measured_one(
    records_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, config = _finished(records_run, tmp_path)
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(config.model_dump(mode="json")))
    assert (
        synth_main(["--config", str(path), "--dry-run", "--output-root", str(tmp_path / "new")])
        == 0
    )
    flat = " ".join(re.sub(r"[│┌┐└┘├┤─]", " ", capsys.readouterr().out).split())
    assert "GPUs held 2 (policy 1 x 1 simulated GPU (load model)" in flat
    assert "kept rows per GPU-hour not estimated before a run" in flat
    # the run that ended: its last invocation measured them
    assert synth_main(["--config", str(path), "--dry-run"]) == 0
    flat = " ".join(re.sub(r"[│┌┐└┘├┤─]", " ", capsys.readouterr().out).split())
    measured = json.loads((run / "run.json").read_text())["summary"]["gpu_hours"]
    sft = measured["rows_per_gpu_hour"]["sft"]
    assert f"kept rows per GPU-hour sft {sft:,.1f}" in flat
    assert "(measured by this run's last invocation, run.json)" in flat
