"""pipeline.publish.hub.publish_run against a local Hub server (tests/hub_server.py).

The round trip uses the real huggingface_hub upload path (preupload, LFS batch + PUT, commit)
and the real ``datasets.load_dataset`` reading the Parquet back through the card's configs.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.publish.hub import CardInfo, HubPublishError, publish_run, retry_command
from tests.hub_server import HubServer

TOKEN = "hf_FAKE_token_must_never_leak_0123456789"
REPO = "bgmcts/synth-data"

pytestmark = [
    pytest.mark.slow,
    # huggingface_hub's LFS PUT passes a file object as `data=` (httpx deprecation, not ours).
    pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning"),
]


def _msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in pairs]


def make_run(root: Path, tag: str, n_sft: int = 3, n_dpo: int = 2) -> Path:
    """A run folder with sft/*.parquet and dpo/*.parquet written by pyarrow."""
    (root / "sft").mkdir(parents=True)
    (root / "dpo").mkdir(parents=True)
    sft = [
        {"messages": _msgs(("user", f"{tag} q{i}"), ("assistant", f"{tag} a{i}"))}
        for i in range(n_sft)
    ]
    dpo = [
        {
            "prompt": _msgs(("user", f"{tag} p{i}")),
            "chosen": _msgs(("assistant", f"{tag} good{i}")),
            "rejected": _msgs(("assistant", f"{tag} bad{i}")),
            "score_chosen": 1.0,
            "score_rejected": 0.25 * i,
        }
        for i in range(n_dpo)
    ]
    pq.write_table(pa.Table.from_pylist(sft), root / "sft" / "part-00000.parquet")
    pq.write_table(pa.Table.from_pylist(dpo), root / "dpo" / "part-00000.parquet")
    return root


def rows_of(run_dir: Path, config: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted((run_dir / config).glob("*.parquet")):
        out += pq.read_table(f).to_pylist()
    return out


def load(config: str, cache: Path) -> list[dict[str, Any]]:
    import datasets

    ds = datasets.load_dataset(REPO, config, split="train", cache_dir=str(cache))
    return list(ds.to_list())


def canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


CARD = CardInfo(
    config={
        "search": {"algorithm": "bg-mcts", "budget": 64},
        "hub": {"repo": REPO, "hf_token": TOKEN},
        "policy": {"model": "Qwen/Qwen3-0.6B", "api_key": "sk-secret"},
    },
    models=["Qwen/Qwen3-0.6B"],
    budget={"llm_calls": 64, "tokens": 100_000},
    answered_precision=0.875,
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, hub: HubServer) -> HubServer:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return hub


def publish(run_dir: Path, run_id: str, hub: HubServer) -> Any:
    return publish_run(run_dir, REPO, run_id=run_id, endpoint=hub.endpoint, card_info=CARD)


def test_round_trip_two_configs(env: HubServer, tmp_path: Path) -> None:
    run = make_run(tmp_path / "run1", "r1")
    result = publish(run, "r1", env)

    assert result.counts == {"sft": 3, "dpo": 2}
    assert set(env.files(REPO)) == {
        "README.md",
        "data/sft/run=r1/part-00000.parquet",
        "data/dpo/run=r1/part-00000.parquet",
    }
    assert env.repos[("dataset", REPO)].private
    # Parquet went through the LFS batch + PUT path, the card as a regular file.
    assert any(m == "PUT" and p.startswith("/lfs-upload/") for m, p in env.requests)
    assert canon(load("sft", tmp_path / "c1")) == canon(rows_of(run, "sft"))
    assert canon(load("dpo", tmp_path / "c2")) == canon(rows_of(run, "dpo"))


def test_second_run_then_republish_replaces_only_that_run(env: HubServer, tmp_path: Path) -> None:
    run1 = make_run(tmp_path / "run1", "r1")
    run2 = make_run(tmp_path / "run2", "r2", n_sft=2, n_dpo=1)
    publish(run1, "r1", env)
    publish(run2, "r2", env)
    both = rows_of(run1, "sft") + rows_of(run2, "sft")
    assert canon(load("sft", tmp_path / "c1")) == canon(both)
    r2_files = {p: b for p, b in env.files(REPO).items() if "run=r2" in p}
    assert len(r2_files) == 2

    # Re-publish r1 with different rows and a different file name: old r1 files go away.
    run1b = tmp_path / "run1b"
    make_run(run1b, "r1-new", n_sft=4, n_dpo=3)
    (run1b / "sft" / "part-00000.parquet").rename(run1b / "sft" / "part-new.parquet")
    result = publish(run1b, "r1", env)
    assert result.deleted == ["data/sft/run=r1/part-00000.parquet"]  # dpo one is overwritten

    files = env.files(REPO)
    assert {p: b for p, b in files.items() if "run=r2" in p} == r2_files
    assert sorted(p for p in files if "run=r1" in p) == [
        "data/dpo/run=r1/part-00000.parquet",
        "data/sft/run=r1/part-new.parquet",
    ]
    assert canon(load("sft", tmp_path / "c2")) == canon(
        rows_of(run1b, "sft") + rows_of(run2, "sft")
    )
    assert canon(load("dpo", tmp_path / "c3")) == canon(
        rows_of(run1b, "dpo") + rows_of(run2, "dpo")
    )
    # One commit per publish (create_repo adds the initial one).
    assert len(env.repos[("dataset", REPO)].commits) == 4


def test_card(env: HubServer, tmp_path: Path) -> None:
    run = make_run(tmp_path / "run1", "r1")
    publish(run, "r1", env)
    card = env.files(REPO)["README.md"].decode()

    header = yaml.safe_load(card.split("---")[1])
    assert header["configs"] == [
        {
            "config_name": "sft",
            "data_files": [{"split": "train", "path": "data/sft/run=*/*.parquet"}],
        },
        {
            "config_name": "dpo",
            "data_files": [{"split": "train", "path": "data/dpo/run=*/*.parquet"}],
        },
    ]
    assert "BG-MCTS" in card and CARD.paper_title in card
    assert "| sft | 3 |" in card and "| dpo | 2 |" in card
    assert "0.8750" in card and "Qwen/Qwen3-0.6B" in card and "llm_calls: 64" in card
    assert "r1 q0" in card and "r1 good0" in card  # one sample row per config
    assert "algorithm: bg-mcts" in card
    assert TOKEN not in card and "sk-secret" not in card
    assert "hf_token: <redacted>" in card and "api_key: <redacted>" in card
    assert "tokens: 100000" in card  # a count, not a secret


