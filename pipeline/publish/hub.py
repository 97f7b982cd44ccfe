"""Putting a run into the dataset repo: a sequence of small commits, the card last.

`pipeline.publish.layout` has the repo layout, `pipeline.publish.shards` the shards a run
goes up as, `pipeline.publish.card` the dataset card.  `commit_run` makes one run's files
in the repo exactly the given ones:

1. **Data commits.**  The shards the repo does not hold yet go up, at most
   `MAX_FILES_PER_COMMIT` files per commit (the Hub recommends under 100 files per commit).
   A shard's name carries its content's digest, so a shard already in the repo under its
   name is the same bytes and is skipped: a publish that was interrupted resumes where it
   stopped, and a re-publish of an unchanged run uploads no data.
2. **Delete commits.**  The run's other files (an earlier version of it, or shards of an
   interrupted publish of other rows) are deleted, at most `MAX_FILES_PER_COMMIT` per
   commit.  Other runs are never touched.
3. **The card commit, last.**  The card, ``runs.json`` and the run report's figures, built
   from the repo as it is at its head, committed with that head as ``parent_commit``: if
   another publish committed in between, the Hub refuses the commit (412) and it is rebuilt
   on the new head, so two publishes at once never drop each other's runs from the card.

When everything fits in one commit (a night of 500 problems is about 25 files), the three
are one commit, so the repo is never seen half published.  A larger publish shows its new
shards (and, for a re-publish, the old ones too) between its first commit and its last; the
card commit ends that.

The token never reaches logs, the card, or exception messages.  A Hub failure raises
:class:`HubPublishError` whose message ends with the shell command that retries the
publish (`retry_command`).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

from common.redact import redact_text, scrub
from pipeline.publish.card import CardInfo, render_card
from pipeline.publish.layout import CARD, CONFIGS, RUN_INDEX, card_configs, run_of, run_prefixes
from pipeline.publish.run_index import dump_index, index_entry, merge_index, parse_index

__all__ = [
    "CONFIGS",
    "MAX_FILES_PER_COMMIT",
    "CardInfo",
    "HubPublishError",
    "PublishResult",
    "RunUpload",
    "card_configs",
    "commit_in_chunks",
    "commit_run",
    "hub_errors",
    "retry_command",
]

logger = logging.getLogger(__name__)

MAX_FILES_PER_COMMIT = 100
# Another publish committed between this one's read of the head and its card commit: each
# retry rebuilds the card on the new head; this many lost races in a row is a real fault.
_CARD_ATTEMPTS = 10
_Operation = CommitOperationAdd | CommitOperationDelete
_NO_LICENSE = (
    "{repo} {why} and publish.license is not set: a public dataset must say its license "
    "(set publish.license to a Hub license id, e.g. apache-2.0 or cc-by-4.0)."
)


class HubPublishError(RuntimeError):
    """Publishing failed; the message names the cause and the command that retries."""


# Makes the error a step raises: its message ends with the command that retries.
_Fail = Callable[[str], HubPublishError]


@dataclass(frozen=True)
class PublishResult:
    repo_id: str
    run_id: str
    commit_url: str
    counts: dict[str, int]  # config -> rows of this run (train + test)
    uploaded: list[str]
    deleted: list[str]
    split_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # config -> split -> rows
    commits: int = 0  # commits this publish made (0: the repo already held all of it)
    skipped: list[str] = field(default_factory=list)  # shards already in the repo
    seconds: float = 0.0  # from the shards' writing to the card's commit

    def summary(self) -> str:
        """The line a job prints: where, how many commits and files, how long."""
        return (
            f"published to {self.repo_id} in {self.seconds:.1f} s ({self.commits} "
            f"commit{'' if self.commits == 1 else 's'}, "
            f"{len(self.uploaded)} files uploaded, {len(self.skipped)} already there, "
            f"{len(self.deleted)} deleted): {self.commit_url}"
        )


@dataclass(frozen=True)
class RunUpload:
    """One run as it goes up: its data shards, its report files and the card's facts."""

    run_id: str
    data: Mapping[str, Path]  # repo path -> local shard (names carry a content digest)
    report: Mapping[str, Path]  # repo path -> local figure (re-added with the card)
    counts: Mapping[str, Mapping[str, int]]  # config -> split -> rows
    samples: Mapping[str, dict[str, Any] | None]
    card_info: CardInfo


