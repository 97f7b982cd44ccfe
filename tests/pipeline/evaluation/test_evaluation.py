"""The evaluation job on the simulated environment: grid -> Parquet -> report.

Everything is real (the search core, the simulated environment, worker processes,
Parquet, matplotlib); only the grid is tiny.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from pipeline.config import ConfigError, load_config, parse_config
from pipeline.evaluation.config import EvalConfig
from pipeline.evaluation.runner import run_evaluation

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _config(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "tiny",
        "output_dir": str(tmp_path / "eval"),
        "methods": ["bg_mcts", "mcts", "litesearch", "repeated_sampling"],
        "budgets": [3000, 6000],
        "seeds": [0, 1],
        "environment": {"kind": "simulated", "problems": 6, "workers": 2},
        "tree_pictures": 1,
    }
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("evaluation")
    return run_evaluation(parse_config(_config(tmp), EvalConfig))


def _rows(path: Path) -> list[dict[str, Any]]:
    return list(pq.read_table(path).to_pylist())


def test_accuracy_table_is_a_recomputation_from_the_per_tree_parquet(report_dir: Path) -> None:
    trees = _rows(report_dir / "eval_trees.parquet")
    assert len(trees) == 4 * 2 * 2 * 6
    with (report_dir / "accuracy.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 * 2
    for row in table:
        per_seed = []
        for seed in (0, 1):
            picked = [
                t["correct"]
                for t in trees
                if t["method"] == row["method"]
                and t["budget"] == int(row["budget"])
                and t["seed"] == seed
            ]
            assert len(picked) == 6
            per_seed.append(sum(picked) / len(picked))
        assert float(row["accuracy_mean"]) == pytest.approx(statistics.mean(per_seed))


YIELDS = ("correct_trajectories", "dpo_pairs", "step_pairs", "prm_steps")


def test_yield_table_is_a_recomputation_from_the_per_tree_parquet(report_dir: Path) -> None:
    trees = _rows(report_dir / "eval_trees.parquet")
    with (report_dir / "yield.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 * 2
    for row in table:
        mine = [
            t for t in trees if t["method"] == row["method"] and t["budget"] == int(row["budget"])
        ]
        assert int(row["searches"]) == len(mine) == 2 * 6
        policy = sum(t["policy_output_tokens"] for t in mine)
        total = policy + sum(t["prm_input_tokens"] + t["prm_output_tokens"] for t in mine)
        assert int(row["policy_output_tokens"]) == policy
        assert int(row["total_tokens"]) == total
        for count in YIELDS:
            summed = sum(t[count] for t in mine)
            assert int(row[count]) == summed
            assert float(row[f"{count}_per_1k_policy"]) == 1000 * summed / policy
            assert float(row[f"{count}_per_1k_total"]) == 1000 * summed / total
    for t in trees:  # the counts are what the gated builders kept, within their caps
        assert t["correct_trajectories"] <= t["correct_nodes"]
        assert t["dpo_pairs"] <= 4 and t["step_pairs"] <= 4
        if t["correct_nodes"] == 0:
            assert t["correct_trajectories"] == t["dpo_pairs"] == t["step_pairs"] == 0
    bg = [t for t in trees if t["method"] == "bg_mcts"]
    assert sum(t["correct_trajectories"] for t in bg) > 0
    assert sum(t["prm_steps"] for t in bg) > 0
    report = (report_dir / "report.md").read_text()
    assert "## Data yield" in report and "yield_vs_budget.png" in report


def test_trees_respect_budgets_and_match_their_nodes(report_dir: Path) -> None:
    trees = _rows(report_dir / "eval_trees.parquet")
    nodes = pq.read_table(report_dir / "eval_nodes.parquet")
    counts: dict[tuple[Any, ...], int] = {}
    for key in zip(
        *(nodes.column(c).to_pylist() for c in ("method", "budget", "seed", "problem_id")),
        strict=True,
    ):
        counts[key] = counts.get(key, 0) + 1
    for t in trees:
        assert t["c_used"] <= t["budget"]
        assert counts[(t["method"], t["budget"], t["seed"], t["problem_id"])] == t["n_nodes"]
        if t["trace"]:
            assert t["trace"][-1]["correct"] == t["correct"]
            assert t["trace"][-1]["c_used"] == pytest.approx(t["c_used"])


def test_every_plot_is_a_png_and_the_report_links_it(report_dir: Path) -> None:
    from PIL import Image

    pngs = sorted(report_dir.glob("*.png"))
    names = {p.name for p in pngs}
    assert {"accuracy_vs_tokens.png", "answered_rate_vs_tokens.png"} <= names
    assert {"depth_vs_tokens.png", "width_vs_tokens.png", "yield_vs_budget.png"} <= names
    assert any(n.startswith("trees_bg_mcts_") for n in names)
    report = (report_dir / "report.md").read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        with Image.open(png) as image:
            assert image.size[0] > 100 and image.size[1] > 100
        assert png.name in report
    assert "bg_mcts" in report and "simulated" in report


def test_the_simulated_grid_is_deterministic(report_dir: Path, tmp_path: Path) -> None:
    again = run_evaluation(parse_config(_config(tmp_path, tree_pictures=0), EvalConfig))
    drop = {"wall_time_s"}
    first = [
        {k: v for k, v in r.items() if k not in drop}
        for r in _rows(report_dir / "eval_trees.parquet")
    ]
    second = [
        {k: v for k, v in r.items() if k not in drop} for r in _rows(again / "eval_trees.parquet")
    ]
    key = lambda r: (r["method"], r["budget"], r["seed"], r["problem_id"])  # noqa: E731
    assert sorted(first, key=key) == sorted(second, key=key)


def test_bad_eval_configs_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="duplicate labels"):
        parse_config(_config(tmp_path, methods=["mcts", "mcts"]), EvalConfig)
    with pytest.raises(ConfigError, match=r"methods\.0\.search\.mcts\.kapa"):
        parse_config(_config(tmp_path, methods=[{"algorithm": "mcts", "kapa": 2}]), EvalConfig)
    with pytest.raises(ConfigError, match="budgets"):
        parse_config(_config(tmp_path, budgets=[0]), EvalConfig)
    with pytest.raises(ConfigError, match="environment"):
        parse_config(_config(tmp_path, environment={"kind": "cloud"}), EvalConfig)


def test_evaluate_job_and_report_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.cli import main

    path = tmp_path / "eval.yaml"
    data = _config(tmp_path, methods=["greedy", "repeated_sampling"], budgets=[2000], seeds=[0])
    data["environment"]["workers"] = 1
    path.write_text(yaml.safe_dump(data))
    assert load_config(path, EvalConfig).name == "tiny"
    assert main(["evaluate", "--config", str(path), "--name", "job"]) == 0
    out = capsys.readouterr().out
    assert "repeated_sampling" in out and "report:" in out
    assert main(["report", str(tmp_path / "eval" / "job")]) == 0
    assert "greedy" in capsys.readouterr().out
