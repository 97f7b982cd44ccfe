"""Publishing a run folder: which files go up, each as its train and test rows, with its card.

Two ways in:

* `publish_run_dir` - a finished run folder, local or on a bucket, as it is: its report
  is rewritten from its Parquet and the card's facts come from its manifest and totals
  (`card_info`).  Used right after a run (`publish_configured`: `publish.repo` set in the
  config) and later, on its own, by `python -m jobs.publish --run-dir ...` (the retry
  command a failed publish prints).
* `publish_run` - a local run folder with the card's facts given; the step both end in.

Only counted rows go up: a part without its commit marker (an unfinished batch) and a
problem's rows of a superseded lease generation are left out.  They go up as a few shards
per config and split (`pipeline.publish.shards`), in commits of at most 100 files with the
card last (`pipeline.publish.hub.commit_run`); an interrupted publish, run again, uploads
only what is missing.

The token is read only from the environment variable ``token_env``.  A Hub failure leaves
the local Parquet untouched and raises `HubPublishError`, its message ending with the
command that retries the publish.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import HfApi

from pipeline.config import RunConfig
from pipeline.problems.decontamination import describe_rule
from pipeline.publish.card import CardInfo
from pipeline.publish.hub import (
    MAX_FILES_PER_COMMIT,
    HubPublishError,
    PublishResult,
    RunUpload,
    commit_run,
    retry_command,
)
from pipeline.publish.layout import CONFIGS, data_folder, report_path
from pipeline.publish.shards import shard_config
from pipeline.records.splits import SPLITS
from pipeline.store.filesystem import is_remote, open_store
from pipeline.store.parts import UnreadablePart
from pipeline.store.run_folder import RunFolder, local_run_dir

if TYPE_CHECKING:
    from pipeline.run.summary import RunSummary

__all__ = ["card_info", "publish_configured", "publish_run", "publish_run_dir"]

logger = logging.getLogger(__name__)

# Makes the error a step raises: its message ends with the command that retries the publish.
_Fail = Callable[[str], HubPublishError]

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A problem source that names a Hub dataset (namespace/name), for the card's source_datasets.
_HUB_DATASET_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def card_info(config: dict[str, Any], summary: RunSummary, report: Sequence[Path] = ()) -> CardInfo:
    """What the dataset card states, from a (redacted) config dump and the run's totals."""
    # The report package (and its matplotlib) is imported only by the functions that read a
    # whole run folder: `publish_run` alone runs where only the data libraries are installed
    # (TRL's venv publishes a run to the test Hub with it).
    from pipeline.report.run_report import REPORT_MD

    def model(service: str) -> str | None:
        engine = (config.get(service) or {}).get("engine") or {}
        value = engine.get("model")
        return None if value is None else str(value)

    search = config.get("search") or {}
    rule = ((config.get("records") or {}).get("decontamination")) or {}
    publish = config.get("publish") or {}
    return CardInfo(
        config=config,
        license=publish.get("license"),
        language=tuple(publish.get("language") or ("en",)),
        source_dataset=source_dataset(config.get("source") or {}),
        models=list(dict.fromkeys(m for m in (model("policy"), model("scorer")) if m)),
        budget={"B": config.get("budget"), "algorithm": search.get("algorithm")},
        answered_precision=summary.precision,
        report_markdown=next(
            (p.read_text() for p in report if p.name == REPORT_MD and p.is_file()), None
        ),
        report_files=[p for p in report if p.suffix == ".png"],
        decontaminated=dict(summary.contaminated),
        decontamination_rule=decontamination_rule(rule),
    )


def source_dataset(source: dict[str, Any]) -> str | None:
    """The Hub dataset a run's problems came from (a config dump's `source`), if any."""
    name = source.get("name")
    if source.get("kind") != "hf" or not isinstance(name, str):
        return None
    return name if _HUB_DATASET_ID.match(name) and not Path(name).exists() else None


def decontamination_rule(rule: dict[str, Any]) -> str | None:
    """One sentence on how the run was decontaminated (from its config dump)."""
    return describe_rule(rule) if rule else None


def publish_run_dir(
    run_dir: str | Path,
    repo: str,
    *,
    run_id: str | None = None,
    token_env: str = "HF_TOKEN",
    private: bool = True,
    endpoint: str | None = None,
    license: str | None = None,
) -> PublishResult:
    """Push `run_dir`'s Parquet (every record type) to `repo`; raises `HubPublishError`.

    `run_dir` may be a bucket's run (s3://.../run=<id>): its committed parts are read
    through a local copy, and the fresh report is written back next to them.  `license`:
    the card's license in place of the run config's ``publish.license``.
    """
    from pipeline.report.run_report import REPORT_FILES
    from pipeline.run.summary import refresh_run_report

    source = run_dir if is_remote(str(run_dir)) else None
    with local_run_dir(run_dir, write_back=REPORT_FILES) as local:
        summary, config, report = refresh_run_report(local)
        info = card_info(config, summary, report)
        if license is not None:
            info = dataclasses.replace(info, license=license)
        return publish_run(
            local,
            repo,
            run_id=run_id or summary.run_id,
            token_env=token_env,
            private=private,
            endpoint=endpoint,
            card_info=info,
            source_dir=source,
        )