def test_hub_failure_keeps_local_files_and_gives_retry_command(
    env: HubServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    run = make_run(tmp_path / "run1", "r1")
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.rglob("*") if p.is_file()}
    env.fail_commits = True

    with pytest.raises(HubPublishError) as info:
        publish(run, "r1", env)

    message = str(info.value)
    assert retry_command(run, REPO, "r1") in message
    assert "500" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run.rglob("*") if p.is_file()}
    assert after == before
    assert set(env.files(REPO)) == set()  # nothing committed
    out, err = capfd.readouterr()
    for text in (message, caplog.text, out, err):
        assert TOKEN not in text


def test_token_never_in_outputs(
    env: HubServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    run = make_run(tmp_path / "run1", "r1")
    result = publish(run, "r1", env)
    out, err = capfd.readouterr()
    texts = [out, err, caplog.text, repr(result)]
    texts += [b.decode(errors="replace") for b in env.files(REPO).values()]
    for text in texts:
        assert TOKEN not in text
    assert "published run r1" in caplog.text


def test_missing_token_names_env_var(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_HUB_TOKEN", raising=False)
    run = make_run(tmp_path / "run1", "r1")
    with pytest.raises(HubPublishError, match="MY_HUB_TOKEN") as info:
        publish_run(
            run, REPO, run_id="r1", token_env="MY_HUB_TOKEN", endpoint=hub.endpoint, card_info=CARD
        )
    assert "--token-env MY_HUB_TOKEN" in str(info.value)
    assert hub.requests == []  # failed before any request


def test_retry_command_quotes() -> None:
    cmd = retry_command("/runs/my run", "org/ds", "r1")
    assert cmd == (
        "python -m jobs.publish --run-dir '/runs/my run' --repo org/ds --run-id r1 "
        "--token-env HF_TOKEN"
    )


def test_server_tree_missing_folder_is_entry_not_found(env: HubServer) -> None:
    import httpx

    with httpx.Client() as client:
        r = client.post(
            f"{env.endpoint}/api/repos/create",
            json={"name": "x", "organization": "o", "type": "dataset"},
            headers={"Authorization": "Bearer t"},
        )
        assert r.status_code == 200
        r = client.get(f"{env.endpoint}/api/datasets/o/x/tree/main/nope")
        assert r.status_code == 404
        assert r.headers["X-Error-Code"] == "EntryNotFound"


async def _sink_run(root: Path, run_id: str) -> tuple[Path, Any]:
    """A real run folder: scripted searches -> records -> the streaming sink -> run.json."""
    from pipeline.config import parse_run_config
    from pipeline.records import RecordsConfig, records_for
    from pipeline.run.synthesis import write_manifest
    from pipeline.store.run_folder import RunFolder
    from pipeline.store.sink import ParquetSink
    from search import parse_search_config, run_search
    from search.scripted import ScriptedPolicy, ScriptedScorer

    config = parse_run_config(
        {
            "run_id": run_id,
            "output_root": str(root),
            "source": {"kind": "bundled", "dataset": "gsm8k"},
            "search": {"algorithm": "bg_mcts"},
            "publish": {"repo": REPO},
        }
    )
    sink = ParquetSink(RunFolder.open(root, run_id))
    for seed in range(3):
        policy = ScriptedPolicy(seed=seed, p_answer=0.5)
        result = await run_search(
            "q?",
            parse_search_config({"algorithm": "bg_mcts"}),
            policy,
            ScriptedScorer(seed=seed),
            3000,
            seed,
        )
        records = await records_for(
            result,
            "12",
            problem_id=f"p{seed}",
            run_id=run_id,
            config=RecordsConfig(),
            contamination="math500" if seed == 2 else None,
        )
        sink.write_batch(records)
    write_manifest(config, sink.folder)
    return sink.run_dir, config


async def test_configured_publish_pushes_the_run(env: HubServer, tmp_path: Path) -> None:
    """`publish.repo` in the run config publishes the run's sft/dpo; card facts from Parquet."""
    from pipeline.publish.publish_run import publish_configured

    run_dir, config = await _sink_run(tmp_path, "cfg")
    config = config.model_copy(
        update={"publish": config.publish.model_copy(update={"endpoint": env.endpoint})}
    )
    result = publish_configured(config, run_dir)
    labels = pq.read_table(run_dir / "nodes").column("label").to_pylist()
    precision = sum(labels) / len(labels)
    written = [n for n in ("sft", "dpo", "prm", "kto", "nodes", "trees", "tree_nodes")]
    assert result.counts == {n: pq.read_table(run_dir / n).num_rows for n in written}
    assert all(result.counts.values())  # every record type is a config (no errors here)
    card = env.files(REPO)["README.md"].decode()
    assert f"Precision of answered nodes: {precision:.4f}" in card
    assert "embedded" in card and TOKEN not in card
    header = yaml.safe_load(card.split("---")[1])
    assert [c["config_name"] for c in header["configs"]] == written
    assert "kept out of sft/dpo/prm/kto): 1 (math500: 1)" in card
    assert "13-gram" in card and "math500, gsm8k_test" in card
    # every record type loads by its config name, as a user would
    prm = load("prm", tmp_path / "c-prm")
    assert canon(prm) == canon(rows_of(run_dir, "prm"))
    assert {"p0", "p1"} == {r["problem_id"] for r in prm}  # p2 is contaminated
    tree_nodes = load("tree_nodes", tmp_path / "c-nodes")
    assert len(tree_nodes) == result.counts["tree_nodes"]


async def test_publish_job_standalone_and_bad_arguments(
    env: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m jobs.publish` (the retry command) publishes a finished run folder alone."""
    from jobs.publish import main

    run_dir, _ = await _sink_run(tmp_path, "alone")
    argv = ["--run-dir", str(run_dir), "--repo", REPO, "--endpoint", env.endpoint]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "published run alone" in out and TOKEN not in out
    assert canon(load("sft", tmp_path / "c")) == canon(rows_of(run_dir, "sft"))
    assert main(["--run-dir", str(tmp_path / "nope"), "--repo", REPO]) == 2
    assert "not a run folder" in capsys.readouterr().err


async def test_report_command_totals_a_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bgmcts report out/run=<id>` rebuilds the run's totals from its committed Parquet."""
    from jobs.cli import main
    from pipeline.run.summary import summarize_run_dir

    run_dir, _ = await _sink_run(tmp_path, "rep")
    (run_dir / "trees" / "part-uncommitted.parquet").write_bytes(b"in flight")  # ignored
    summary = summarize_run_dir(run_dir)
    nodes = pq.read_table(run_dir / "nodes")
    assert summary.searched == 3 and summary.answered_nodes == nodes.num_rows
    assert summary.correct_nodes == sum(nodes.column("label").to_pylist())
    assert (run_dir / "trees" / "part-uncommitted.parquet").exists()  # read-only
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"answered nodes              │ {nodes.num_rows}" in out
    assert summary.contaminated == {"math500": 1}
    assert "decontaminated problems     │ math500 1 (no training rows)" in out
    assert main(["report", str(tmp_path / "nope")]) == 2
