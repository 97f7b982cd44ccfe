"""pipeline.publish.reshard against a local Hub server (tests/hub_server.py).

A repo is built in the earlier layouts by committing their files with `HfApi` directly: run
``pre`` from before the split (``part-<batch>.parquet``, no ``split`` column), run ``parts``
one file per part (``train-part-<batch>.parquet``, ``test-part-<batch>.parquet``), and run
``new`` published in the shard layout by `publish_run` (whose card lists ``pre``'s folders).
The reshard runs with three files per commit, so each old run takes several commits; the
rows are read back with ``datasets.load_dataset`` through the card, before and after.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.publish.hub import HubPublishError
from pipeline.publish.reshard import ReshardResult, reshard_repo
from tests.hub_server import HubServer
from tests.pipeline.publish.test_hub import (
    REPO,
    TOKEN,
    _msgs,
    _table,
    canon,
    header,
    make_run,
    publish,
    shards,
)

pytestmark = [
    pytest.mark.integration,
    # huggingface_hub's LFS PUT passes a file object as `data=` (httpx deprecation, not ours).
    pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning"),
]

FILES_PER_COMMIT = 3
FIGURE = "reports/run=parts/tokens.png"
SPLITS_OF = {"sft": ("train", "test"), "dpo": ("train", "test"), "errors": ("train",)}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, hub: HubServer) -> HubServer:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return hub


def _sft(tag: str, i: int, split: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "messages": _msgs(("user", f"{tag} q{i}"), ("assistant", f"{tag} a{i}")),
        "problem_id": f"{tag}-p{i}",
    }
    return row if split is None else {**row, "split": split}


def _dpo(tag: str, i: int, split: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "prompt": _msgs(("user", f"{tag} p{i}")),
        "chosen": _msgs(("assistant", f"{tag} good{i}")),
        "rejected": _msgs(("assistant", f"{tag} bad{i}")),
        "score_chosen": 1.0,
        "score_rejected": 0.25 * i,
        "problem_id": f"{tag}-p{i}",
    }
    return row if split is None else {**row, "split": split}


def _parquet(rows: list[dict[str, Any]], record: str) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(_table(rows, record), buffer)
    return buffer.getvalue()


def old_layout_files() -> dict[str, bytes]:
    """Repo path -> bytes of runs ``pre`` (before the split: 4 files) and ``parts`` (one
    file per part and split: 12 files), and a figure of ``parts``' report."""
    files = {
        "data/sft/run=pre/part-00000.parquet": _parquet([_sft("pre", 0, None)], "sft"),
        "data/sft/run=pre/part-00001.parquet": _parquet(
            [_sft("pre", 1, None), _sft("pre", 2, None)], "sft"
        ),
        "data/dpo/run=pre/part-00000.parquet": _parquet([_dpo("pre", 0, None)], "dpo"),
        "data/errors/run=pre/part-00000.parquet": _parquet(
            [{"problem_id": "pre-p9", "stage": "search", "error": "boom"}], "errors"
        ),
        FIGURE: b"\x89PNG not really",
    }
    for batch in range(4):  # one train and one test problem per batch
        for split, i in (("train", 2 * batch), ("test", 2 * batch + 1)):
            name = f"{split}-part-{batch:05d}.parquet"
            files[f"data/sft/run=parts/{name}"] = _parquet([_sft("parts", i, split)], "sft")
            if batch < 2:
                files[f"data/dpo/run=parts/{name}"] = _parquet([_dpo("parts", i, split)], "dpo")
    return files


