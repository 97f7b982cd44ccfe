"""pipeline.publish.publish_run.publish_run against a local Hub server (tests/hub_server.py).

The round trip uses the real huggingface_hub upload path (preupload, LFS batch + PUT, commit)
and the real ``datasets.load_dataset`` reading the Parquet back through the card's configs:
with no config name (the card's default), by config, and by split (``train``/``test``, the
held-out problems of `pipeline.records.splits.split_of`).  The test runs' Parquet is built
here by hand with a ``split`` column (or without one, as runs before the split were written).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.publish.hub import (
    CONFIGS,
    CardInfo,
    HubPublishError,
    card_configs,
    retry_command,
)
from pipeline.publish.publish_run import publish_run
from pipeline.records.splits import split_of
from tests.hub_server import HubServer

TOKEN = "hf_FAKE_token_must_never_leak_0123456789"
REPO = "bgmcts/synth-data"
TEST_FRACTION = 0.5  # r1's problems p0, p1, p2: test, train, test; r1-new's p0, p1: train, test

pytestmark = [
    pytest.mark.integration,
    # huggingface_hub's LFS PUT passes a file object as `data=` (httpx deprecation, not ours).
    pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning"),
]


def _msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in pairs]


def _table(rows: list[dict[str, Any]], record: str) -> pa.Table:
    """`rows` with schema metadata and a description on every field, like the sink's tables."""
    table = pa.Table.from_pylist(rows)
    schema = pa.schema(
        [f.with_metadata({"description": f"{f.name} of {record}"}) for f in table.schema],
        metadata={"record": record, "schema_version": "test"},
    )
    return table.cast(schema)


def make_run(
    root: Path, tag: str, n_sft: int = 3, n_dpo: int = 2, *, with_split: bool = True
) -> Path:
    """A run folder with sft/*.parquet and dpo/*.parquet written by pyarrow: row i of each is
    problem ``<tag>-p<i>``, its ``split`` that problem's (none when not `with_split`)."""
    (root / "sft").mkdir(parents=True)
    (root / "dpo").mkdir(parents=True)

    def problem(i: int) -> dict[str, str]:
        pid = f"{tag}-p{i}"
        return {
            "problem_id": pid,
            **({"split": split_of(pid, TEST_FRACTION)} if with_split else {}),
        }

    sft = [
        {
            "messages": _msgs(("user", f"{tag} q{i}"), ("assistant", f"{tag} a{i}")),
            **problem(i),
        }
        for i in range(n_sft)
    ]
    dpo = [
        {
            "prompt": _msgs(("user", f"{tag} p{i}")),
            "chosen": _msgs(("assistant", f"{tag} good{i}")),
            "rejected": _msgs(("assistant", f"{tag} bad{i}")),
            "score_chosen": 1.0,
            "score_rejected": 0.25 * i,
            **problem(i),
        }
        for i in range(n_dpo)
    ]
    pq.write_table(_table(sft, "sft"), root / "sft" / "part-00000.parquet")
    pq.write_table(_table(dpo, "dpo"), root / "dpo" / "part-00000.parquet")
    return root


def rows_of(run_dir: Path, config: str, split: str | None = None) -> list[dict[str, Any]]:
    """The local rows of a config (those of `split` only, when given)."""
    out: list[dict[str, Any]] = []
    for f in sorted((run_dir / config).glob("*.parquet")):
        out += pq.read_table(f).to_pylist()
    return [r for r in out if split is None or r["split"] == split]


