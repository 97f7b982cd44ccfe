"""Nightly slices: the ledger (pure) and the nightly job end to end.

The end-to-end test runs `jobs.nightly` on a real local Ray cluster (Ray Data,
search actors, Serve deployments, sink) and publishes to the local Hub server
(tests/hub_server.py).  Its engine is the model-free load model: the test
must see answered, correct nodes every night to check that each night publishes,
and the embedded SmolLM2 rarely writes a boxed answer at a budget small enough
for CI (the real model's pipeline path is covered by test_main_command_yields_training_data and
test_resume_after_kill).  The same run also cuts a night at its wall-time cap (`max_wall_s`)
and resumes it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import yaml

from pipeline.config import parse_run_config
from pipeline.run.nightly import Ledger, night_config, plan_night
from pipeline.run.wall import WallCap
from pipeline.store.run_folder import RunFolder
from tests.hub_server import HubServer

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TOKEN = "hf_nightly_FAKE_token_0123456789"
REPO = "bgmcts/nightly"
SLOW = "(this one is slow)"


class CapAtTheSecondTree(WallCap):
    """A wall-time cap that falls the moment its search actor starts a second tree.

    The first tree started with no cap in sight, so it ran to its end; the second is in
    flight at the cap (it has the grace); every later problem is refused.  An event, not a
    time: a cut made by the clock would depend on how fast a loaded machine deploys and
    searches.
    """

    def up(self) -> bool:
        starts = getattr(self, "starts", 0) + 1
        object.__setattr__(self, "starts", starts)  # `WallCap` is frozen; a copy per actor
        if starts == 2:
            object.__setattr__(self, "stop_at", time.time())
            return False
        return super().up()


def _config(root: Path, problems: Path, per_night: int = 2) -> dict[str, object]:
    engine = {
        "kind": "load_model",
        "output_tokens": 8,
        "decode_base_ms": 1.25,
        "decode_per_seq_ms": 0,
    }
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


@pytest.mark.e2e
@pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
def test_nightly_job_takes_the_next_slice_publishes_and_resumes(
    ray_cluster: None,
    tmp_path: Path,
    hub: HubServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:

    from jobs.nightly import main

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    problems = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + {42 - i}?{' ' + SLOW if i == 6 else ''}"}
        | {"answer": "42"}
        for i in range(1, 8)
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = _config(tmp_path / "out", problems)
    config["publish"] = {"repo": REPO, "endpoint": hub.endpoint}
    # a spend cap that never binds: the ledger records each night's spend from its trees
    # (where the cap binds is the nightly-at-size scenario and the fast tests of
    # test_nightly_spend_cap.py)
    config["nightly"] = {"problems_per_night": 2, "run_id_prefix": "n-", "budget_per_night": 10_000}
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(config))

    def trees(date: str) -> list[str]:
        folder = tmp_path / "out" / f"run=n-{date}" / "trees"
        return sorted(pq.read_table(folder).column("problem_id").to_pylist())

    assert main(["--config", str(path), "--date", "2026-11-20"]) == 0
    hub.fail_commits = True  # the Hub refuses the night's publish: searched, not published
    assert main(["--config", str(path), "--date", "2026-11-21"]) == 1
    night = Ledger(tmp_path / "out").find("2026-11-21")
    assert night is not None and (night["status"], night["reason"]) == ("failed", "publish")
    searched = trees("2026-11-21")
    hub.fail_commits = False
    capsys.readouterr()
    assert main(["--config", str(path), "--date", "2026-11-21"]) == 0  # the retry publishes
    assert "searched already; publishing" in capsys.readouterr().out  # and searches nothing
    assert trees("2026-11-21") == searched
    assert main(["--config", str(path), "--date", "2026-11-21"]) == 0  # rerun: resume

    _cut_at_the_wall_time_cap_then_resumed(tmp_path, config, hub, monkeypatch, capsys)

    assert trees("2026-11-20") == ["p1", "p2"]
    assert trees("2026-11-21") == ["p3", "p4"]  # the rerun wrote no row twice
    ledger = Ledger(tmp_path / "out").nights
    assert [(n["date"], n["status"], n["skip"]) for n in ledger] == [
        ("2026-11-20", "done", 0),
        ("2026-11-21", "done", 2),
        ("2026-11-22", "done", 4),
        ("2026-11-23", "done", 7),
    ]
    for n in ledger[:3]:  # the spend each night recorded is what its trees spent
        c_used = pq.read_table(tmp_path / "out" / f"run=n-{n['date']}" / "trees").column("c_used")
        assert n["spent"] == sum(c_used.to_pylist()) <= 10_000
    published = {p for p in hub.files(REPO) if p.startswith("data/sft/")}
    assert any("run=n-2026-11-20" in p for p in published)
    assert any("run=n-2026-11-21" in p for p in published)
    assert TOKEN not in (tmp_path / "out" / "run=n-2026-11-20" / "run.json").read_text()


def _cut_at_the_wall_time_cap_then_resumed(
    tmp_path: Path,
    config: dict[str, Any],
    hub: HubServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Night 2026-11-22 (p5, p6, p7) hits its wall-time cap: p5 is committed, p6 (slow) is
    in flight, runs past the grace and is abandoned, p7 never starts.  It publishes p5,
    exits 124 and says so; the ledger records it failed at the wall time with its slice as
    it was; the next night warns about it and finds the source exhausted; the rerun of
    11-22 searches p6 and p7 only.

    The only seam is a wrapper around the real search stage: it checks the cap the job
    handed it (`max_wall_s` from the job's start) and hands the actor `CapAtTheSecondTree`
    instead, with the config's grace.
    """
    from jobs.nightly import main
    from pipeline.run import synthesis

    engine = {**config["policy"]["engine"], "slow_marker": SLOW, "slow_factor": 1000}
    capped = {
        **config,
        "nightly": {**config["nightly"], "problems_per_night": 3},
        "max_wall_s": 3600,
        "wall_grace_s": 2,  # p6 is abandoned 2 s after the cap, thousands before its end
        # one tree at a time: the actor starts p5, p6, p7 in the slice's order (two at once
        # reach the actor in either order)
        "trees_per_actor": 1,
        "policy": {"engine": engine},
        "scorer": {**config["scorer"], "engine": engine},
    }
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(capped))
    real = synthesis.search_stage
    caps: list[WallCap] = []

    def stage(*args: Any, wall_cap: WallCap | None = None) -> Any:
        assert wall_cap is not None and wall_cap.grace_s == 2
        caps.append(wall_cap)
        return real(*args, wall_cap=CapAtTheSecondTree(math.inf, wall_cap.grace_s))

    monkeypatch.setattr(synthesis, "search_stage", stage)
    capsys.readouterr()
    began = time.time()
    assert main(["--config", str(path), "--date", "2026-11-22"]) == 124
    monkeypatch.setattr(synthesis, "search_stage", real)
    # the job's cap counts from its start
    assert len(caps) == 1 and began + 3600 <= caps[0].stop_at <= time.time() + 3600
    err = capsys.readouterr().err
    resume = f"python -m jobs.nightly --config {path} --date 2026-11-22"
    assert "2 problems of night 2026-11-22's slice were left unsearched" in err, err
    assert f"resume them with {resume}" in err

    run = RunFolder.open(tmp_path / "out", "n-2026-11-22")
    assert sorted(run.searched_problem_ids()) == ["p5"]  # p6 abandoned, p7 never started
    assert run.count("errors") == 0  # nothing of p6 or p7 is committed, not even an error
    _every_tree_is_whole(run, budget=int(config["budget"]))
    night = Ledger(tmp_path / "out").find("2026-11-22")
    assert night is not None
    assert (night["status"], night["reason"], night["left"]) == ("failed", "wall time", 2)
    assert (night["skip"], night["limit"], night["max_wall_s"]) == (4, 3, 3600)
    published = {p for p in hub.files(REPO) if p.startswith("data/sft/")}
    assert any("run=n-2026-11-22" in p for p in published)  # what it had

    # a later night names it with the command that resumes it, and takes the slice after it
    plain = tmp_path / "nightly.yaml"
    assert main(["--config", str(plain), "--date", "2026-11-23"]) == 0  # source exhausted
    out, err = capsys.readouterr()
    assert "night 2026-11-22 is failed (wall time); resume it with" in err
    assert "source exhausted" in out

    assert main(["--config", str(plain), "--date", "2026-11-22"]) == 0  # the rerun, no cap
    table = capsys.readouterr().out
    assert re.search(r"problems searched\W+2\b", table), table  # p6 and p7 only
    assert re.search(r"already done \(skipped\)\W+1\b", table), table  # p5
    trees = run.read("trees").column("problem_id").to_pylist()
    assert Counter(trees) == Counter(["p5", "p6", "p7"])  # each once: none twice, none lost
    _every_tree_is_whole(run, budget=int(config["budget"]))
    night = Ledger(tmp_path / "out").find("2026-11-22")
    assert night is not None
    assert (night["status"], night["reason"], night["left"]) == ("done", None, 0)