def build_old_repo(env: HubServer, tmp_path: Path) -> None:
    """The repo of the module docstring: old runs committed as they were, then ``new``."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=env.endpoint, token=TOKEN)
    api.create_repo(REPO, repo_type="dataset", private=True)
    api.create_commit(
        REPO,
        [CommitOperationAdd(p, data) for p, data in old_layout_files().items()],
        commit_message="published in the earlier layouts",
        repo_type="dataset",
    )
    publish(make_run(tmp_path / "new", "new"), "new", env)


def reshard(env: HubServer, **kwargs: Any) -> ReshardResult:
    from huggingface_hub import HfApi

    api = HfApi(endpoint=env.endpoint, token=TOKEN)
    kwargs.setdefault("max_files_per_commit", FILES_PER_COMMIT)
    return reshard_repo(REPO, api=api, token=TOKEN, **kwargs)


def load_every_split(cache: Path) -> dict[tuple[str, str], list[str]]:
    """(config, split) -> its rows read back through the card (canonical JSON, sorted)."""
    import datasets

    out = {}
    for config, splits in SPLITS_OF.items():
        for split in splits:
            ds = datasets.load_dataset(REPO, config, split=split, cache_dir=str(cache / config))
            out[config, split] = canon(list(ds.to_list()))
    return out


def as_resharded(rows: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    """Rows read before a reshard as they read after: a run before the split reads its
    ``split`` as "train" where it read null (``errors`` has no such column)."""
    out = {}
    for key, canonical in rows.items():
        loaded = [json.loads(r) for r in canonical]
        out[key] = canon([r if r.get("split", "-") else {**r, "split": "train"} for r in loaded])
    return out


def data_files(env: HubServer) -> list[str]:
    return sorted(p for p in env.files(REPO) if p.startswith("data/"))


def test_reshard_rewrites_old_runs_as_shards_and_keeps_every_row(
    env: HubServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    build_old_repo(env, tmp_path)
    before = env.files(REPO)
    rows_before = load_every_split(tmp_path / "before")
    sft_rows = len(rows_before["sft", "train"]) + len(rows_before["sft", "test"])
    assert sft_rows == 3 + 8 + 3  # pre, parts, new
    assert "data/sft/run=pre/*.parquet" in json.dumps(header(before["README.md"].decode()))
    assert len(data_files(env)) == 4 + 12 + 4

    env.commit_sizes.clear()
    with caplog.at_level("INFO", logger="pipeline.publish.reshard"):
        result = reshard(env)

    assert result.resharded == ["parts", "pre"] and not result.left
    assert (result.files_before, result.files_after) == (20, 3 + 4 + 4)
    assert result.commits == len(env.commit_sizes) and result.card_updated
    assert max(env.commit_sizes) <= FILES_PER_COMMIT
    files = env.files(REPO)
    found = shards(files, "pre")  # every data file is a shard, one per config and split
    assert sorted(found) == [
        ("dpo", "train"),
        ("errors", "train"),
        ("sft", "train"),
    ]
    assert len(shards(files, "parts")) == 4 and len(shards(files, "new")) == 4
    assert not any(p.startswith(".reshard/") for p in files)  # markers gone with the old files
    # every row read back, once; the runs before the split now read as "train"
    assert load_every_split(tmp_path / "after") == as_resharded(rows_before)
    errors = pq.read_table(io.BytesIO(files[found["errors", "train"]]))
    assert errors.column_names == ["problem_id", "stage", "error"]  # errors: no split column
    # the card: only its configs changed, the runs' folders of before the split are gone
    card_before, card_after = before["README.md"].decode(), files["README.md"].decode()
    assert card_after.split("---", 2)[2] == card_before.split("---", 2)[2]
    after_yaml, before_yaml = header(card_after), header(card_before)
    assert after_yaml.pop("configs") != before_yaml.pop("configs")
    assert after_yaml == before_yaml
    sft = header(card_after)["configs"][0]
    assert sft["data_files"][0] == {"split": "train", "path": "data/sft/run=*/train-*.parquet"}
    assert files["runs.json"] == before["runs.json"]  # pre and parts are not added to it
    assert files[FIGURE] == before[FIGURE]  # the report's figures stay
    # one line per run, files before -> after
    lines = [r.getMessage() for r in caplog.records if "resharded run" in r.getMessage()]
    assert lines[0].startswith("resharded run parts of bgmcts/synth-data: 12 files -> 4 shards")
    assert lines[1].startswith("resharded run pre of bgmcts/synth-data: 4 files -> 3 shards")
    assert "20 -> 11, 12 commits" in result.summary()


@pytest.mark.parametrize(
    "fail_after",
    [1, 3, 11],
    ids=["while-shards-go-up", "while-old-files-go", "before-the-card"],
)
def test_an_interrupted_reshard_run_again_finishes_it(
    env: HubServer, tmp_path: Path, fail_after: int
) -> None:
    """Cut after `fail_after` of its 12 commits, the same reshard run again ends with the
    repo an uninterrupted one gives: each row once, every data file a shard."""
    build_old_repo(env, tmp_path)
    rows_before = load_every_split(tmp_path / "before")
    env.commits_before_failure = fail_after
    with pytest.raises(HubPublishError, match="Injected commit failure") as info:
        reshard(env)
    assert "Retry with: python -m jobs.publish --reshard --repo bgmcts/synth-data" in str(
        info.value
    )
    assert TOKEN not in str(info.value)
    env.commits_before_failure = None
    env.commit_sizes.clear()

    result = reshard(env)
    assert result.commits == len(env.commit_sizes) == 12 - fail_after  # none made twice
    files = env.files(REPO)
    assert [len(shards(files, run)) for run in ("pre", "parts", "new")] == [3, 4, 4]
    assert result.files_after == 11
    assert not any(p.startswith(".reshard/") for p in files)
    assert "data/sft/run=pre/*.parquet" not in files["README.md"].decode()
    assert load_every_split(tmp_path / "after") == as_resharded(rows_before)


def test_a_repo_in_the_shard_layout_takes_no_commit(env: HubServer, tmp_path: Path) -> None:
    publish(make_run(tmp_path / "r1", "r1"), "r1", env)
    commits = len(env.repos[("dataset", REPO)].commits)
    result = reshard(env)
    assert (result.commits, result.resharded, result.card_updated) == (0, [], False)
    assert result.files_before == result.files_after == 4
    assert "already in the shard layout" in result.summary() and "0 commits" in result.summary()
    assert len(env.repos[("dataset", REPO)].commits) == commits

    # a resharded repo is in the shard layout too
    from huggingface_hub import CommitOperationAdd, HfApi

    HfApi(endpoint=env.endpoint, token=TOKEN).create_commit(
        REPO,
        [CommitOperationAdd(p, d) for p, d in old_layout_files().items()],
        commit_message="old runs",
        repo_type="dataset",
    )
    assert reshard(env).resharded == ["parts", "pre"]
    assert reshard(env).commits == 0


def test_a_run_with_shards_of_another_publish_is_left_as_it_is(
    env: HubServer, tmp_path: Path
) -> None:
    """Old files and shards of other rows in one run (an interrupted publish): which rows are
    the run's is not the reshard's to say, so it leaves the run and says why."""
    from huggingface_hub import CommitOperationAdd, HfApi

    build_old_repo(env, tmp_path)
    other = pa.Table.from_pylist([_sft("pre", 7, "train")])
    buffer = io.BytesIO()
    pq.write_table(other, buffer)
    foreign = "data/sft/run=pre/train-0123456789ab-00000-of-00001.parquet"
    HfApi(endpoint=env.endpoint, token=TOKEN).create_commit(
        REPO,
        [CommitOperationAdd(foreign, buffer.getvalue())],
        commit_message="half a publish",
        repo_type="dataset",
    )
    result = reshard(env)
    assert result.resharded == ["parts"] and list(result.left) == ["pre"]
    assert "publish it again from its run folder" in result.left["pre"]
    files = env.files(REPO)
    assert foreign in files and "data/sft/run=pre/part-00000.parquet" in files
    assert "left as it is: run pre" in result.summary()


def test_reshard_command_line(
    env: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m jobs.publish --reshard --repo R`: a repo of old runs and no card gets its
    runs as shards and a card that reads them; bad combinations exit 2."""
    from huggingface_hub import CommitOperationAdd, HfApi

    from jobs.publish import main

    api = HfApi(endpoint=env.endpoint, token=TOKEN)
    api.create_repo(REPO, repo_type="dataset", private=True)
    old = old_layout_files()
    api.create_commit(
        REPO,
        [CommitOperationAdd(p, d) for p, d in old.items()],
        commit_message="old",
        repo_type="dataset",
    )
    argv = ["--reshard", "--repo", REPO, "--endpoint", env.endpoint]
    assert main([*argv, "--run-id", "pre"]) == 0
    out = capsys.readouterr().out
    assert "resharded run pre of bgmcts/synth-data: 4 files -> 3 shards" in out  # per run
    assert "resharded 1 runs of bgmcts/synth-data: data files 16 -> 15" in out
    assert TOKEN not in out
    assert main(argv) == 0
    assert "data files 15 -> 7" in capsys.readouterr().out
    assert main(argv) == 0
    assert "nothing to do, 0 commits" in capsys.readouterr().out
    configs = header(env.files(REPO)["README.md"].decode())["configs"]
    assert [c["config_name"] for c in configs] == ["sft", "dpo", "errors"]
    import datasets

    sft = datasets.load_dataset(REPO, "sft", split="test", cache_dir=str(tmp_path / "c"))
    assert sorted(r["problem_id"] for r in sft) == [f"parts-p{i}" for i in (1, 3, 5, 7)]

    for bad, says in [
        ([*argv, "--run-dir", str(tmp_path)], "--reshard takes no --run-dir"),
        ([*argv, "--public", "--license", "mit"], "--reshard takes no --public, --license"),
        ([*argv, "--run-id", "nope"], "holds no data of run(s) nope"),
        (["--repo", REPO], "--run-dir is required"),
    ]:
        assert main(bad) == 2, bad
        assert says in capsys.readouterr().err
    assert main(["--run-dir", str(tmp_path / "nope"), "--repo", REPO]) == 2  # publish as before
