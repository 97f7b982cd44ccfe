"""Live progress while trees run, and the run report rebuilt from the Parquet.

One real run on a local Ray cluster (Ray Data, search actor, Serve deployments, sink)
against the model-free load model (every engine call waits, so a tree
takes seconds and its progress can be watched; it answers "$\\boxed{42}$" on every
few steps, so some nodes are correct and, where the reference is not 42, incorrect).
The model does not matter for what is checked here: the counters, the display and the
report's arithmetic.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import matplotlib.image
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from rich.console import Console

from pipeline.config import parse_run_config
from pipeline.report.run_report import ANY_NODE_CORRECT, CHOSEN_CORRECT, REPORT_JSON, REPORT_MD
from pipeline.run.live import LiveProgress
from pipeline.run.summary import summarize_run_dir
from tests.hub_server import HubServer
from tests.tiny_run import run_config

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TOKEN = "hf_report_FAKE_token_0123456789"
LINE = re.compile(r"trees (\d+)/(\d+) done, (\d+) in flight.*\| nodes (\d+) \|")


ENGINE = {
    "kind": "load_model",
    "output_tokens": 16,
    "answer_every": 3,
    "decode_base_ms": 9.375,
    "decode_per_seq_ms": 0,
}


def _config(root: Path, problems: Path) -> dict[str, Any]:
    return run_config(
        problems,
        root,
        budget=192,
        engine=ENGINE,
        run_id="progress",
        prices={"policy_output": 2.0, "prm_input": 0.5},
        trees_per_actor=3,
        ray_num_cpus=2,
        # the scorer's engine reports more cached prompt tokens than it was sent in every
        # answer (a setting for tests): clamped in its replica, said in run.json and report
        scorer={
            "engine": {**ENGINE, "cached_over_sent": 7},
            "genprm": {"max_analysis_tokens": 4},
        },
    )


@pytest.fixture(scope="module")
def run(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from pipeline.run.synthesis import synthesize

    tmp = tmp_path_factory.mktemp("progress")
    problems = tmp / "problems.jsonl"
    rows = [
        {"id": "p1", "question": "What is 40 + 2?", "answer": "42"},
        {"id": "p2", "question": "What is 6 * 7?", "answer": "42"},
        {"id": "p3", "question": "What is 3 + 4?", "answer": "7"},
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    log = io.StringIO()
    summary = synthesize(
        parse_run_config(_config(tmp / "out", problems)), progress=log, progress_every_s=0.25
    )
    assert summary.searched == 3
    return summary.run_dir, log.getvalue()


@pytest.mark.e2e
def test_progress_shows_nodes_while_the_batch_is_still_running(run: tuple[Path, str]) -> None:
    _, log = run
    views = [tuple(int(g) for g in m.groups()) for m in LINE.finditer(log)]
    # (done, total, in flight, nodes); the three trees are one batch, returned at its end
    # At least two lines inside the batch (it lasted about 1.5 s once bytecode made every
    # process start faster, with a line each 0.25 s), their node counts growing.
    running = [v for v in views if v[0] == 0 and v[2] == 3]
    assert len(running) >= 2, log
    nodes = [v[3] for v in running]
    assert max(nodes) > 0 and len(set(nodes)) > 1, log  # nodes grow inside the batch
    assert views[-1][:3] == (3, 3, 0), log  # the last line: all done
    assert "policy" in log and "PRM" in log and "ETA" in log and "budget" in log


def _recomputed(run_dir: Path) -> dict[str, Any]:
    """The report's numbers, recomputed independently from the committed Parquet."""
    trees = pq.read_table(run_dir / "trees").to_pylist()
    nodes = pq.read_table(run_dir / "nodes").to_pylist()
    correct = sum(bool(n["label"]) for n in nodes)
    # an answer whose comparison outlived the grading limit (a cold grading pool on a busy
    # machine) has no label: precision is over the graded ones
    graded = sum(n["label"] is not None for n in nodes)
    cost = sum(t["c_used"] for t in trees)
    money = (
        sum(t["policy_output_tokens"] for t in trees) * 2.0
        + sum(t["prm_input_tokens"] for t in trees) * 0.5
    ) / 1e6
    return {
        "trees": len(trees),
        "answered_trees": sum(t["n_answered"] > 0 for t in trees),
        "answered_nodes": len(nodes),
        "correct_nodes": correct,
        "precision": correct / graded,
        "trees_with_correct": sum(t["n_correct"] > 0 for t in trees),
        "chosen_correct": sum(bool(t["correct"]) for t in trees),
        "chosen_graded": sum(t["correct"] is not None for t in trees),
        "policy_input_tokens": sum(t["policy_input_tokens"] for t in trees),
        "cost_units": cost,
        "cost_per_correct_node": cost / correct,
        "money": money,
        "money_per_correct_node": money / correct,
        "scored_nodes": sum(len(t["node_scores"]) for t in trees),
    }


