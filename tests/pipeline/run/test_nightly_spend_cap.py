"""`nightly.budget_per_night`: a spend cap that stops admitting problems, never cuts one.

The end-to-end test runs `jobs.nightly` on a real local Ray cluster with the model-free
load model (every search spends its whole budget B, so the arithmetic is exact); the
top-up rule (early-stopped searches leave budget for more problems) is checked on the
ledger logic with a stand-in for the synthesizer that writes real `trees` Parquet.  The
end-to-end test is part of the nightly-at-size scenario (tests/scenarios.py); the landing
gate's nightly run (test_nightly.py) carries a cap that never binds and checks the spend the
ledger records against its trees.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from pipeline.config import RunConfig, parse_run_config
from pipeline.problems.sources import load_problems
from pipeline.records import NO_YIELD
from pipeline.run.nightly import Ledger, admissible, plan_night, run_night, run_spent
from pipeline.run.summary import RunSummary
from pipeline.store.run_folder import RunFolder
from pipeline.store.sink import ParquetSink
from tests.tiny_run import run_config

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _config(root: Path, problems: Path, spend_cap: float, per_night: int = 3) -> dict[str, Any]:
    return run_config(
        problems,
        root,
        budget=200,
        engine={
            "kind": "load_model",
            "output_tokens": 8,
            "decode_base_ms": 1.25,
            "decode_per_seq_ms": 0,
        },
        nightly={
            "problems_per_night": per_night,
            "run_id_prefix": "n-",
            "budget_per_night": spend_cap,
        },
        ray_num_cpus=2,
    )


def _problems(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}
        for i in range(1, count + 1)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_admissible_counts_whole_budgets_only() -> None:
    assert admissible(450, 0, 200) == 2
    assert admissible(400, 0, 200) == 2
    assert admissible(399.9, 0, 200) == 1
    assert admissible(450, 300, 200) == 0
    assert admissible(100, 0, 200) == 0


def test_early_stopped_searches_leave_room_for_more_problems(tmp_path: Path) -> None:
    config = parse_run_config(_config(tmp_path / "out", _problems(tmp_path, 6), 450, 4))

    def synthesize(night: RunConfig) -> RunSummary:
        """Stands in for the Ray pipeline: every search early-stops after 50 cost units."""
        sink = ParquetSink(RunFolder.open(night.output_root, night.resolved_run_id))
        loaded = load_problems(night.source)
        done = sink.folder.done_problem_ids()
        for p in loaded.problems:
            if p["problem_id"] not in done:
                sink.write_batch({"trees": [_tree(p["problem_id"], night, 50.0)]})
        summary = RunSummary(night.resolved_run_id, sink.run_dir)
        summary.problems = len(loaded.problems)
        return summary

    ledger, night = plan_night(config, dt.date(2026, 11, 20))
    assert night.limit == 2  # 2 x B = 400 <= 450 < 3 x B
    _, night = run_night(config, ledger, night, synthesize)
    # spent 100: floor(350 / 200) = 1 more; spent 150: floor(300 / 200) = 1 more; then
    # the per-night cap of 4 stops it (spent 200)
    assert night.limit == 4
    assert run_spent(config, night.run_id) == 200.0
    _, second = plan_night(config, dt.date(2026, 11, 21))
    assert second.skip == 4  # the next night starts after what was admitted


def _tree(problem_id: str, night: RunConfig, c_used: float) -> dict[str, Any]:
    return {
        "run_id": night.resolved_run_id,
        "problem_id": problem_id,
        "chosen_answer": None,
        "chosen_node_id": None,
        "correct": None,
        "reference": None,
        "label_source": "reference",
        "policy_output_tokens": int(c_used),
        "policy_input_tokens": 0,
        "inserted_prompt_tokens": 0,
        "prm_input_tokens": 0,
        "prm_output_tokens": 0,
        "c_used": c_used,
        "n_nodes": 1,
        "n_answered": 0,
        "n_correct": 0,
        "max_depth": 1,
        "max_width": 1,
        "wall_time_s": 0.1,
        "stop_reason": "early_stop",
        "iterations": 1,
        "contaminated": None,
        "difficulty": "unanswered",
        "gate_drops": [],
        "split": "train",
        **NO_YIELD,
        "grade_timeouts": 0,
        "method": "bg_mcts",
        "policy_model": None,
        "prm_model": None,
        "budget": 200.0,
        "seed": 0,
        "node_scores": [],
        "trace": [],
    }


@pytest.mark.e2e
@pytest.mark.scenario("nightly-at-size")
def test_spend_cap_stops_the_night_at_the_right_problem_and_the_next_night_resumes(
    ray_cluster: None,
    tmp_path: Path,
) -> None:

    from jobs.nightly import main

    config = _config(tmp_path / "out", _problems(tmp_path, 5), spend_cap=450)
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(config))

    def trees(date: str) -> list[tuple[str, float]]:
        table = pq.read_table(tmp_path / "out" / f"run=n-{date}" / "trees")
        return sorted(
            zip(
                table.column("problem_id").to_pylist(),
                table.column("c_used").to_pylist(),
                strict=True,
            )
        )

    assert main(["--config", str(path), "--date", "2026-11-20"]) == 0
    assert main(["--config", str(path), "--date", "2026-11-21"]) == 0
    first, second = trees("2026-11-20"), trees("2026-11-21")
    # 3 problems a night, but only 2 x B = 400 fit in 450: p1, p2; every search ran to B
    assert [p for p, _ in first] == ["p1", "p2"]
    assert all(c == 200.0 for _, c in first)
    assert [p for p, _ in second] == ["p3", "p4"]
    nights = Ledger(tmp_path / "out").nights
    assert [(n["skip"], n["limit"], n["status"]) for n in nights] == [
        (0, 2, "done"),
        (2, 2, "done"),
    ]
    assert [n["spent"] for n in nights] == [400.0, 400.0]
    assert all(n["spent"] <= 450 for n in nights)