def as_published(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a run written before the split, as the Hub serves them: split "train" added."""
    return [{**r, "split": r.get("split", "train")} for r in rows]


def load(config: str, cache: Path, split: str = "train") -> list[dict[str, Any]]:
    import datasets

    ds = datasets.load_dataset(REPO, config, split=split, cache_dir=str(cache))
    return list(ds.to_list())


def load_all(config: str | None, cache: Path) -> dict[str, list[dict[str, Any]]]:
    """Every split of a config (the card's default config when `config` is None)."""
    import datasets

    args = (REPO,) if config is None else (REPO, config)
    dsd = datasets.load_dataset(*args, cache_dir=str(cache))
    return {name: list(ds.to_list()) for name, ds in dsd.items()}


def every_row(splits: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [row for rows in splits.values() for row in rows]


def canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


SHARD = re.compile(
    r"data/(?P<config>\w+)/run=(?P<run>[\w.-]+)/(?P<split>train|test)-[0-9a-f]{12}-"
    r"(?P<i>\d{5})-of-(?P<n>\d{5})\.parquet"
)


def shards(files: Any, run: str | None = None) -> dict[tuple[str, str], str]:
    """(config, split) -> the one shard path of run `run` (of every run when None) among
    `files`; fails on a data file that is not a shard, or on two shards of one split."""
    out: dict[tuple[str, str], str] = {}
    for path in sorted(files):
        if not path.startswith("data/"):
            continue
        match = SHARD.fullmatch(path)
        assert match, f"{path} is not a shard name"
        if run is None or match["run"] == run:
            key = (match["config"], match["split"])
            assert key not in out and match["n"] == "00001", path
            out[key] = path
    return out


def header(card: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(card.split("---")[1])
    return loaded


CARD = CardInfo(
    config={
        "search": {"algorithm": "bg-mcts", "budget": 64},
        "hub": {"repo": REPO, "hf_token": TOKEN},
        "policy": {"model": "Qwen/Qwen3-0.6B", "api_key": "sk-secret"},
        "records": {"test_fraction": TEST_FRACTION},
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
    assert result.split_counts == {
        "sft": {"train": 1, "test": 2},
        "dpo": {"train": 1, "test": 1},
    }
    files = env.files(REPO)
    found = shards(files)
    assert sorted(found) == [("dpo", "test"), ("dpo", "train"), ("sft", "test"), ("sft", "train")]
    assert set(files) == {"README.md", "runs.json", *found.values()}
    # each shard holds its split's rows, with the local file's schema and metadata
    for config in ("sft", "dpo"):
        local = pq.read_schema(run / config / "part-00000.parquet")
        for split in ("train", "test"):
            table = pq.read_table(io.BytesIO(files[found[config, split]]))
            assert table.schema.equals(local, check_metadata=True)
            assert canon(table.to_pylist()) == canon(rows_of(run, config, split))
    assert env.repos[("dataset", REPO)].private
    # Parquet went through the LFS batch + PUT path, the card as a regular file.
    assert any(m == "PUT" and p.startswith("/lfs-upload/") for m, p in env.requests)
    for config in ("sft", "dpo"):
        for split in ("train", "test"):
            got = load(config, tmp_path / f"c-{config}-{split}", split)
            assert canon(got) == canon(rows_of(run, config, split))


def test_default_config_and_held_out_problems(env: HubServer, tmp_path: Path) -> None:
    """`load_dataset(repo)` needs no config name; `split="test"` is exactly the held-out rows;
    a problem is in one split only, across configs and runs."""
    run1 = make_run(tmp_path / "run1", "r1")
    run2 = make_run(tmp_path / "run2", "r2", n_sft=5, n_dpo=1)  # r2's dpo: all test
    publish(run1, "r1", env)
    publish(run2, "r2", env)

    default = load_all(None, tmp_path / "c-default")  # no config name: the card's default
    assert set(default) == {"train", "test"}
    for split in ("train", "test"):
        assert canon(default[split]) == canon(
            rows_of(run1, "sft", split) + rows_of(run2, "sft", split)
        )
    test_rows = load("sft", tmp_path / "c-sft-test", "test")
    expected = rows_of(run1, "sft", "test") + rows_of(run2, "sft", "test")
    assert expected and canon(test_rows) == canon(expected)
    assert all(r["split"] == "test" for r in test_rows)

    split_of_problem: dict[str, set[str]] = {}
    for config in ("sft", "dpo"):
        for split, rows in load_all(config, tmp_path / f"c-all-{config}").items():
            for row in rows:
                assert row["split"] == split
                split_of_problem.setdefault(row["problem_id"], set()).add(split)
    assert len(split_of_problem) == 8  # r1-p0..p2, r2-p0..p4
    for pid, splits in split_of_problem.items():
        assert splits == {split_of(pid, TEST_FRACTION)}
    assert {s for splits in split_of_problem.values() for s in splits} == {"train", "test"}

    # a run whose dpo rows are all test has a dpo test shard and no dpo train shard
    files = env.files(REPO)
    r2 = shards(files, "r2")
    assert ("dpo", "train") not in r2
    local = pq.read_table(run2 / "dpo" / "part-00000.parquet")
    assert pq.read_table(io.BytesIO(files[r2["dpo", "test"]])).equals(local)


def test_second_run_then_republish_replaces_only_that_run(env: HubServer, tmp_path: Path) -> None:
    run1 = make_run(tmp_path / "run1", "r1")
    run2 = make_run(tmp_path / "run2", "r2", n_sft=2, n_dpo=1)
    publish(run1, "r1", env)
    publish(run2, "r2", env)
    both = rows_of(run1, "sft") + rows_of(run2, "sft")
    assert canon(every_row(load_all("sft", tmp_path / "c1"))) == canon(both)
    r2_files = {p: b for p, b in env.files(REPO).items() if "run=r2" in p}
    assert sorted(shards(r2_files)) == [("dpo", "test"), ("sft", "test"), ("sft", "train")]
    r1_before = shards(env.files(REPO), "r1")

    # Re-publishing r1 unchanged uploads nothing: every shard is there under its name.
    again = publish(run1, "r1", env)
    assert again.uploaded == [] and again.deleted == []
    assert sorted(again.skipped) == sorted(r1_before.values())

    # Re-publish r1 with different rows and a different file name: old r1 files go away.
    run1b = tmp_path / "run1b"
    make_run(run1b, "r1-new", n_sft=4, n_dpo=1)  # its dpo row: train only
    (run1b / "sft" / "part-00000.parquet").rename(run1b / "sft" / "part-new.parquet")
    result = publish(run1b, "r1", env)
    assert result.deleted == sorted(r1_before.values())  # new rows, new names

    files = env.files(REPO)
    assert {p: b for p, b in files.items() if "run=r2" in p} == r2_files
    assert sorted(shards(files, "r1")) == [("dpo", "train"), ("sft", "test"), ("sft", "train")]
    for config in ("sft", "dpo"):
        got = load_all(config, tmp_path / f"c2-{config}")
        for split, rows in got.items():
            assert canon(rows) == canon(
                rows_of(run1b, config, split) + rows_of(run2, config, split)
            )
    # One commit per publish (create_repo adds the initial one).
    assert len(env.repos[("dataset", REPO)].commits) == 5


def test_run_without_split_column_publishes_as_train(env: HubServer, tmp_path: Path) -> None:
    """A run written before the split: every row is train; `errors` goes up unchanged, the
    other tables get a `split` column of "train" so they read together with newer runs."""
    old = make_run(tmp_path / "old", "old", with_split=False)
    (old / "errors").mkdir()
    errors = _table([{"problem_id": "old-p9", "stage": "search", "error": "boom"}], "errors")
    pq.write_table(errors, old / "errors" / "part-00000.parquet")
    result = publish(old, "old", env)

    assert result.split_counts == {
        "sft": {"train": 3, "test": 0},
        "dpo": {"train": 2, "test": 0},
        "errors": {"train": 1, "test": 0},
    }
    files = env.files(REPO)
    found = shards(files)
    assert sorted(found) == [("dpo", "train"), ("errors", "train"), ("sft", "train")]
    errors_up = pq.read_table(io.BytesIO(files[found["errors", "train"]]))
    assert errors_up.equals(pq.read_table(old / "errors" / "part-00000.parquet"))
    assert errors_up.schema.equals(errors.schema, check_metadata=True)
    sft_schema = pq.read_schema(io.BytesIO(files[found["sft", "train"]]))
    assert sft_schema.names[-1] == "split" and sft_schema.metadata[b"record"] == b"sft"
    configs = header(files["README.md"].decode())["configs"]
    assert all([f["split"] for f in c["data_files"]] == ["train"] for c in configs)
    assert load_all("sft", tmp_path / "c-sft") == {"train": load("sft", tmp_path / "c-sft-train")}
    assert canon(load("sft", tmp_path / "c1")) == canon(as_published(rows_of(old, "sft")))
    assert canon(load("errors", tmp_path / "c2")) == canon(rows_of(old, "errors"))

    # a newer run with a test split next to it: one config, both runs, split by problem
    new = make_run(tmp_path / "new", "r1")
    publish(new, "r1", env)
    assert canon(load("sft", tmp_path / "c3")) == canon(
        as_published(rows_of(old, "sft")) + rows_of(new, "sft", "train")
    )
    assert canon(load("sft", tmp_path / "c4", "test")) == canon(rows_of(new, "sft", "test"))


def test_repo_files_published_before_the_split_stay_in_train(
    env: HubServer, tmp_path: Path
) -> None:
    """A repo from before the split (``data/sft/run=<id>/part-*.parquet``): its runs are listed
    in the train split one folder each until they are re-published."""
    from huggingface_hub import CommitOperationAdd, HfApi

    legacy = make_run(tmp_path / "legacy", "leg", with_split=False)
    api = HfApi(endpoint=env.endpoint, token=TOKEN)
    api.create_repo(REPO, repo_type="dataset", private=True)
    api.create_commit(
        REPO,
        [
            CommitOperationAdd(
                path_in_repo=f"data/{c}/run=leg/part-00000.parquet",
                path_or_fileobj=str(legacy / c / "part-00000.parquet"),
            )
            for c in ("sft", "dpo")
        ],
        commit_message="published before the split",
        repo_type="dataset",
    )
    run = make_run(tmp_path / "run1", "r1")
    publish(run, "r1", env)

    sft = header(env.files(REPO)["README.md"].decode())["configs"][0]
    assert sft == {
        "config_name": "sft",
        "data_files": [
            {
                "split": "train",
                "path": ["data/sft/run=*/train-*.parquet", "data/sft/run=leg/*.parquet"],
            },
            {"split": "test", "path": "data/sft/run=*/test-*.parquet"},
        ],
        "default": True,
    }
    # the legacy rows have no split column: datasets reads them with split None
    legacy_rows = [{**r, "split": None} for r in rows_of(legacy, "sft")]
    assert canon(load("sft", tmp_path / "c1")) == canon(legacy_rows + rows_of(run, "sft", "train"))

    publish(legacy, "leg", env)  # re-published from its run folder: the new layout
    files = env.files(REPO)
    assert "data/sft/run=leg/part-00000.parquet" not in files
    assert ("sft", "train") in shards(files, "leg")
    sft = header(files["README.md"].decode())["configs"][0]
    assert sft["data_files"][0] == {"split": "train", "path": "data/sft/run=*/train-*.parquet"}
    assert canon(load("sft", tmp_path / "c2")) == canon(
        as_published(rows_of(legacy, "sft")) + rows_of(run, "sft", "train")
    )


def test_card_configs_default_and_test_split_only_when_present() -> None:
    def names(files: list[str]) -> list[tuple[str, list[str], bool]]:
        return [
            (c["config_name"], [f["split"] for f in c["data_files"]], c.get("default", False))
            for c in card_configs(files)
        ]

    assert names(
        [
            "README.md",
            "data/trees/run=a/train-part-1.parquet",
            "data/prm/run=a/train-part-1.parquet",
            "data/prm/run=b/test-part-2.parquet",
            "data/errors/run=a/train-part-1.parquet",
            "reports/run=a/x.png",
        ]
    ) == [
        ("prm", ["train", "test"], True),
        ("trees", ["train"], False),
        ("errors", ["train"], False),
    ]
    assert names(["data/trees/run=a/part-1.parquet"]) == [("trees", ["train"], True)]
    assert names([]) == []


def test_bad_split_value_fails_before_any_request(env: HubServer, tmp_path: Path) -> None:
    run = make_run(tmp_path / "run1", "r1")
    rows = rows_of(run, "sft")
    rows[0]["split"] = "validation"
    pq.write_table(_table(rows, "sft"), run / "sft" / "part-00000.parquet")
    with pytest.raises(HubPublishError, match="'validation'") as info:
        publish(run, "r1", env)
    assert retry_command(run, REPO, "r1") in str(info.value)
    assert env.requests == []


def test_card(env: HubServer, tmp_path: Path) -> None:
    run = make_run(tmp_path / "run1", "r1")
    publish(run, "r1", env)
    card = env.files(REPO)["README.md"].decode()

    assert header(card)["configs"] == [
        {
            "config_name": "sft",
            "data_files": [
                {"split": "train", "path": "data/sft/run=*/train-*.parquet"},
                {"split": "test", "path": "data/sft/run=*/test-*.parquet"},
            ],
            "default": True,
        },
        {
            "config_name": "dpo",
            "data_files": [
                {"split": "train", "path": "data/dpo/run=*/train-*.parquet"},
                {"split": "test", "path": "data/dpo/run=*/test-*.parquet"},
            ],
        },
    ]
    assert f'data = load_dataset("{REPO}")' in card  # the default config, no name
    assert f'sft_test = load_dataset("{REPO}", "sft", split="test")' in card
    assert "`records.test_fraction` = 0.5" in card
    assert "BG-MCTS" in card and CARD.paper_title in card
    assert "| config | train rows | test rows |" in card
    assert "| sft | 1 | 2 |" in card and "| dpo | 1 | 1 |" in card
    assert "0.8750" in card and "Qwen/Qwen3-0.6B" in card and "llm_calls: 64" in card
    assert "r1 q1" in card and "r1 good1" in card  # one sample row per config (a train row)
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
    from pipeline.records import RecordsConfig, RecordsSpec, records_for
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
            RecordsSpec(
                problem_id=f"p{seed}",
                run_id=run_id,
                config=RecordsConfig(),
                contamination="math500" if seed == 2 else None,
            ),
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
    written = [n for n in CONFIGS if any((run_dir / n).glob("*.parquet"))]
    assert {"sft", "dpo", "prm", "kto", "nodes", "trees", "tree_nodes"} <= set(written)
    assert result.counts == {n: pq.read_table(run_dir / n).num_rows for n in written}
    assert all(result.counts.values())  # every record type is a config (no errors here)
    card = env.files(REPO)["README.md"].decode()
    assert f"Precision of answered nodes: {precision:.4f}" in card
    assert "embedded" in card and TOKEN not in card
    assert [c["config_name"] for c in header(card)["configs"]] == written
    assert "kept out of sft/dpo/prm/kto): 1 (math500: 1)" in card
    ngram = config.records.decontamination.ngram
    assert f"{ngram}-grams" in card and "math500, gsm8k_test" in card
    # every record type loads by its config name, as a user would (train and test splits)
    prm = load_all("prm", tmp_path / "c-prm")
    assert canon(every_row(prm)) == canon(as_published(rows_of(run_dir, "prm")))
    assert {"p0", "p1"} == {
        r["problem_id"] for rows in prm.values() for r in rows
    }  # p2: contaminated
    tree_nodes = load_all("tree_nodes", tmp_path / "c-nodes")
    assert sum(map(len, tree_nodes.values())) == result.counts["tree_nodes"]


async def test_publish_job_standalone_and_bad_arguments(
    env: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m jobs.publish` (the retry command) publishes a finished run folder alone."""
    from jobs.publish import main

    run_dir, _ = await _sink_run(tmp_path, "alone")
    argv = ["--run-dir", str(run_dir), "--repo", REPO, "--endpoint", env.endpoint]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "run alone: sft" in out and TOKEN not in out
    assert re.search(r"published to \S+ in [\d.]+ s \(1 commit, \d+ files uploaded", out), out
    sft = every_row(load_all("sft", tmp_path / "c"))
    assert canon(sft) == canon(as_published(rows_of(run_dir, "sft")))
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
    # the table's first column is as wide as its longest label: match across the padding
    assert re.search(rf"answered nodes +│ {nodes.num_rows} ", out)
    assert summary.contaminated == {"math500": 1}
    assert re.search(r"decontaminated problems +│ math500 1 \(no training rows\)", out)
    assert main(["report", str(tmp_path / "nope")]) == 2


def test_publish_run_imports_without_the_report_packages() -> None:
    """TRL's venv (`make test-trl`) publishes a run with `publish_run` and has no matplotlib:
    the module must not import the report package (and its plots) at import time."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from pipeline.publish.publish_run import publish_run\n"
        "assert 'pipeline.report' not in sys.modules, 'the report package was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_publish_larger_than_a_commit_goes_up_in_small_commits_and_resumes(
    env: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One shard per row and four files per commit: the publish is a sequence of commits of
    at most four files, the card last; cut after its second commit, the same publish run
    again uploads only what is missing, and the repo holds each row once."""
    import functools

    from pipeline.publish import publish_run as publish_module
    from pipeline.publish.shards import shard_config

    monkeypatch.setattr(publish_module, "shard_config", functools.partial(shard_config, max_rows=1))

    def small_commits(run_dir: Path, run_id: str) -> Any:
        return publish_run(
            run_dir,
            REPO,
            run_id=run_id,
            endpoint=env.endpoint,
            card_info=CARD,
            max_files_per_commit=4,
        )

    run = make_run(tmp_path / "run1", "r1", n_sft=6, n_dpo=4)
    env.commits_before_failure = 2
    env.commit_sizes.clear()
    with pytest.raises(HubPublishError, match="Injected commit failure") as info:
        small_commits(run, "r1")
    assert "Retry with: python -m jobs.publish" in str(info.value)
    first_try = dict(env.files(REPO))
    assert env.commit_sizes == [4, 4]  # 8 of the 10 shards
    assert "README.md" not in first_try  # no card before the last commit
    env.commits_before_failure = None
    env.commit_sizes.clear()

    result = small_commits(run, "r1")
    assert sorted(result.skipped) == sorted(first_try)  # nothing uploaded twice
    assert set(result.uploaded) | set(result.skipped) == {
        p for p in env.files(REPO) if p.startswith("data/")
    }
    assert len(result.skipped) + len(result.uploaded) == 10  # one shard per row
    assert env.commit_sizes == [4] and result.commits == 1  # 2 shards, the card, runs.json
    last = env.repos[("dataset", REPO)].commits
    assert {"README.md", "runs.json"} <= set(last[-1][1]) - set(last[-2][1])  # the card last
    for config in ("sft", "dpo"):
        got = every_row(load_all(config, tmp_path / f"c-{config}"))
        assert canon(got) == canon(rows_of(run, config))


def test_the_card_commit_builds_on_the_newest_head(env: HubServer, tmp_path: Path) -> None:
    """Another publish commits between this one's read of the repo and its card commit: the
    card commit is refused (its parent is no longer the head) and rebuilt, so the card and
    runs.json list both runs."""
    from huggingface_hub import HfApi

    run1 = make_run(tmp_path / "run1", "r1")
    run2 = make_run(tmp_path / "run2", "r2", n_sft=2, n_dpo=1)
    real = HfApi.create_commit
    raced: list[str] = []

    def create_commit(self: HfApi, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("parent_commit") and not raced:
            raced.append("r2")
            publish(run2, "r2", env)  # lands first, on the head r1 read
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HfApi, "create_commit", create_commit)
        publish(run1, "r1", env)
    assert raced == ["r2"]
    files = env.files(REPO)
    runs = [r["run_id"] for r in json.loads(files["runs.json"])["runs"]]
    assert runs == ["r1", "r2"]
    card = files["README.md"].decode()
    assert "| `r1` |" in card and "| `r2` |" in card
    assert sorted({k[0] for k in shards(files, "r2")}) == ["dpo", "sft"]


def test_card_yaml_says_license_language_task_size_and_source(
    env: HubServer, tmp_path: Path
) -> None:
    info = CardInfo(
        config=dict(CARD.config),
        models=["Qwen/Qwen3-0.6B"],
        license="apache-2.0",
        source_dataset="nlile/hendrycks-MATH-benchmark",
        answered_precision=0.5,
    )
    for tag in ("r1", "r2"):
        run = make_run(tmp_path / tag, tag, n_sft=3, n_dpo=2)
        publish_run(run, REPO, run_id=tag, endpoint=env.endpoint, card_info=info, private=False)
    card = env.files(REPO)["README.md"].decode()
    meta = header(card)
    assert meta["license"] == "apache-2.0"
    assert meta["language"] == ["en"]
    assert meta["task_categories"] == ["text-generation"]
    assert meta["size_categories"] == ["n<1K"]  # 2 runs x (3 sft + 2 dpo)
    assert meta["source_datasets"] == ["nlile/hendrycks-MATH-benchmark"]
    assert "trl" in meta["tags"]
    index = json.loads(env.files(REPO)["runs.json"])["runs"]
    assert [r["run_id"] for r in index] == ["r1", "r2"]
    assert index[0]["rows"]["sft"] == {"train": 1, "test": 2}
    # the run table: one line per run, its rows per training config
    table = [line for line in card.splitlines() if line.startswith("| `r")]
    assert len(table) == 2 and all("| 0.5000 |" in line for line in table)


def test_a_public_repo_needs_a_license(env: HubServer, tmp_path: Path) -> None:
    run = make_run(tmp_path / "run1", "r1")
    with pytest.raises(HubPublishError, match=r"publish\.license") as info:
        publish_run(run, REPO, run_id="r1", endpoint=env.endpoint, card_info=CARD, private=False)
    assert "Retry with:" in str(info.value)
    assert ("dataset", REPO) not in env.repos  # refused before any request

    from huggingface_hub import HfApi

    HfApi(endpoint=env.endpoint, token=TOKEN).create_repo(REPO, repo_type="dataset")
    with pytest.raises(HubPublishError, match=r"is public and publish\.license is not set"):
        publish(run, "r1", env)  # private=True, but the repo is public already
    assert env.files(REPO) == {}
