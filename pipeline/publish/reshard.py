"""Bringing a repo published in an earlier layout down to shards, from the Hub alone.

Runs published one file per local Parquet part (``train-part-<batch>.parquet``, or before
the split ``part-<batch>.parquet``) put about 3,300 files in a run folder: a month of such
nights is past the Hub's limits (100k files per repo, 10k per folder).  Re-publishing a run
from its run folder fixes it (`pipeline.publish.publish_run`), but a team whose run
folders are gone has only the repo.  `reshard_repo` rewrites each such run from the repo
itself, one run at a time (so memory and disk hold one run):

1. **Its old files come down** (the run's data files that are not shard-named) into a
   temporary folder, deleted when the run is done.
2. **They go back up as shards** (`pipeline.publish.shards.shard_config`, per config: it
   splits rows by their ``split`` column, and gives a table written before the split a
   ``split`` column of "train").  Same names as a publish would give the same rows.
3. **The old files are deleted.**  Shards first, then deletes, in commits of at most
   `max_files_per_commit` files (`pipeline.publish.hub.commit_in_chunks`); a run that fits
   in one commit is swapped in one.  A run's ``reports/`` figures stay as they are.
4. **The card's** ``configs:`` **last**: one commit on the head it read (rebuilt when another
   commit came first, as a publish's card commit is) that rewrites only that field of
   README.md (`pipeline.publish.layout.card_configs` of the files after), so the per-run
   globs of runs before the split, which would now match nothing, are gone.  ``runs.json``
   and the rest of the card stay as they are.

Rows are kept exactly, except that a run before the split reads with ``split`` "train"
where it read null.  An interrupted reshard, run again, finishes it: while shards are going
up the old files are all still there, so the same shards (the same names) are rebuilt and
only the missing ones uploaded; once they are all up, a marker ``.reshard/run=<id>.json``
(committed with the last shard, deleted with the last old file) names them, so a rerun
after some old files are gone deletes the rest instead of resharding what is left.  A run
that also holds other shards (an interrupted publish of other rows) is left as it is and
reported: finish that publish from its run folder.  A repo in the new layout takes no
commit.
"""

from __future__ import annotations

import json
import logging
import shlex
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    DatasetCard,
    DatasetCardData,
    HfApi,
)
from huggingface_hub import constants as hf_constants

from common.redact import redact_text
from pipeline.publish.hub import (
    MAX_FILES_PER_COMMIT,
    HubPublishError,
    commit_in_chunks,
    commit_on_head,
    hub_errors,
    read_repo_file,
    repo_head,
)
from pipeline.publish.layout import CARD, CONFIGS, card_configs, data_folder, run_of
from pipeline.publish.shards import is_shard_name, shard_config

__all__ = ["ReshardResult", "reshard_command", "reshard_repo"]

logger = logging.getLogger(__name__)

_Fail = Callable[[str], HubPublishError]


@dataclass(frozen=True)
class ReshardResult:
    repo_id: str
    resharded: list[str]  # runs rewritten as shards (or finished, after an interruption)
    files_before: int  # data files in the repo before
    files_after: int
    commits: int  # 0: the repo was already in the new layout
    card_updated: bool
    left: dict[str, str] = field(default_factory=dict)  # run -> why it was left as it is

    def summary(self) -> str:
        """What the reshard did, in a line or a few."""
        if not self.commits and not self.left:
            return (
                f"{self.repo_id} is already in the shard layout ({self.files_after} data "
                "files): nothing to do, 0 commits"
            )
        lines = [
            f"resharded {len(self.resharded)} runs of {self.repo_id}: data files "
            f"{self.files_before} -> {self.files_after}, {self.commits} commits"
            + (", card configs rewritten" if self.card_updated else "")
        ]
        lines += [f"left as it is: run {run}: {why}" for run, why in sorted(self.left.items())]
        return "\n".join(lines)


def reshard_command(
    repo_id: str, *, token_env: str = "HF_TOKEN", endpoint: str | None = None
) -> str:
    """The shell command that runs (and resumes) a reshard of `repo_id`."""
    parts = ["python", "-m", "jobs.publish", "--reshard", "--repo", repo_id]
    parts += ["--token-env", token_env]
    if endpoint is not None and endpoint.rstrip("/") != hf_constants.ENDPOINT.rstrip("/"):
        parts += ["--endpoint", redact_text(endpoint)]
    return shlex.join(parts)


