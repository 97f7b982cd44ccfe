"""Nightly slices: the ledger (pure) and the nightly job end to end.

The end-to-end test runs `jobs.nightly` on a real local Ray cluster (Ray Data,
search actors, Serve deployments, sink) and publishes to the local Hub server
(tests/hub_server.py).  Its engine is the model-free `sleep` engine: the test
must see answered, correct nodes every night to check that each night publishes,
and the embedded SmolLM2 rarely writes a boxed answer at a budget small enough
for CI (the real model's pipeline path is covered by test_run_e2e and
test_resume_after_kill).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from pipeline.config import parse_run_config
from pipeline.run.nightly import Ledger, night_config, plan_night
from tests.hub_server import HubServer

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TOKEN = "hf_nightly_FAKE_token_0123456789"
REPO = "bgmcts/nightly"


def _config(root: Path, problems: Path, per_night: int = 2) -> dict[str, object]:
    engine = {"kind": "sleep", "latency_s": 0.01, "output_tokens": 8}
    return {
        "output_root": str(root),
        "budget": 200,
        "source": {
            "kind": "jsonl",
            "path": str(problems),
            "columns": {"problem": "question", "reference": "answer", "id": "id"},
        },
        "search": {"algorithm": "bg_mcts", "step_max_tokens": 16},
        "policy": {"engine": engine},
        "scorer": {"engine": engine, "genprm": {"max_analysis_tokens": 4}},
        "nightly": {"problems_per_night": per_night, "run_id_prefix": "n-"},
        "trees_per_actor": 2,
        "ray_num_cpus": 2,
    }


def test_ledger_hands_out_consecutive_slices_and_reruns_keep_theirs(tmp_path: Path) -> None:
    config = parse_run_config(
        {
            **_config(tmp_path, tmp_path / "p.jsonl", per_night=5),
            "source": {"kind": "bundled", "dataset": "gsm8k", "skip": 3},
        }
    )
    _, first = plan_night(config, dt.date(2026, 11, 20))
    _, second = plan_night(config, dt.date(2026, 11, 21))
    ledger, again = plan_night(config, dt.date(2026, 11, 20))
    assert (first.skip, first.limit, first.run_id) == (3, 5, "n-2026-11-20")
    assert (second.skip, second.limit) == (8, 5)
    assert again == first
    assert [n["date"] for n in ledger.unfinished(before="2026-11-22")] == [
        "2026-11-20",
        "2026-11-21",
    ]
    ledger.mark("2026-11-20", "done")
    assert [n["date"] for n in Ledger(tmp_path).unfinished("2026-11-22")] == ["2026-11-21"]
    night = night_config(config, second)
    assert (night.source.skip, night.source.limit, night.run_id) == (8, 5, "n-2026-11-21")


def test_unreadable_ledger_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "nightly-ledger.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable nightly ledger"):
        Ledger(tmp_path)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
def test_nightly_job_takes_the_next_slice_publishes_and_resumes(
    tmp_path: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray import serve

    from jobs.nightly import main

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    problems = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + {42 - i}?", "answer": "42"} for i in range(1, 5)
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = _config(tmp_path / "out", problems)
    config["publish"] = {"repo": REPO, "endpoint": hub.endpoint}
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(config))

    def trees(date: str) -> list[str]:
        folder = tmp_path / "out" / f"run=n-{date}" / "trees"
        return sorted(pq.read_table(folder).column("problem_id").to_pylist())

    try:
        assert main(["--config", str(path), "--date", "2026-11-20"]) == 0
        assert main(["--config", str(path), "--date", "2026-11-21"]) == 0
        assert main(["--config", str(path), "--date", "2026-11-21"]) == 0  # rerun: resume
        assert main(["--config", str(path), "--date", "2026-11-22"]) == 0  # source exhausted
    finally:
        if ray.is_initialized():
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()
    assert trees("2026-11-20") == ["p1", "p2"]
    assert trees("2026-11-21") == ["p3", "p4"]  # the rerun wrote no row twice
    ledger = json.loads((tmp_path / "out" / "nightly-ledger.json").read_text())["nights"]
    assert [(n["date"], n["status"], n["skip"]) for n in ledger] == [
        ("2026-11-20", "done", 0),
        ("2026-11-21", "done", 2),
        ("2026-11-22", "done", 4),
    ]
    published = {p for p in hub.files(REPO) if p.startswith("data/sft/")}
    assert any("run=n-2026-11-20" in p for p in published)
    assert any("run=n-2026-11-21" in p for p in published)
    assert TOKEN not in (tmp_path / "out" / "run=n-2026-11-20" / "run.json").read_text()