def retry_command(
    run_dir: str | Path,
    repo_id: str,
    run_id: str,
    *,
    token_env: str = "HF_TOKEN",
    endpoint: str | None = None,
    private: bool = True,
    license: str | None = None,
) -> str:
    """The shell command that re-runs this publish (``jobs.publish`` CLI) exactly:
    same folder, repo, run id, token variable, endpoint, privacy and license."""
    parts = [
        "python",
        "-m",
        "jobs.publish",
        "--run-dir",
        str(run_dir),
        "--repo",
        repo_id,
        "--run-id",
        run_id,
        "--token-env",
        token_env,
    ]
    if endpoint is not None:  # without it a retry would push to the public Hub
        parts += ["--endpoint", redact_text(endpoint)]
    if not private:
        parts.append("--public")
    if license is not None:
        parts += ["--license", license]
    return shlex.join(parts)


@dataclass
class _Progress:
    """What a publish has done so far (for its result and its log lines)."""

    commits: list[Any] = field(default_factory=list)  # CommitInfo of each commit made
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def commit_run(
    repo_id: str,
    upload: RunUpload,
    *,
    api: HfApi,
    private: bool,
    secrets: Sequence[str],
    fail: Callable[[str], HubPublishError],
    max_files: int = MAX_FILES_PER_COMMIT,
) -> PublishResult:
    """Make run `upload.run_id`'s files in `repo_id` exactly `upload`'s, card last (see
    the module docstring).  Any failure is `fail`'s `HubPublishError`, its message
    scrubbed of `secrets` and URL credentials; what was committed before it stays, and
    the same publish run again resumes from there."""
    if max_files < 4:
        raise ValueError(f"max_files={max_files}: a card commit needs room for 4 files")
    run_id = upload.run_id
    if not private and not upload.card_info.license:
        raise fail(_NO_LICENSE.format(repo=repo_id, why="would be created public"))
    progress = _Progress()
    with hub_errors(f"Publishing run {run_id} to {repo_id} failed", secrets, fail):
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        public = not api.repo_info(repo_id, repo_type="dataset").private
        if public and not upload.card_info.license:
            raise fail(_NO_LICENSE.format(repo=repo_id, why="is public"))
        existing = set(api.list_repo_files(repo_id, repo_type="dataset"))
        pending = {p: f for p, f in upload.data.items() if p not in existing}
        progress.skipped = sorted(set(upload.data) - set(pending))
        stale = _stale(existing, run_id, upload)
        room = max_files - 2 - len(upload.report)  # the card and runs.json go in the last one
        if len(pending) + len(stale) > room:  # too many for one commit: data, deletes, card
            adds = [CommitOperationAdd(p, str(pending[p])) for p in sorted(pending)]
            message = f"Publish run {run_id}: data"
            progress.commits += commit_in_chunks(api, repo_id, adds, message, max_files)
            progress.uploaded += sorted(pending)
            deletes = [CommitOperationDelete(p) for p in stale]
            message = f"Publish run {run_id}: old files"
            progress.commits += commit_in_chunks(api, repo_id, deletes, message, max_files)
            progress.deleted += stale
            pending, stale = {}, []
        _card_commit(api, repo_id, upload, pending, stale, secrets, progress, fail)
        progress.uploaded += sorted(pending)
        progress.deleted += stale
    counts = upload.counts
    return PublishResult(
        repo_id=repo_id,
        run_id=run_id,
        commit_url=redact_text(progress.commits[-1].commit_url),
        counts={name: sum(by_split.values()) for name, by_split in counts.items()},
        uploaded=sorted(progress.uploaded),
        deleted=sorted(progress.deleted),
        split_counts={name: dict(by_split) for name, by_split in counts.items()},
        commits=len(progress.commits),
        skipped=progress.skipped,
    )


def _stale(existing: set[str], run_id: str, upload: RunUpload) -> list[str]:
    """The run's files in the repo that are not part of this upload."""
    keep = set(upload.data) | set(upload.report)
    return sorted(p for p in existing if p.startswith(run_prefixes(run_id)) and p not in keep)