@pytest.mark.e2e
def test_report_numbers_come_from_the_parquet_and_every_png_is_valid(
    run: tuple[Path, str],
) -> None:
    run_dir, _ = run
    expected = _recomputed(run_dir)
    assert 0 < expected["correct_nodes"] < expected["answered_nodes"]  # p3's 42s are wrong
    report = json.loads((run_dir / REPORT_JSON).read_text())
    for key, value in expected.items():
        assert report[key] == pytest.approx(value), key
    markdown = (run_dir / REPORT_MD).read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", markdown)
    assert {"prm_scores.png", "depth_vs_tokens.png", "width_vs_tokens.png"} <= set(images)
    for name in images:
        pixels = matplotlib.image.imread(run_dir / name)  # decodes the whole PNG
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert f"| correct answered nodes | {expected['correct_nodes']} |" in markdown
    assert "five longest trees" in markdown and "five shortest trees" in markdown
    # the prompts' tokens as the engine counted them, though the budget does not charge them
    assert expected["policy_input_tokens"] > expected["trees"] * 20
    # two figures per tree, each with one name, the same in the report and the summary
    chosen = f"{expected['chosen_correct']} of {expected['chosen_graded']} graded"
    any_node = str(expected["trees_with_correct"])
    assert f"| {CHOSEN_CORRECT} | {chosen} |" in markdown
    assert f"| {ANY_NODE_CORRECT} | {any_node} |" in markdown
    table = io.StringIO()
    summarize_run_dir(run_dir).render(table)
    lines = table.getvalue().splitlines()
    assert any(CHOSEN_CORRECT in line and chosen in line for line in lines), lines
    assert any(ANY_NODE_CORRECT in line and f" {any_node} " in line for line in lines), lines
    assert sum("correct" in line for line in lines) == 3, lines  # and answered nodes


def _table_rows(run_dir: Path, name: str) -> list[dict[str, Any]]:
    folder = run_dir / name
    return pq.read_table(folder).to_pylist() if folder.is_dir() else []