def _every_tree_is_whole(run: RunFolder, budget: int) -> None:
    """Each committed tree has every node it counts in `tree_nodes`, and spent at most B."""
    nodes = Counter(run.read("tree_nodes").column("problem_id").to_pylist())
    for tree in run.read("trees").to_pylist():
        assert nodes[tree["problem_id"]] == tree["n_nodes"] + 1, tree["problem_id"]  # + root
        assert tree["c_used"] <= budget


def test_the_dry_run_plans_the_nights_slice_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobs.nightly import main

    problems = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(5)
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = _config(tmp_path / "out", problems)
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(config))
    plan_night(parse_run_config(config), dt.date(2026, 11, 20))  # an earlier night's claim

    assert main(["--config", str(path), "--date", "2026-11-21", "--dry-run"]) == 0

    out = capsys.readouterr().out
    assert "night 2026-11-21: problems 2..3 (new: the slice after the last one)" in out
    assert "n-2026-11-21" in out and "What is 2 + 1?" in out  # the slice, not the dataset
    assert "What is 0 + 1?" not in out
    assert [n["date"] for n in Ledger(tmp_path / "out").nights] == ["2026-11-20"]
    assert not (tmp_path / "out" / "run=n-2026-11-21").exists()

    from jobs import synthesize  # the synth dry run of the same config says what it plans

    assert synthesize.main(["--config", str(path), "--dry-run"]) == 0
    assert "`bgmcts nightly --dry-run` plans one night's slice" in capsys.readouterr().out