def publish_configured(config: RunConfig, run_dir: Path | str) -> PublishResult:
    """Publish a run the way its config's `publish` section says."""
    publish = config.publish
    if publish.repo is None:
        raise ValueError("publish.repo is not set")
    return publish_run_dir(
        run_dir,
        publish.repo,
        run_id=config.resolved_run_id,
        token_env=publish.token_env,
        private=publish.private,
        endpoint=publish.endpoint,
    )


def publish_run(
    local_run_dir: str | Path,
    repo_id: str,
    *,
    run_id: str,
    token_env: str = "HF_TOKEN",
    private: bool = True,
    endpoint: str | None = None,
    card_info: CardInfo,
    source_dir: str | Path | None = None,
    max_files_per_commit: int = MAX_FILES_PER_COMMIT,
) -> PublishResult:
    """Push ``<run_dir>/<config>/*.parquet`` as run ``run_id`` of dataset repo ``repo_id``,
    as shards per config and split (see the module docstring).

    Raises :class:`HubPublishError` (message includes :func:`retry_command`) on any failure
    of the upload, and `UnreadablePart` (naming it) for a part that cannot be read.
    Local files are only read.  `source_dir`: where the run really lives when
    `local_run_dir` is a local copy of a bucket's run (the retry command names it).
    """
    run_dir = Path(local_run_dir)
    retry = retry_command(
        source_dir or run_dir,
        repo_id,
        run_id,
        token_env=token_env,
        endpoint=endpoint,
        private=private,
        license=card_info.license,
    )

    def fail(reason: str) -> HubPublishError:
        return HubPublishError(f"{reason}\nRetry with: {retry}")

    _check_ids(run_id, repo_id, fail)
    token = _read_token(token_env, fail)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bgmcts-publish-") as workdir:
        data = _data_uploads(run_dir, run_id, Path(workdir), fail)
        upload = RunUpload(
            run_id=run_id,
            data=data.files,
            report={report_path(run_id, f.name): Path(f) for f in card_info.report_files},
            counts=data.split_counts,
            samples=data.samples,
            card_info=card_info,
        )
        result = commit_run(
            repo_id,
            upload,
            api=HfApi(endpoint=endpoint, token=token),
            private=private,
            secrets=[token],
            fail=fail,
            max_files=max_files_per_commit,
        )
    result = dataclasses.replace(result, seconds=time.monotonic() - start)
    logger.info(
        "published run %s to %s (%s) in %d commits: %s",
        run_id,
        repo_id,
        ", ".join(f"{k}={v['train']}+{v['test']} test" for k, v in result.split_counts.items()),
        result.commits,
        result.commit_url,
    )
    return result


def _check_ids(run_id: str, repo_id: str, fail: _Fail) -> None:
    """Bad ids fail before any request (the run id becomes a repo folder name)."""
    if not _RUN_ID.match(run_id):
        raise fail(f"Invalid run id {run_id!r}: use letters, digits, '.', '_' or '-'.")
    if repo_id.count("/") != 1:
        raise fail(f"Invalid repo id {repo_id!r}: expected '<namespace>/<name>'.")


def _read_token(token_env: str, fail: _Fail) -> str:
    """The Hub token, read only from the environment variable `token_env`."""
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise fail(
            f"No Hugging Face token: set the environment variable {token_env} "
            "to a token with write access."
        )
    return token


@dataclass(frozen=True)
class _DataUploads:
    """A run's Parquet as it goes up: shards per config and split."""

    files: dict[str, Path]  # repo path -> local shard to upload
    split_counts: dict[str, dict[str, int]]  # config -> split -> rows
    samples: dict[str, dict[str, Any] | None]  # config -> one row for the card (None: no rows)


def _data_uploads(run_dir: Path, run_id: str, workdir: Path, fail: _Fail) -> _DataUploads:
    """The counted local Parquet of every config present, as shards written under
    `workdir`."""
    local = _local_files(run_dir, workdir / "counted")
    if not any(local.values()):
        raise fail(f"No Parquet files under {run_dir}/<{'|'.join(CONFIGS)}>; nothing to publish.")
    # sft and dpo are always listed (0 rows is news); other configs when the run has them
    present = [name for name, files in local.items() if files or name in ("sft", "dpo")]
    files: dict[str, Path] = {}
    split_counts: dict[str, dict[str, int]] = {}
    samples: dict[str, dict[str, Any] | None] = {}
    for name in present:
        try:
            shards = shard_config(name, local[name], workdir / "shards")
        except UnreadablePart:
            raise  # a damaged part: no retry of the upload mends it (exit 2, naming it)
        except ValueError as err:
            raise fail(f"Cannot split {name}: {err}") from None
        files.update(shards.repo_paths(data_folder(name, run_id)))
        split_counts[name] = {split: shards.rows[split] for split in SPLITS}
        samples[name] = shards.sample
    return _DataUploads(files=files, split_counts=split_counts, samples=samples)


def _local_files(run_dir: Path, into: Path) -> dict[str, list[Path]]:
    """Counted parts only: a part without its commit marker belongs to an unfinished batch,
    and a problem's rows of a superseded lease generation are left out (a part holding
    some is written filtered under `into`: `RunFolder.counted_files`)."""
    folder = RunFolder(open_store(Path(run_dir)), run_id=Path(run_dir).name)
    return {name: folder.counted_files(name, into) for name in CONFIGS}