def _card_commit(
    api: HfApi,
    repo_id: str,
    upload: RunUpload,
    adds: Mapping[str, Path],
    deletes: Sequence[str],
    secrets: Sequence[str],
    progress: _Progress,
    fail: Callable[[str], HubPublishError],
) -> None:
    """The last commit: the card and runs.json built on the repo's head (with `adds` and
    `deletes`, when they fit in the same commit), rebuilt on a newer head when another
    commit came first."""
    run_id = upload.run_id

    def operations(head: str, files: set[str]) -> list[_Operation]:
        after = sorted((files - set(deletes)) | set(adds) | set(upload.report))
        entries = read_repo_file(api, repo_id, RUN_INDEX, head)
        runs = merge_index(
            parse_index(entries),
            index_entry(
                run_id,
                upload.counts,
                models=upload.card_info.models,
                source=upload.card_info.source_dataset,
                precision=upload.card_info.answered_precision,
            ),
            runs_present={r for p in after if (r := run_of(p)) is not None},
        )
        card = render_card(
            repo_id,
            run_id,
            upload.card_info,
            counts=upload.counts,
            samples=upload.samples,
            repo_files=after,
            runs=runs,
            secrets=secrets,
        )
        ops: list[_Operation] = [CommitOperationDelete(p) for p in deletes]
        ops += [CommitOperationAdd(p, str(f)) for p, f in {**adds, **upload.report}.items()]
        return [
            *ops,
            CommitOperationAdd(RUN_INDEX, dump_index(runs)),
            CommitOperationAdd(CARD, card.encode()),
        ]

    info = commit_on_head(
        api, repo_id, operations, f"Publish run {run_id}", fail, what=f"publish of run {run_id}"
    )
    if info is not None:
        progress.commits.append(info)


def repo_head(
    api: HfApi, repo_id: str, fail: Callable[[str], HubPublishError]
) -> tuple[str, set[str]]:
    """The repo's head commit and its files at that commit."""
    head = api.repo_info(repo_id, repo_type="dataset").sha
    if head is None:
        raise fail(f"{repo_id}: the Hub did not say which commit its main branch is at")
    return head, set(api.list_repo_files(repo_id, repo_type="dataset", revision=head))


def read_repo_file(api: HfApi, repo_id: str, path: str, revision: str) -> bytes | None:
    """One small file of the repo at `revision` (None when it has none)."""
    with tempfile.TemporaryDirectory(prefix="bgmcts-hub-") as tmp:
        try:
            local = api.hf_hub_download(
                repo_id, path, repo_type="dataset", revision=revision, cache_dir=tmp
            )
        except EntryNotFoundError:
            return None
        return Path(local).read_bytes()


def commit_on_head(
    api: HfApi,
    repo_id: str,
    build: Callable[[str, set[str]], Sequence[_Operation] | None],
    message: str,
    fail: Callable[[str], HubPublishError],
    *,
    what: str,
) -> Any:
    """Commit `build(head, files)` with the head it read as ``parent_commit``; when another
    commit came first the Hub refuses it (412) and it is built again on the new head.
    `build` returning None: nothing to commit (returns None)."""
    for _ in range(_CARD_ATTEMPTS):
        head, files = repo_head(api, repo_id, fail)
        operations = build(head, files)
        if operations is None:
            return None
        try:
            info = api.create_commit(
                repo_id,
                list(operations),
                commit_message=message,
                repo_type="dataset",
                parent_commit=head,
            )
        except HfHubHTTPError as err:
            if err.response is None or err.response.status_code != 412:
                raise
            logger.info("%s: the repo moved on; building its last commit again", what)
            continue
        logger.info("%s: %d files (%s)", message, len(operations), redact_text(info.commit_url))
        return info
    raise fail(
        f"{what} of {repo_id}: {_CARD_ATTEMPTS} other commits came between reading the repo "
        "and writing its card; try again when the other publishes are done."
    )


def _commit(
    api: HfApi,
    repo_id: str,
    operations: Sequence[_Operation],
    message: str,
    progress: _Progress,
) -> None:
    info = api.create_commit(repo_id, list(operations), commit_message=message, repo_type="dataset")
    progress.commits.append(info)
    logger.info("%s: %d files (%s)", message, len(operations), redact_text(info.commit_url))


def commit_in_chunks(
    api: HfApi,
    repo_id: str,
    operations: Sequence[_Operation],
    message: str,
    max_files: int = MAX_FILES_PER_COMMIT,
) -> list[Any]:
    """`operations` in order, in commits of at most `max_files` files each (steps 1 and 2
    of the module docstring); the CommitInfo of each commit made.  The caller orders them:
    a file listed last goes up in the last commit."""
    progress = _Progress()
    for start in range(0, len(operations), max_files):
        _commit(api, repo_id, operations[start : start + max_files], message, progress)
    return progress.commits


@contextlib.contextmanager
def hub_errors(
    what: str, secrets: Sequence[str], fail: Callable[[str], HubPublishError]
) -> Iterator[None]:
    """Any error but our own `HubPublishError` becomes one naming `what` and the cause."""
    try:
        yield
    except HubPublishError:
        raise
    except Exception as err:
        # HTTP errors quote the URL they called: the endpoint's userinfo, signed query values
        detail = scrub(redact_text(f"{type(err).__name__}: {err}"), secrets)
        # `from None`: the chained HTTP error carries request objects (headers included).
        raise fail(f"{what}: {detail}") from None