def test_overlapping_nights_keep_each_others_ledger_entries(tmp_path: Path) -> None:
    """Two nights overlap on a local root; each one's saves leave the other's entry alone."""
    config = parse_run_config(_config(tmp_path, tmp_path / "p.jsonl", per_night=2))
    first, d1 = plan_night(config, dt.date(2026, 11, 20))  # D1 starts and runs...
    second, d2 = plan_night(config, dt.date(2026, 11, 21))  # ...while D2 starts
    assert (d1.skip, d2.skip) == (0, 2)
    second.mark(d2.date, "done", searched=2)
    first.mark(d1.date, "done", searched=2)  # D1's final save, from its own copy
    _, d3 = plan_night(config, dt.date(2026, 11, 22))
    assert d3.skip == 4  # D2's slice is not handed out again
    nights = {n["date"]: n["status"] for n in Ledger(tmp_path).nights}
    assert nights == {"2026-11-20": "done", "2026-11-21": "done", "2026-11-22": "running"}


def test_nights_racing_on_a_local_root_get_disjoint_slices(tmp_path: Path) -> None:
    """Eight nights (threads, each with its own ledger) claim slices at once on a local
    folder: create-if-absent hands each a different one, none lost."""
    slices: list[int] = []

    def night(day: int) -> None:
        date = f"2026-12-{day:02d}"
        slices.append(Ledger(tmp_path).plan(date, f"n-{date}", base_skip=0, per_night=5).skip)

    threads = [threading.Thread(target=night, args=(d,)) for d in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(slices) == [5 * i for i in range(8)]
    assert len(Ledger(tmp_path).nights) == 8


def test_a_ledger_written_by_an_earlier_version_is_carried_over(tmp_path: Path) -> None:
    """The one-file ledger (`nightly-ledger.json`) of earlier versions keeps its slices."""
    old = [
        {"date": "2026-11-18", "run_id": "n-2026-11-18", "skip": 0, "limit": 2, "status": "done"},
        {"date": "2026-11-19", "run_id": "n-2026-11-19", "skip": 2, "limit": 3},
    ]
    (tmp_path / "nightly-ledger.json").write_text(json.dumps({"nights": old}))
    config = parse_run_config(_config(tmp_path, tmp_path / "p.jsonl", per_night=2))
    ledger, night = plan_night(config, dt.date(2026, 11, 20))
    assert (night.skip, night.limit) == (5, 2)
    assert [n["date"] for n in ledger.unfinished("2026-11-20")] == ["2026-11-19"]
    _, again = plan_night(config, dt.date(2026, 11, 19))  # an old night resumes its slice
    assert (again.run_id, again.skip, again.limit) == ("n-2026-11-19", 2, 3)
    assert not (tmp_path / "nightly-ledger.json").exists()  # carried over, kept aside
    assert json.loads((tmp_path / "nightly-ledger.json.carried-over").read_text())["nights"] == old
    Ledger(tmp_path).mark("2026-11-19", "done")
    assert [n["date"] for n in Ledger(tmp_path).unfinished("2026-11-21")] == ["2026-11-20"]


@pytest.mark.parametrize("prefix", ["../../../escaped-", "a/b-", ".hidden-", "-x", "n- "])
def test_run_id_prefix_outside_the_run_id_rule_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefix: str
) -> None:
    """`nightly.run_id_prefix` becomes part of a folder name: jobs.nightly and the
    synthesis dry run refuse it with one line naming the field, exit 2, writing nothing."""
    from jobs.nightly import main as nightly_main
    from jobs.synthesize import main as synthesize_main

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p1", "question": "1 + 1?", "answer": "2"}) + "\n")
    config = _config(tmp_path / "a" / "b" / "c" / "out", problems)
    config["nightly"] = {"problems_per_night": 1, "run_id_prefix": prefix}
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(config))
    assert nightly_main(["--config", str(path), "--date", "2026-11-20"]) == 2
    assert synthesize_main(["--config", str(path), "--dry-run"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1], captured.err  # one line per job
    assert lines[0].startswith(f"error: {path}: ") and "nightly.run_id_prefix" in lines[0]
    assert "Traceback" not in captured.err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["nightly.yaml", "problems.jsonl"]


def test_plain_run_id_prefixes_are_accepted(tmp_path: Path) -> None:
    for prefix in ["", "n-", "nightly_", "v2.night-"]:
        config = _config(tmp_path, tmp_path / "p.jsonl")
        config["nightly"] = {"run_id_prefix": prefix}
        assert parse_run_config(config).nightly.run_id_prefix == prefix


@pytest.mark.e2e
@pytest.mark.scenario("nightly-at-size")
def test_a_night_that_starts_while_the_previous_one_runs_is_not_searched_again(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D2 starts, takes its slice and finishes while D1 is still searching; then D1
    finishes and saves its final state; then D3: every problem is searched exactly once.

    The real jobs.nightly on a local Ray cluster with the load model; the only seam is
    a wrapper around the real `synthesize` that runs night D2 (its own ledger, its own
    run) inside D1's search, which is where a second cron-started job would overlap.
    """

    from jobs.nightly import main
    from pipeline.run import synthesis

    problems = tmp_path / "problems.jsonl"
    rows = [
        {"id": f"p{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)
    ]
    problems.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path / "out", problems)))
    real = synthesis.synthesize

    def d1_overlapped_by_d2(night: Any, **kwargs: Any) -> Any:
        if night.run_id == "n-2026-11-20":  # D1 has recorded its slice and now searches
            assert main(["--config", str(path), "--date", "2026-11-21"]) == 0
        return real(night, **kwargs)

    monkeypatch.setattr(synthesis, "synthesize", d1_overlapped_by_d2)
    assert main(["--config", str(path), "--date", "2026-11-20"]) == 0
    monkeypatch.setattr(synthesis, "synthesize", real)
    assert main(["--config", str(path), "--date", "2026-11-22"]) == 0
    searched = {
        date: sorted(
            pq.read_table(tmp_path / "out" / f"run=n-{date}" / "trees")
            .column("problem_id")
            .to_pylist()
        )
        for date in ("2026-11-20", "2026-11-21", "2026-11-22")
    }
    assert searched == {
        "2026-11-20": ["p0", "p1"],
        "2026-11-21": ["p2", "p3"],
        "2026-11-22": ["p4", "p5"],  # not D2's p2, p3 again
    }
    nights = [(n["date"], n["skip"], n["status"]) for n in Ledger(tmp_path / "out").nights]
    assert nights == [
        ("2026-11-20", 0, "done"),
        ("2026-11-21", 2, "done"),
        ("2026-11-22", 4, "done"),
    ]
