"""The evaluation report on a small real grid: scripted searches -> Parquet -> write_report.

Every number is checked against an independent recomputation straight from the
Parquet files (pyarrow + plain Python / NumPy), not through the report's pandas code.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.evaluation.rows import tree_rows
from pipeline.evaluation.schema import EVAL_NODES_SCHEMA, EVAL_TREES_SCHEMA
from pipeline.records import to_table
from pipeline.report import (
    ReportFiles,
    load_run,
    tree_layout,
    write_report,
)
from pipeline.report.anytime import adjusted_budgets, anytime_curves, budget_markers
from pipeline.report.markdown import fraction, scientific
from search import derive_seed, parse_search_config, run_search
from search.answer_choice import normalize_answer
from search.scripted import ScriptedPolicy, ScriptedScorer

REFERENCE = "12"
METHODS = {"bg_mcts": "bg_mcts", "mcts": "mcts", "litesearch-incre": "litesearch"}
BUDGETS = (600, 1200)
SEEDS = (0, 1)
PROBLEMS = ("p0", "p1", "p2", "p3")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- the grid
def _correct(answer: str | None) -> bool:
    return answer is not None and normalize_answer(answer) == REFERENCE


async def _grid() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    trees: list[dict[str, Any]] = []
    nodes: list[dict[str, Any]] = []
    for method, algorithm in METHODS.items():
        config = parse_search_config({"algorithm": algorithm})
        for budget in BUDGETS:
            for seed in SEEDS:
                for problem in PROBLEMS:
                    s = derive_seed(seed, problem)
                    result = await run_search(
                        f"Problem {problem}",
                        config,
                        ScriptedPolicy(seed=s, p_answer=0.3, step_tokens=(10, 40)),
                        ScriptedScorer(seed=s, distribution="near_binary", p_high=0.3),
                        budget,
                        seed,
                    )
                    tree, tree_nodes = tree_rows(
                        result,
                        _correct,
                        method=method,
                        budget=budget,
                        seed=seed,
                        problem_id=problem,
                        reference=REFERENCE,
                    )
                    trees.append(tree)
                    nodes += tree_nodes
    return trees, nodes


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("eval-run")
    trees, nodes = asyncio.run(_grid())
    pq.write_table(to_table(trees, EVAL_TREES_SCHEMA), folder / "eval_trees.parquet")
    pq.write_table(to_table(nodes, EVAL_NODES_SCHEMA), folder / "eval_nodes.parquet")
    meta = {"environment": "scripted", "models": {"policy": "scripted"}, "wall_time_s": 1.5}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture(scope="module")
def files(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> ReportFiles:
    return write_report(run_dir, tmp_path_factory.mktemp("report"), tree_pictures=2)


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _close(a: str, b: float) -> bool:
    return math.isclose(float(a), b, rel_tol=1e-9, abs_tol=1e-12)


# --------------------------------------------------------------------------- the grid is apt
def test_grid_exercises_early_stops_and_generative_nodes(run_dir: Path) -> None:
    trees = _parquet_rows(run_dir / "eval_trees.parquet")
    lite = [t for t in trees if t["method"] == "litesearch-incre"]
    assert any(t["early_stopped"] for t in lite) and not all(t["early_stopped"] for t in lite)
    assert not any(t["early_stopped"] for t in trees if t["method"] != "litesearch-incre")
    nodes = _parquet_rows(run_dir / "eval_nodes.parquet")
    assert any(n["from_generative"] for n in nodes)


# --------------------------------------------------------------------------- tables
def test_accuracy_csv_matches_recomputation(run_dir: Path, files: ReportFiles) -> None:
    per_seed: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for t in _parquet_rows(run_dir / "eval_trees.parquet"):
        per_seed[t["method"], t["budget"]][t["seed"]].append(t)
    table = {(r["method"], int(r["budget"])): r for r in _csv(files.tables["accuracy.csv"])}
    assert set(table) == set(per_seed)
    for key, seeds in per_seed.items():
        acc = [statistics.mean(float(t["correct"]) for t in rows) for rows in seeds.values()]
        tokens = [statistics.mean(t["c_used"] for t in rows) for rows in seeds.values()]
        row = table[key]
        assert _close(row["accuracy_mean"], statistics.mean(acc))
        assert _close(row["accuracy_std"], statistics.stdev(acc))
        assert _close(row["tokens_mean"], statistics.mean(tokens))
        assert int(row["seeds"]) == len(SEEDS) and int(row["problems"]) == len(PROBLEMS)
    # grid order, budgets ascending
    assert [r["method"] for r in _csv(files.tables["accuracy.csv"])][:: len(BUDGETS)] == list(
        METHODS
    )


def test_answered_nodes_match_recomputation(run_dir: Path, files: ReportFiles) -> None:
    counts: dict[tuple[str, int], dict[int, list[int]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0])
    )
    for n in _parquet_rows(run_dir / "eval_nodes.parquet"):
        if n["answered"]:
            cell = counts[n["method"], n["budget"]][n["seed"]]
            cell[0] += 1
            cell[1] += bool(n["correct"])
    rows = {(r["method"], int(r["budget"])): r for r in _csv(files.tables["answered_nodes.csv"])}
    for key, seeds in counts.items():
        answered = statistics.mean(c[0] for c in seeds.values())
        correct = statistics.mean(c[1] for c in seeds.values())
        assert _close(rows[key]["answered"], answered)
        assert _close(rows[key]["correct"], correct)
        assert _close(rows[key]["precision"], correct / answered)


def test_prm_percentiles_equal_numpy(run_dir: Path, files: ReportFiles) -> None:
    nodes = _parquet_rows(run_dir / "eval_nodes.parquet")
    rows = {r["method"]: r for r in _csv(files.tables["prm_percentiles.csv"])}
    assert list(rows) == list(METHODS)
    for method in METHODS:
        q = [
            n["q"]
            for n in nodes
            if n["method"] == method
            and n["budget"] == max(BUDGETS)
            and n["node_id"] != 0
            and not n["failed"]
        ]
        expected = np.percentile(q, [10, 25, 50, 75, 90])
        row = rows[method]
        assert int(row["budget"]) == max(BUDGETS) and int(row["nodes"]) == len(q)
        for p, value in zip((10, 25, 50, 75, 90), expected, strict=True):
            assert _close(row[f"p{p}"], float(value))


def test_markdown_tables_use_the_paper_formats(files: ReportFiles) -> None:
    assert scientific(2.183e-3) == "2.183×10⁻³" and scientific(0.9996) == "9.996×10⁻¹"
    assert fraction(0.373) == ".373" and fraction(1.0) == "1.000" and fraction(math.nan) == "–"
    accuracy = files.tables["accuracy.md"].read_text()
    assert "| Method \\ Budget B | 600 | 1.2K | avg |" in accuracy
    assert " ± " in accuracy and "**" in accuracy and " tok)" in accuracy
    assert "×10" in files.tables["prm_percentiles.md"].read_text()
    assert "1.2K Total | 1.2K Cor. | 1.2K (%)" in files.tables["answered_nodes.md"].read_text()


# --------------------------------------------------------------------------- curves
def _independent_state(trace: list[dict[str, Any]], budget: float) -> tuple[float, bool]:
    """(c_used, correct) of the last trace point within `budget`; (0, False) before any."""
    within = [p for p in trace if p["c_used"] <= budget]
    return (within[-1]["c_used"], within[-1]["correct"]) if within else (0.0, False)


def test_redistributed_markers_match_app_c(run_dir: Path) -> None:
    """LiteSearch's dots at B=600, recomputed by hand from App. C's rule."""
    trees = _parquet_rows(run_dir / "eval_trees.parquet")
    lite = [t for t in trees if t["method"] == "litesearch-incre"]
    largest = {(t["seed"], t["problem_id"]): t for t in lite if t["budget"] == max(BUDGETS)}
    budget = min(BUDGETS)
    accuracy, tokens = [], []
    for seed in SEEDS:
        rows = [t for t in lite if t["budget"] == budget and t["seed"] == seed]
        saved = sum(budget - t["c_used"] for t in rows if t["early_stopped"])
        active = [t for t in rows if not t["early_stopped"]]
        b_adj = min(budget + saved / len(active), max(BUDGETS)) if active else budget
        states = [
            (t["c_used"], t["correct"])
            if t["early_stopped"]
            else _independent_state(largest[seed, t["problem_id"]]["trace"], b_adj)
            for t in rows
        ]
        accuracy.append(statistics.mean(float(c) for _, c in states))
        tokens.append(statistics.mean(u for u, _ in states))
    markers = budget_markers(load_run(run_dir))
    mark = markers[(markers["method"] == "litesearch-incre") & (markers["budget"] == budget)]
    assert bool(mark["redistributed"].iloc[0])
    assert math.isclose(float(mark["accuracy"].iloc[0]), statistics.mean(accuracy))
    assert math.isclose(float(mark["tokens"].iloc[0]), statistics.mean(tokens))
    plain = markers[markers["method"] == "bg_mcts"]
    assert not plain["redistributed"].any()


def test_curves_end_at_the_largest_budget_markers(run_dir: Path) -> None:
    run = load_run(run_dir)
    curves, markers = anytime_curves(run), budget_markers(run)
    for method in METHODS:
        end = curves[curves["method"] == method].iloc[-1]
        mark = markers[(markers["method"] == method) & (markers["budget"] == max(BUDGETS))]
        for column in ("tokens", "accuracy", "answered_rate", "depth", "width"):
            assert math.isclose(float(end[column]), float(mark[column].iloc[0]))
        start = curves[curves["method"] == method].iloc[0]  # grid budget 0: only roots
        assert (start["tokens"], start["accuracy"], start["depth"], start["width"]) == (0, 0, 0, 1)
        assert np.all(np.diff(curves[curves["method"] == method]["tokens"]) >= 0)


def test_plain_curve_point_matches_trace_reading(run_dir: Path) -> None:
    """A method without early stops: the curve at grid budget B reads every trace at B."""
    trees = [
        t
        for t in _parquet_rows(run_dir / "eval_trees.parquet")
        if t["method"] == "mcts" and t["budget"] == max(BUDGETS)
    ]
    curves = anytime_curves(load_run(run_dir))
    point = curves[(curves["method"] == "mcts") & (curves["grid"] == 600.0)].iloc[0]
    per_seed = [
        statistics.mean(
            float(_independent_state(t["trace"], 600.0)[1]) for t in trees if t["seed"] == s
        )
        for s in SEEDS
    ]
    assert math.isclose(float(point["accuracy"]), statistics.mean(per_seed))


def test_adjusted_budgets_by_hand() -> None:
    # B=100: instance 0 stopped at 40 (saves 60), instance 1 at 150 (not yet), 2 never
    stopped, b_adj = adjusted_budgets(
        np.array([100.0, 200.0]), np.array([40.0, 150.0, math.nan]), b_max=220.0
    )
    assert stopped.tolist() == [[True, True], [False, True], [False, False]]
    # B=100: R=60 over 2 active -> 130; B=200: R=160+50=210 over 1 -> 410, capped at 220
    assert b_adj.tolist() == [130.0, 220.0]


# --------------------------------------------------------------------------- pictures, report
def test_every_png_is_valid(files: ReportFiles) -> None:
    names = {p.name for p in files.figures}
    assert names == {
        "accuracy_vs_tokens.png",
        "answered_rate_vs_tokens.png",
        "depth_vs_tokens.png",
        "width_vs_tokens.png",
        "yield_vs_budget.png",
    }
    # 2 problems x 3 methods, BG-MCTS and MCTS first (the paper's Fig. 6 pair)
    assert len(files.tree_pictures) == 2 * len(METHODS)
    assert files.tree_pictures[0].name.startswith("trees_bg_mcts_")
    assert files.tree_pictures[1].name.startswith("trees_mcts_")
    for path in [*files.figures, *files.tree_pictures]:
        assert path.read_bytes()[:8] == PNG_MAGIC
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.size[0] > 100 and image.size[1] > 100


def test_report_links_every_png_and_holds_the_tables(files: ReportFiles) -> None:
    text = files.report.read_text()
    for path in [*files.figures, *files.tree_pictures]:
        assert f"]({path.name})" in text
    assert sorted(files.out_dir.glob("*.png")) == sorted([*files.figures, *files.tree_pictures])
    for name in ("accuracy", "answered_nodes", "prm_percentiles"):
        assert files.tables[f"{name}.md"].read_text().strip() in text
    assert "[^fixed]:" in text and "[^redistributed]:" in text and "`litesearch-incre`" in text
    assert "`scripted`" in text and "1.5 s" in text  # meta.json: environment, wall time


def test_defaults_write_into_the_run_folder(run_dir: Path, tmp_path: Path) -> None:
    for name in ("eval_trees.parquet", "eval_nodes.parquet"):
        (tmp_path / name).write_bytes((run_dir / name).read_bytes())
    files = write_report(tmp_path, tree_pictures=0)
    assert files.out_dir == tmp_path and files.tree_pictures == []
    assert all(p.parent == tmp_path and p.is_file() for p in files.all)
    assert "Search trees" not in files.report.read_text()


def test_tree_layout_is_tidy() -> None:
    #      0
    #    1   2
    #   3 4   5
    pos = tree_layout([0, 1, 2, 3, 4, 5], [None, 0, 0, 1, 1, 2])
    assert [pos[n][0] for n in (3, 4, 5)] == [0.0, 1.0, 2.0]
    assert pos[1][0] == 0.5 and pos[2][0] == 2.0 and pos[0][0] == 1.25
    assert [pos[n][1] for n in range(6)] == [0, -1, -1, -2, -2, -2]
    deep = tree_layout(list(range(5000)), [None, *range(4999)])  # deeper than recursion allows
    assert deep[4999] == (0.0, -4999.0)
