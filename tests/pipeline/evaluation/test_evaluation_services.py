"""The evaluation grid through the real services: local Ray, Serve, SmolLM2, math-verify."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from pipeline.config import parse_config
from pipeline.evaluation.config import EvalConfig
from pipeline.evaluation.runner import run_evaluation

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytestmark = pytest.mark.e2e


def test_services_grid_writes_graded_trees_and_a_report(tmp_path: Path, ray_cluster: None) -> None:
    """On the test process's shared cluster: a grid that started its own would stop Ray
    and Serve at its end, and the next module would pay for both again."""
    engine = {"kind": "llamacpp", "context_length": 2048, "threads": 1, "parallel": 4}
    config = parse_config(
        {
            "name": "real",
            "output_dir": str(tmp_path),
            "methods": ["greedy", "bg_mcts"],
            "budgets": [48],
            "seeds": [0],
            "environment": {
                "kind": "services",
                "source": {"kind": "bundled", "dataset": "gsm8k", "limit": 2},
                "policy": {"engine": engine},
                "scorer": {"engine": engine, "genprm": {"max_analysis_tokens": 4}},
                "concurrency": 4,
                "ray_num_cpus": 2,
            },
            "tree_pictures": 1,
        },
        EvalConfig,
    )
    folder = run_evaluation(config)
    trees = pq.read_table(folder / "eval_trees.parquet").to_pylist()
    assert sorted((t["method"], t["problem_id"]) for t in trees) == sorted(
        (m, p) for m in ("greedy", "bg_mcts") for p in {t["problem_id"] for t in trees}
    )
    assert len(trees) == 4
    assert all(t["c_used"] <= 48 and t["reference"] for t in trees)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["environment"] == "services" and meta["failed_searches"] == []
    assert meta["models"]["policy"] == "embedded"
    assert (folder / "report.md").is_file() and (folder / "accuracy_vs_tokens.png").is_file()
    # the data-yield table is the per-tree counts summed (SmolLM2 solves no GSM8K problem
    # here, so they are zeros: tests/pipeline/evaluation/test_evaluation.py checks non-zero counts)
    with (folder / "yield.csv").open() as f:
        table = list(csv.DictReader(f))
    assert {(r["method"], int(r["budget"])) for r in table} == {("greedy", 48), ("bg_mcts", 48)}
    for row in table:
        mine = [t for t in trees if t["method"] == row["method"]]
        assert int(row["policy_output_tokens"]) == sum(t["policy_output_tokens"] for t in mine)
        for count in ("correct_trajectories", "dpo_pairs", "step_pairs", "prm_steps"):
            assert int(row[count]) == sum(t[count] for t in mine)
            assert all(t[count] == 0 for t in mine if t["correct_nodes"] == 0)
    # finished searches were saved as they completed: a rerun resumes with nothing to do
    calls: list[tuple[int, int]] = []
    again = run_evaluation(config, lambda done, total: calls.append((done, total)))
    assert calls == [(0, 0)]
    assert pq.read_table(again / "eval_trees.parquet").to_pylist() == trees
