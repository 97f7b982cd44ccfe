"""Publishing a run folder: which files go up, each as its train and test rows, with its card.

Two ways in:

* `publish_run_dir` - a finished run folder, local or on a bucket, as it is: its report
  is rewritten from its Parquet and the card's facts come from its manifest and totals
  (`card_info`).  Used right after a run (`publish_configured`: `publish.repo` set in the
  config) and later, on its own, by `python -m jobs.publish --run-dir ...` (the retry
  command a failed publish prints).
* `publish_run` - a local run folder with the card's facts given; the step both end in.

Only counted rows go up: a part without its commit marker (an unfinished batch) and a
problem's rows of a superseded lease generation are left out.  Each local Parquet file goes
up as its non-empty splits (`pipeline.publish.hub` has the repo layout): byte for byte when
all its rows are one split, otherwise rewritten with the same schema and schema metadata.
A table without a ``split`` column (a run written before the split existed) goes up as
train: the ``errors`` table as it is, any other table with a ``split`` column of "train"
appended, so its columns match newer runs' and ``datasets`` can read both as one config.

The token is read only from the environment variable ``token_env``.  A Hub failure leaves
the local Parquet untouched and raises `HubPublishError`, its message ending with the
command that retries the publish.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
from huggingface_hub import HfApi

from common.redact import redact_text
from pipeline.config import RunConfig
from pipeline.problems.decontamination import describe_rule
from pipeline.publish.hub import (
    CONFIGS,
    SPLIT_COLUMN,
    CardInfo,
    HubPublishError,
    PublishResult,
    commit_run,
    report_path,
    retry_command,
)
from pipeline.records.splits import SPLITS
from pipeline.store.filesystem import is_remote, open_store
from pipeline.store.run_folder import RunFolder, local_run_dir

if TYPE_CHECKING:
    from pipeline.run.summary import RunSummary

__all__ = ["card_info", "publish_configured", "publish_run", "publish_run_dir"]

logger = logging.getLogger(__name__)

# Makes the error a step raises: its message ends with the command that retries the publish.
_Fail = Callable[[str], HubPublishError]

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SAMPLE_STR_MAX = 400  # characters of a string shown in the card's sample rows
# The column appended to a table written before the split existed.
_SPLIT_FIELD = pa.field(
    SPLIT_COLUMN,
    pa.string(),
    nullable=False,
    metadata={"description": "train (added when published: the run predates the split)"},
)


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
    return CardInfo(
        config=config,
        models=[m for m in (model("policy"), model("scorer")) if m],
        budget={"B": config.get("budget"), "algorithm": search.get("algorithm")},
        answered_precision=summary.precision,
        report_markdown=next(
            (p.read_text() for p in report if p.name == REPORT_MD and p.is_file()), None
        ),
        report_files=[p for p in report if p.suffix == ".png"],
        decontaminated=dict(summary.contaminated),
        decontamination_rule=decontamination_rule(rule),
    )


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
) -> PublishResult:
    """Push `run_dir`'s Parquet (every record type) to `repo`; raises `HubPublishError`.

    `run_dir` may be a bucket's run (s3://.../run=<id>): its committed parts are read
    through a local copy, and the fresh report is written back next to them.
    """
    from pipeline.report.run_report import REPORT_FILES
    from pipeline.run.summary import refresh_run_report

    source = run_dir if is_remote(str(run_dir)) else None
    with local_run_dir(run_dir, write_back=REPORT_FILES) as local:
        summary, config, report = refresh_run_report(local)
        return publish_run(
            local,
            repo,
            run_id=run_id or summary.run_id,
            token_env=token_env,
            private=private,
            endpoint=endpoint,
            card_info=card_info(config, summary, report),
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
) -> PublishResult:
    """Push ``<run_dir>/<config>/*.parquet`` as run ``run_id`` of dataset repo ``repo_id``,
    each file as its train and test rows (see the module docstring).

    Raises :class:`HubPublishError` (message includes :func:`retry_command`) on any failure.
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
    )

    def fail(reason: str) -> HubPublishError:
        return HubPublishError(f"{reason}\nRetry with: {retry}")

    _check_ids(run_id, repo_id, fail)
    token = _read_token(token_env, fail)
    with tempfile.TemporaryDirectory(prefix="bgmcts-publish-") as workdir:
        data = _data_uploads(run_dir, run_id, Path(workdir), fail)
        report = {report_path(run_id, f.name): Path(f) for f in card_info.report_files}
        added = {**data.files, **report}
        info, deleted = commit_run(
            repo_id,
            run_id,
            added,
            card_info,
            counts=data.split_counts,
            samples=data.samples,
            api=HfApi(endpoint=endpoint, token=token),
            private=private,
            secrets=[token],
            fail=fail,
        )

    return _published(repo_id, run_id, info.commit_url, sorted(added), deleted, data.split_counts)


def _published(
    repo_id: str,
    run_id: str,
    commit_url: str,
    uploaded: list[str],
    deleted: list[str],
    split_counts: dict[str, dict[str, int]],
) -> PublishResult:
    """Log the publish and say what it did (the commit URL without credentials)."""
    commit_url = redact_text(commit_url)  # built from the endpoint (userinfo too)
    logger.info(
        "published run %s to %s (%s): %s",
        run_id,
        repo_id,
        ", ".join(f"{k}={v['train']}+{v['test']} test" for k, v in split_counts.items()),
        commit_url,
    )
    return PublishResult(
        repo_id=repo_id,
        run_id=run_id,
        commit_url=commit_url,
        counts={name: sum(by_split.values()) for name, by_split in split_counts.items()},
        uploaded=uploaded,
        deleted=deleted,
        split_counts=split_counts,
    )


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
    """A run's Parquet as it goes up: each local file as its train and test files."""

    files: dict[str, Path]  # repo path -> local file to upload
    split_counts: dict[str, dict[str, int]]  # config -> split -> rows
    samples: dict[str, dict[str, Any] | None]  # config -> one row for the card (None: no rows)


def _data_uploads(run_dir: Path, run_id: str, workdir: Path, fail: _Fail) -> _DataUploads:
    """The counted local Parquet of every config present, split into train and test files
    (those that need rewriting are written under `workdir`)."""
    local = _local_files(run_dir, workdir / "counted")
    if not any(local.values()):
        raise fail(f"No Parquet files under {run_dir}/<{'|'.join(CONFIGS)}>; nothing to publish.")
    # sft and dpo are always listed (0 rows is news); other configs when the run has them
    present = [name for name, files in local.items() if files or name in ("sft", "dpo")]
    files: dict[str, Path] = {}
    split_counts: dict[str, dict[str, int]] = {n: dict.fromkeys(SPLITS, 0) for n in present}
    for name in present:
        for source in local[name]:
            try:
                pieces = _split_file(name, source, workdir)
            except ValueError as err:
                raise fail(f"Cannot split {name}: {err}") from None
            for split, upload, rows in pieces:
                files[f"data/{name}/run={run_id}/{split}-{source.name}"] = upload
                split_counts[name][split] += rows
    samples = {
        name: _sample_row([f for p, f in files.items() if p.startswith(f"data/{name}/")])
        for name in present
    }
    return _DataUploads(files=files, split_counts=split_counts, samples=samples)


def _local_files(run_dir: Path, into: Path) -> dict[str, list[Path]]:
    """Counted parts only: a part without its commit marker belongs to an unfinished batch,
    and a problem's rows of a superseded lease generation are left out (a part holding
    some is written filtered under `into`: `RunFolder.counted_files`)."""
    folder = RunFolder(open_store(Path(run_dir)), run_id=Path(run_dir).name)
    return {name: folder.counted_files(name, into) for name in CONFIGS}


def _split_file(config: str, source: Path, workdir: Path) -> list[tuple[str, Path, int]]:
    """One local Parquet file as (split, file to upload, rows), non-empty splits only (an
    empty file is an empty train file).  Raises ValueError on a split value other than
    train/test."""
    parquet = pq.ParquetFile(source)
    rows = parquet.metadata.num_rows
    if SPLIT_COLUMN not in parquet.schema_arrow.names:  # written before the split existed
        if config == "errors":
            return [("train", source, rows)]
        table = parquet.read()
        table = table.append_column(_SPLIT_FIELD, pa.array(["train"] * rows, pa.string()))
        return [("train", _write(table, workdir / config / f"train-{source.name}"), rows)]
    column = parquet.read(columns=[SPLIT_COLUMN]).column(SPLIT_COLUMN)
    unknown = set(pc.unique(column).to_pylist()) - set(SPLITS)
    if unknown:
        raise ValueError(
            f"{source}: column {SPLIT_COLUMN!r} holds {sorted(map(repr, unknown))}; "
            f"expected one of {list(SPLITS)}"
        )
    is_test = pc.equal(column, "test")
    tests = int(pc.sum(is_test).as_py() or 0)
    if tests == 0:
        return [("train", source, rows)]
    if tests == rows:
        return [("test", source, rows)]
    table = parquet.read()  # schema and schema metadata come back as written
    return [
        (split, _write(part, workdir / config / f"{split}-{source.name}"), part.num_rows)
        for split, mask in (("train", pc.invert(is_test)), ("test", is_test))
        if (part := table.filter(mask)).num_rows
    ]


def _write(table: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _truncate(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _SAMPLE_STR_MAX:
        return value[:_SAMPLE_STR_MAX] + f"… [{len(value) - _SAMPLE_STR_MAX} more chars]"
    if isinstance(value, Mapping):
        return {str(k): _truncate(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_truncate(v) for v in value]
    return value


def _sample_row(files: Sequence[Path]) -> dict[str, Any] | None:
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=1):
            rows = batch.to_pylist()
            if rows:
                row: dict[str, Any] = _truncate(rows[0])
                return row
    return None