@pytest.mark.e2e
def test_data_yield_matches_the_training_tables_and_the_report(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    trees = pq.read_table(run_dir / "trees").to_pylist()
    sft = _table_rows(run_dir, "sft")
    prm = _table_rows(run_dir, "prm")
    counts = {
        "correct_trajectories": sum(t["correct_trajectories"] for t in trees),
        "dpo_pairs": len(_table_rows(run_dir, "dpo")),
        "step_pairs": len(_table_rows(run_dir, "step_dpo")),
        "prm_steps": sum(len(r["labels"]) for r in prm),
    }
    # the tables are what the same builders wrote: pairs and PRM steps equal; SFT keeps
    # at most `sft_top_k` (2) of a problem's correct trajectories, the yield counts them all
    for name in ("dpo_pairs", "step_pairs", "prm_steps"):
        assert sum(t[name] for t in trees) == counts[name], name
    assert len(sft) <= counts["correct_trajectories"]
    assert sum(min(2, t["correct_trajectories"]) for t in trees) == len(sft)
    assert counts["correct_trajectories"] > 0 and counts["prm_steps"] > 0
    policy = sum(t["policy_output_tokens"] for t in trees)
    total = policy + sum(t["prm_input_tokens"] + t["prm_output_tokens"] for t in trees)
    markdown = (run_dir / REPORT_MD).read_text()
    assert "## Data yield" in markdown
    for count in counts.values():
        rates = f"{1000 * count / policy:.3g}, {1000 * count / total:.3g}"
        assert f"{count:,} ({rates})" in markdown


@pytest.mark.e2e
def test_trees_written_before_the_yield_columns_are_left_out_of_the_yield(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    """A run folder written before the yield columns reads back with them null: its report
    has no yield section (not a table of zeros), and in a run resumed across the upgrade
    only the trees with counts are in it, so no rate is understated."""
    import shutil

    from jobs.cli import main
    from pipeline.report.yields import YIELD_COUNTS, yield_table

    run_dir, _ = run
    old = tmp_path / "out" / run_dir.name
    shutil.copytree(run_dir, old)
    for part in (old / "trees").glob("*.parquet"):
        pq.write_table(pq.read_table(part).drop_columns(list(YIELD_COUNTS)), part)
    assert main(["report", str(old)]) == 0
    markdown = (old / REPORT_MD).read_text()
    assert "## The five longest trees" in markdown  # the rest of the report is there
    assert "## Data yield" not in markdown

    frame = pq.read_table(run_dir / "trees").drop_columns(["trace", "node_scores"]).to_pandas()
    mixed = frame.astype({c: "float" for c in YIELD_COUNTS})
    mixed.loc[mixed.index[0], list(YIELD_COUNTS)] = float("nan")  # the tree from before
    table = yield_table(mixed)
    kept = frame.iloc[1:]
    assert table["searches"].sum() == len(kept)
    assert table["policy_output_tokens"].sum() == kept["policy_output_tokens"].sum()
    assert table["dpo_pairs"].sum() == kept["dpo_pairs"].sum()


@pytest.mark.e2e
def test_an_engines_out_of_range_counts_reach_run_json_and_the_report(
    run: tuple[Path, str],
) -> None:
    # clamped in the scorer's replica before anything was stored, they were said only in
    # that replica's log: the trees hold the clamped counts and show nothing
    run_dir, _ = run
    clamped = json.loads((run_dir / "run.json").read_text())["summary"]["clamped_answers"]
    assert set(clamped) == {"scorer"}  # the policy's engine counts right
    scorer = clamped["scorer"]
    n = scorer["answers"]
    assert scorer == {
        "engine": "load_model",
        "answers": n,
        "cached_above_sent": n,
        "negative": 0,
        "not_a_number": 0,
    }
    # GenPRM asks for an analysis and a judgement for every node it scores
    assert n >= 2 * json.loads((run_dir / REPORT_JSON).read_text())["scored_nodes"]
    markdown = (run_dir / REPORT_MD).read_text()
    assert (
        f"The scorer engine (load_model) reported out-of-range token counts in {n} answers "
        f"(cached > sent: {n}); they were clamped as they entered." in markdown
    )
    reads = json.loads((run_dir / REPORT_JSON).read_text())["engine_reads"]["scorer"]
    assert reads["hit_rate"] == 1.0 and reads["clamped_trees"] == 0  # clamped counts stored


def _cells(text: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()]
    return {r[0]: r[1:] for r in rows if len(r) > 2}


@pytest.mark.e2e
def test_cost_per_kept_row_and_rows_per_gpu_hour_are_the_same_in_run_json_and_the_report(
    run: tuple[Path, str],
) -> None:
    from pipeline.report.row_cost import TOKEN_FIELDS

    run_dir, _ = run
    summary = json.loads((run_dir / "run.json").read_text())["summary"]
    cost = summary["cost_per_row"]
    assert json.loads((run_dir / REPORT_JSON).read_text())["cost_per_row"] == cost
    trees = pq.read_table(run_dir / "trees").to_pylist()
    output = sum(t["policy_output_tokens"] for t in trees)
    assert cost["tokens"]["policy_output_tokens"] == output
    assert cost["currency"] == "USD" and cost["money"] > 0  # the run's prices
    markdown = (run_dir / REPORT_MD).read_text()
    section = markdown.split("## Cost per kept row", 1)[1].split("\n## ", 1)[0]
    costs, measured = section.split("Measured over the invocation")
    table = _cells(costs)
    sft = cost["tables"]["sft"]
    assert sft["rows"] > 0
    assert sft["policy_output_tokens"] == pytest.approx(output / sft["rows"])
    for name, entry in cost["tables"].items():
        cells = table[name]
        assert int(cells[0].replace(",", "")) == entry["rows"]
        if not entry["rows"]:
            assert set(cells[1:]) == {"no rows"}, cells
            continue
        shown = [float(c.replace(",", "")) for c in cells[1:]]
        values = [entry[f] for f in TOKEN_FIELDS] + [entry["money"]]
        assert shown == pytest.approx(values, abs=0.05), name
    # the load model's two replicas are two simulated GPUs; the rows are this run's
    gpu = summary["gpu_hours"]
    assert gpu["gpus"] == 2.0 and gpu["wall_time_s"] == summary["wall_time_s"]
    assert gpu["rows"]["sft"] == sft["rows"]
    per_hour_shown = _cells(measured)
    for name, per_hour in gpu["rows_per_gpu_hour"].items():
        assert float(per_hour_shown[name][-1].replace(",", "")) == pytest.approx(per_hour, abs=0.05)


@pytest.mark.e2e
def test_report_command_rewrites_the_report(run: tuple[Path, str]) -> None:
    from jobs.cli import main

    run_dir, _ = run
    before = json.loads((run_dir / REPORT_JSON).read_text())
    (run_dir / REPORT_MD).unlink()
    (run_dir / "prm_scores.png").unlink()
    assert main(["report", str(run_dir)]) == 0
    assert (run_dir / REPORT_MD).is_file() and (run_dir / "prm_scores.png").is_file()
    assert json.loads((run_dir / REPORT_JSON).read_text()) == before


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
def test_the_report_is_published_with_the_card(
    run: tuple[Path, str], hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.publish.publish_run import publish_run_dir

    run_dir, _ = run
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    publish_run_dir(run_dir, "bgmcts/report", endpoint=hub.endpoint)
    files = hub.files("bgmcts/report")
    pngs = {p for p in files if p.startswith("reports/run=progress/") and p.endswith(".png")}
    assert "reports/run=progress/prm_scores.png" in pngs
    assert len(pngs) >= 5
    card = files["README.md"].decode()
    assert "## Run report" in card
    for path in pngs:
        assert f"]({path})" in card  # every uploaded image is linked where it lies
    assert files["reports/run=progress/prm_scores.png"] == (run_dir / "prm_scores.png").read_bytes()


def test_live_view_rates_and_budget_eta() -> None:
    clock = [100.0]
    live = LiveProgress(lambda: {}, total=4, budget=100, file=io.StringIO())
    live.start = 90.0
    first = live.view({"policy_output_tokens": 0, "trees_started": 2}, now=clock[0])
    assert first.in_flight == 2 and first.eta_s is None and first.policy_tok_s == 0
    view = live.view(
        {
            "policy_output_tokens": 50,
            "prm_input_tokens": 80,
            "prm_output_tokens": 20,
            "policy_prompt_sent_tokens": 400,
            "policy_prompt_cached_tokens": 300,
            "prm_prompt_cached_tokens": 20,
            "spent": 100.0,
            "trees_started": 3,
            "trees_done": 1,
        },
        now=110.0,
    )
    assert view.policy_tok_s == pytest.approx(5.0)
    assert view.prm_tok_s == pytest.approx(10.0)
    # 100 of 400 spent in 20 s: 300 left at 5 per second
    assert view.eta_s == pytest.approx(60.0)
    assert (view.done, view.in_flight) == (1, 2)
    assert "trees 1/4 done, 2 in flight" in view.line() and "ETA 1m00s" in view.line()
    # what the engines read from their caches: 300 of 400 policy tokens, 20 of 80 PRM tokens
    assert "| cache policy 75% PRM 25% |" in view.line()
    assert "| cache policy - PRM - |" in first.line()  # nothing sent yet


def test_live_view_counts_the_allocators_second_trees_apart() -> None:
    """Under the night allocator every problem's probe counts against the selection and its
    second tree apart: 4 of 4 probes done is not the end while second trees run."""
    live = LiveProgress(lambda: {}, total=4, budget=100, file=io.StringIO())
    live.start = 90.0
    snap = {"spent": 300.0, "trees_started": 7, "trees_done": 5}
    view = live.view({**snap, "second_started": 3, "second_done": 1}, now=110.0)
    assert (view.done, view.in_flight, view.second_done, view.second_in_flight) == (4, 0, 1, 2)
    assert "trees 4/4 done, 0 in flight; second trees 1 done, 2 in flight |" in view.line()
    assert view.eta_s == pytest.approx(20 * 100 / 300)  # budget-based, not 0
    console = Console(file=io.StringIO(), width=200)
    console.print(view.table())
    assert "second trees 1 done, 2 in flight" in console.file.getvalue()  # type: ignore[attr-defined]
    uniform = live.view(snap, now=111.0)
    assert "second" not in uniform.line() and (uniform.done, uniform.in_flight) == (5, 2)


def test_live_progress_prints_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    count = [0]

    def fetch() -> dict[str, Any]:
        count[0] += 1
        return {"nodes": count[0], "trees_started": 1}

    with LiveProgress(fetch, total=1, budget=10, file=out, every_s=0.1, poll_s=0.02) as live:
        import time

        time.sleep(0.5)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and live.frames >= 2
    assert all(line.startswith("trees 0/1 done, 1 in flight") for line in lines)