def marker_path(run_id: str) -> str:
    """The file that names a run's shards while its old files are being deleted."""
    return f".reshard/run={run_id}.json"


def reshard_repo(
    repo_id: str,
    *,
    api: HfApi,
    token: str,
    token_env: str = "HF_TOKEN",
    max_files_per_commit: int = MAX_FILES_PER_COMMIT,
    runs: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ReshardResult:
    """Rewrite every run of `repo_id` held in an earlier layout (only `runs`, when given)
    as shards, then the card's ``configs:`` (see the module docstring).  Each run's line
    (files before -> after, commits) is logged and, given `progress`, passed to it.

    Raises ValueError for a run in `runs` that the repo has no data of, and
    `HubPublishError` (its message ending with the command that resumes) on a Hub failure.
    """
    if max_files_per_commit < 1:
        raise ValueError(f"max_files_per_commit={max_files_per_commit}: must be at least 1")
    retry = reshard_command(repo_id, token_env=token_env, endpoint=api.endpoint)

    def fail(reason: str) -> HubPublishError:
        return HubPublishError(f"{reason}\nRetry with: {retry} (it resumes where this stopped)")

    secrets = [token]
    with hub_errors(f"Resharding {repo_id} failed", secrets, fail):
        _, files = repo_head(api, repo_id, fail)
    by_run = _data_files(files)
    if runs is not None and (unknown := sorted(set(runs) - set(by_run))):
        raise ValueError(f"{repo_id} holds no data of run(s) {', '.join(unknown)}")
    todo = [
        run
        for run, paths in sorted(by_run.items())
        if (runs is None or run in runs) and any(not _is_shard(p) for p in paths)
    ]
    files_before = sum(map(len, by_run.values()))
    commits = 0
    resharded: list[str] = []
    left: dict[str, str] = {}
    with hub_errors(f"Resharding {repo_id} failed", secrets, fail):
        for run_id in todo:
            made, why, line = _reshard_run(api, repo_id, run_id, max_files_per_commit, fail)
            (logger.info if why is None else logger.warning)(line)
            if progress is not None:
                progress(line)
            commits += made
            if why is not None:
                left[run_id] = why
            elif made:  # none: a publish of the run came first
                resharded.append(run_id)
        card_updated = _card_configs_commit(api, repo_id, fail)
        commits += card_updated
        _, after = repo_head(api, repo_id, fail)
    files_after = sum(map(len, _data_files(after).values()))
    if not commits:
        logger.info("%s is already in the shard layout: nothing to do", repo_id)
    return ReshardResult(
        repo_id=repo_id,
        resharded=resharded,
        files_before=files_before,
        files_after=files_after,
        commits=commits,
        card_updated=card_updated,
        left=left,
    )


def _data_files(files: set[str]) -> dict[str, list[str]]:
    """Run -> its Parquet files under ``data/<config>/run=<id>/`` (configs this code knows)."""
    out: dict[str, list[str]] = {}
    for path in sorted(files):
        parts = path.split("/")
        run_id = run_of(path)
        if (
            run_id is not None
            and len(parts) == 4
            and parts[1] in CONFIGS
            and path.endswith(".parquet")
        ):
            out.setdefault(run_id, []).append(path)
    return out


def _is_shard(path: str) -> bool:
    return is_shard_name(path.rsplit("/", 1)[-1])


def _reshard_run(
    api: HfApi, repo_id: str, run_id: str, max_files: int, fail: _Fail
) -> tuple[int, str | None, str]:
    """Run `run_id` as shards, its old files deleted: (commits made, None, progress line),
    or (0, why, progress line) when it is left as it is."""
    head, files = repo_head(api, repo_id, fail)
    paths = _data_files(files).get(run_id, [])
    old = [p for p in paths if not _is_shard(p)]
    shards_there = {p for p in paths if _is_shard(p)}
    if not old:  # a publish of the run came first, since the repo was listed
        return 0, None, f"run {run_id} of {repo_id} is already shards: nothing to do"
    marker = marker_path(run_id)
    named = _read_marker(api, repo_id, marker, head) if marker in files else None
    with tempfile.TemporaryDirectory(prefix="bgmcts-reshard-") as tmp:
        if named is not None and named <= files:  # all shards up: only deletes are left
            keep: Mapping[str, Path | None] = dict.fromkeys(sorted(named))
        else:
            keep = _shards_of(api, repo_id, run_id, head, old, Path(tmp), fail)
        if others := sorted(shards_there - set(keep)):
            why = (
                f"it also holds {len(others)} shards that are not its old files' rows (an "
                "interrupted publish?): publish it again from its run folder"
            )
            return 0, why, f"left run {run_id} of {repo_id} as it is: {why}"
        adds = [
            CommitOperationAdd(p, str(local))
            for p, local in keep.items()
            if p not in files and local is not None
        ]
        deletes: list[CommitOperationDelete] = [CommitOperationDelete(p) for p in old]
        if marker in files:
            deletes.append(CommitOperationDelete(marker))
        message = f"Reshard run {run_id}"
        if len(adds) + len(deletes) <= max_files:  # one commit swaps the run's files
            made = commit_in_chunks(api, repo_id, [*adds, *deletes], message, max_files)
        else:
            # The marker goes up after the last shard and goes away with the last old file.
            if named != set(keep):
                names = json.dumps({"run_id": run_id, "shards": sorted(keep)}, indent=1)
                adds.append(CommitOperationAdd(marker, names.encode()))
                if marker not in files:
                    deletes.append(CommitOperationDelete(marker))
            made = commit_in_chunks(api, repo_id, adds, f"{message}: shards", max_files)
            made += commit_in_chunks(api, repo_id, deletes, f"{message}: old files", max_files)
    line = (
        f"resharded run {run_id} of {repo_id}: {len(paths)} files -> {len(keep)} shards "
        f"({len(made)} commits)"
    )
    return len(made), None, line


def _read_marker(api: HfApi, repo_id: str, marker: str, head: str) -> set[str] | None:
    """The shards a run's marker names (None when it has none)."""
    body = read_repo_file(api, repo_id, marker, head)
    return None if body is None else set(json.loads(body)["shards"])


def _shards_of(
    api: HfApi,
    repo_id: str,
    run_id: str,
    head: str,
    old: Sequence[str],
    tmp: Path,
    fail: _Fail,
) -> dict[str, Path | None]:
    """Repo path -> local shard of run `run_id`'s old files `old`, downloaded into `tmp`."""
    download = tmp / "download"
    api.snapshot_download(
        repo_id,
        repo_type="dataset",
        revision=head,
        local_dir=download,
        allow_patterns=[f"data/*/run={run_id}/*"],
        # the run's shards (of an interrupted reshard) are not read: only its old files are
        ignore_patterns=["*/train-*-of-*.parquet", "*/test-*-of-*.parquet"],
    )
    by_config: dict[str, list[Path]] = {}
    for path in old:
        local = download / path
        if not local.is_file():
            raise fail(f"{repo_id}: {path} listed at {head} but not downloaded")
        by_config.setdefault(path.split("/")[1], []).append(local)
    out: dict[str, Path | None] = {}
    for config, sources in by_config.items():
        try:
            shards = shard_config(config, sources, tmp / "shards")
        except ValueError as err:
            raise fail(f"Cannot reshard run {run_id}'s {config}: {err}") from None
        out.update(shards.repo_paths(data_folder(config, run_id)))
    return out


def _card_configs_commit(api: HfApi, repo_id: str, fail: _Fail) -> bool:
    """Set the card's ``configs:`` to the repo's files, on the head it read (rebuilt when
    another commit came first); False when they already were."""

    def operations(head: str, files: set[str]) -> list[CommitOperationAdd] | None:
        configs = card_configs(files)
        text = read_repo_file(api, repo_id, CARD, head) if CARD in files else None
        if text is None:
            if not configs:
                return None
            name = repo_id.split("/")[-1]
            header = DatasetCardData(pretty_name=name, configs=configs).to_yaml()
            card = DatasetCard(f"---\n{header}\n---\n\n# {name}\n")
        else:
            card = DatasetCard(text.decode("utf-8"))
            if card.data.get("configs") == configs:
                return None
            card.data["configs"] = configs
        return [CommitOperationAdd(CARD, str(card).encode())]

    message = "Reshard: the card's configs"
    info = commit_on_head(api, repo_id, operations, message, fail, what=f"reshard of {repo_id}")
    return info is not None
