"""The night allocator in a real run: probes and second trees through the Ray Data stream.

Real local Ray cluster (the session's shared one), Ray Data, Serve deployments, GenPRM
protocol, grading and Parquet sink; only the model is the engine-shaped load model
(`actors/engines/load_model.py`), whose answers are drawn from two (42 and 7): a problem
whose reference is one of them gets right and wrong answers, one whose reference is
neither gets wrong answers only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import RunConfig, parse_run_config
from pipeline.report.hygiene import hygiene_of_run
from pipeline.run.allocation import NightAllocator
from pipeline.run.night_windows import Member, NightWindows, outcome_of
from pipeline.run.nightly import plan_night, run_night, run_spent
from pipeline.run.synthesis import synthesize
from pipeline.store.run_folder import RunFolder
from tests.tiny_run import tiny_run_config

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_cluster")]

B = 240
N = 6
ENGINE = {"kind": "load_model", "output_tokens": 16, "answers": ["42", "7"], "time_scale": 0.05}


def _trees(folder: RunFolder) -> list[dict[str, Any]]:
    return sorted(
        folder.read("trees").to_pylist(), key=lambda t: (t["source_index"], t["tree"] or "")
    )


def _replayed_budgets(config: RunConfig, trees: list[dict[str, Any]]) -> dict[str, int]:
    """The second-tree budgets a fresh allocator gives the committed probes, in order."""
    windows = NightWindows(NightAllocator(config.allocation, B, config.records), N)
    given: dict[str, int] = {}
    for t in (t for t in trees if t["tree"] == "probe"):
        for s in windows.add(Member(t["source_index"], t["problem_id"], outcome_of(t))):
            given[s.problem_id] = s.budget
    assert windows.done
    return given


def test_a_night_under_the_allocator_commits_probes_and_second_trees_within_its_total(
    tmp_path: Path,
) -> None:
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + {i}?", "answer": ("42", "7", "99")[i % 3]}
        for i in range(N)
    ]
    raw = tiny_run_config(
        tmp_path,
        rows,
        budget=B,
        engine=ENGINE,
        run_id="night",
        allocation={"enabled": True, "window": 3},
    )
    config = parse_run_config(raw)
    summary = synthesize(config, progress=None)
    folder = RunFolder.open(tmp_path / "out", "night")
    trees = _trees(folder)
    probes = [t for t in trees if t["tree"] == "probe"]
    seconds = {t["problem_id"]: t for t in trees if t["tree"] == "second"}
    assert [t["source_index"] for t in probes] == list(range(N))
    assert all(t["budget"] == int(0.65 * B) for t in probes)
    assert seconds, "no second tree: the probes left nothing the allocator valued"
    # every second tree at the budget a replay of the committed probes gives it (a killed
    # night's rerun rebuilds its windows so; the rerun itself: test_window_stage.py), and
    # none for a problem the replay gives nothing
    assert {p: int(t["budget"]) for p, t in seconds.items()} == _replayed_budgets(config, trees)
    # the night never spends more than its total: problems x B
    assert sum(t["policy_output_tokens"] for t in trees) <= N * B
    assert sum(t["c_used"] for t in trees) <= N * B
    # every row a trainer reads is clean, and the problem's two trees are one problem
    hygiene = hygiene_of_run(folder)
    assert hygiene.dirty_rows == 0 and not hygiene.problems, hygiene.markdown()
    nodes = folder.read("tree_nodes").to_pylist()
    for pid in seconds:
        ids = sorted(n["node_id"] for n in nodes if n["problem_id"] == pid)
        assert ids == list(range(len(ids))), pid  # the second tree's continue the probe's
    block = json.loads((folder.location / "run.json").read_text())["summary"]["allocation"]
    assert block["probes"] == N and block["second_trees"] == len(seconds)
    assert block["night_total"] == N * B and block["cost_units"] <= N * B
    assert sum(block["second_budget_by_outcome"].values()) == sum(
        int(t["budget"]) for t in seconds.values()
    )
    # the difficulty mix accounts for every kept training row
    mix = block["rows_by_outcome"]
    for table in ("sft", "dpo", "step_dpo", "prm", "kto"):
        kept = sum(trees[t][table] for trees in mix.values() for t in ("probe", "second"))
        assert kept == folder.count(table), table
    report = (folder.location / "report.md").read_text()
    assert "## Night allocator" in report and "The difficulty mix" in report
    assert summary.errors == 0


def test_a_capped_night_under_the_allocator_spends_within_its_cap_and_is_not_topped_up(
    tmp_path: Path,
) -> None:
    """A nightly slice under a spend cap admits floor(cap / B) problems; their probes and
    second trees stay within the cap, and what they leave unspent does not admit another
    problem (which would join the last window and change its committed allocation)."""
    rows = [
        {"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": ("42", "7", "99")[i % 3]}
        for i in range(2 * N)
    ]
    spend_cap = N * B + B - 1  # N problems, and one more for anything they leave
    raw = tiny_run_config(
        tmp_path,
        rows,
        budget=B,
        engine=ENGINE,
        allocation={"enabled": True, "window": 4},
        # every tree stops at its first answer (App. I's early stop): the night leaves most
        # of its total unspent, room that would admit more problems under uniform B
        search={
            "algorithm": "bg_mcts",
            "step_max_tokens": 16,
            "early_stop": True,
            "early_stop_threshold": 0.0,
        },
        nightly={"problems_per_night": 2 * N, "run_id_prefix": "n-", "budget_per_night": spend_cap},
    )
    config = parse_run_config(raw)
    ledger, night = plan_night(config, dt.date(2026, 12, 6))
    assert (night.skip, night.limit) == (0, N)
    _, night = run_night(config, ledger, night, lambda c: synthesize(c, progress=None))
    spent = run_spent(config, night.run_id)
    assert spent <= N * B, spent
    assert spent <= spend_cap - B, "the probes and second trees left too little for a top-up"
    assert night.limit == N  # left unspent, not topped up
    trees = _trees(RunFolder.open(tmp_path / "out", night.run_id))
    assert {t["source_index"] for t in trees if t["tree"] == "probe"} == set(range(N))
    assert any(t["tree"] == "second" for t in trees)
    _, following = plan_night(config, dt.date(2026, 12, 7), dry_run=True)
    assert following.skip == N  # the next night starts right after what this one admitted
