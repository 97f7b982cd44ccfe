"""Publish a run's Parquet files to a Hugging Face dataset repo.

One dataset repo holds every run; every record type is a config (`CONFIGS`: sft, dpo, prm, kto,
nodes, trees, tree_nodes, errors), its files under ``data/<config>/run=<run_id>/<file>.parquet``.

The README.md dataset card declares each config present in its YAML header with a glob over all
runs, so ``datasets.load_dataset(repo_id, "prm")`` returns the prm rows of every published run.
Re-publishing a run replaces that run's files only: one commit deletes ``data/*/run=<run_id>/*``
and adds the new files (other runs are untouched).

The token is read only from the environment variable ``token_env`` and never written to logs, the
card, or exception messages. A Hub failure leaves the local Parquet untouched and raises
:class:`HubPublishError` whose message ends with the shell command that retries the publish.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]
import yaml  # type: ignore[import-untyped, unused-ignore]
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    DatasetCard,
    DatasetCardData,
    HfApi,
)

from actors.redact import redact_secrets, redact_text, scrub
from pipeline.records import RECORD_TYPES, TRAINING_TYPES
from pipeline.store.filesystem import open_store
from pipeline.store.run_folder import RunFolder

__all__ = [
    "CONFIGS",
    "PAPER_TITLE",
    "CardInfo",
    "HubPublishError",
    "PublishResult",
    "publish_run",
    "redact_secrets",
    "render_card",
    "retry_command",
]

logger = logging.getLogger(__name__)

# Every record type (pipeline.records.RECORD_TYPES), training data first.
CONFIGS: tuple[str, ...] = (
    *TRAINING_TYPES,
    *(name for name in RECORD_TYPES if name not in TRAINING_TYPES),
)
CONFIG_DOCS: Mapping[str, str] = {
    "sft": "TRL prompt-completion rows (`prompt`, `completion`): correct, clean trajectories",
    "dpo": "TRL preference pairs (`prompt`, `chosen`, `rejected`) that share a prefix and "
    "diverge; `pair_type` says where",
    "prm": "TRL stepwise supervision (`prompt`, `completions`, `labels`) plus soft `values`",
    "kto": "TRL unpaired preference rows (`prompt`, `completion`, `label`)",
    "nodes": "every answered node with its trajectory, PRM score and label",
    "trees": "one row per searched problem: answer, tokens, shape, contamination",
    "tree_nodes": "every node of every tree (parent, text, Q, label, tokens, C_used, order)",
    "errors": "problems that failed, and where",
}
PAPER_TITLE = "Budget-Guided Monte Carlo Tree Search for LLM Data Synthesis (BG-MCTS)"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SAMPLE_STR_MAX = 400


class HubPublishError(RuntimeError):
    """Publishing failed; the message names the cause and the command that retries."""


@dataclass(frozen=True)
class CardInfo:
    """What the dataset card says about the run (counts and samples come from the files)."""

    config: Mapping[str, Any] = field(default_factory=dict)
    models: Sequence[str] = ()
    budget: Mapping[str, Any] = field(default_factory=dict)
    answered_precision: float | None = None
    # benchmark -> problems kept out of the training configs (pipeline.problems.decontamination)
    decontaminated: Mapping[str, int] = field(default_factory=dict)
    decontamination_rule: str | None = None
    paper_title: str = PAPER_TITLE
    producer: str = "BG-MCTS (bgmcts-synth)"
    pretty_name: str | None = None
    license: str | None = None
    # The run report (pipeline.report.run_report): its markdown goes into the card, its files
    # (PNGs) are uploaded under reports/run=<run_id>/ and the card links them there.
    report_markdown: str | None = None
    report_files: Sequence[Path] = ()


@dataclass(frozen=True)
class PublishResult:
    repo_id: str
    run_id: str
    commit_url: str
    counts: dict[str, int]
    uploaded: list[str]
    deleted: list[str]


def retry_command(
    run_dir: str | Path,
    repo_id: str,
    run_id: str,
    *,
    token_env: str = "HF_TOKEN",
    endpoint: str | None = None,
    private: bool = True,
) -> str:
    """The shell command that re-runs this publish (``jobs.publish`` CLI) exactly:
    same folder, repo, run id, token variable, endpoint and privacy."""
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
    return shlex.join(parts)


def _local_files(run_dir: Path) -> dict[str, list[Path]]:
    """Committed parts only: a part without its commit marker belongs to an unfinished batch."""
    folder = RunFolder(open_store(Path(run_dir)), run_id=Path(run_dir).name)
    return {name: folder.parts(name) for name in CONFIGS}


def _count_rows(files: Sequence[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


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


def render_card(
    repo_id: str,
    run_id: str,
    card_info: CardInfo,
    *,
    counts: Mapping[str, int],
    samples: Mapping[str, dict[str, Any] | None],
    configs_present: Sequence[str],
    runs_present: Sequence[str],
    secrets: Sequence[str] = (),
) -> str:
    """The README.md dataset card: YAML header with ``configs:`` + a description of the run."""
    card_data = DatasetCardData(
        pretty_name=card_info.pretty_name or repo_id.split("/")[-1],
        license=card_info.license,
        tags=["synthetic", "bg-mcts", "sft", "dpo", "prm", "kto"],
        configs=[
            {
                "config_name": name,
                "data_files": [{"split": "train", "path": f"data/{name}/run=*/*.parquet"}],
            }
            for name in configs_present
        ],
    )
    config_yaml = yaml.safe_dump(
        redact_secrets(dict(card_info.config), secrets), sort_keys=True, allow_unicode=True
    ).rstrip()
    budget_yaml = yaml.safe_dump(
        redact_secrets(dict(card_info.budget), secrets), sort_keys=True, allow_unicode=True
    ).rstrip()
    precision = (
        "n/a" if card_info.answered_precision is None else f"{card_info.answered_precision:.4f}"
    )
    decontaminated = sum(card_info.decontaminated.values())
    by_benchmark = ", ".join(f"{k}: {v}" for k, v in sorted(card_info.decontaminated.items()))
    lines = [
        f"# {card_data.pretty_name}",
        "",
        f"Synthetic training data (SFT, DPO, PRM, KTO) and full search trees produced by "
        f"{card_info.producer}, the method of *{card_info.paper_title}*.",
        "",
        "Load it with:",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        *(
            f'{name} = load_dataset("{repo_id}", "{name}", split="train")'
            for name in configs_present
        ),
        "```",
        "",
        "Each run lives under `data/<config>/run=<run_id>/`; the configs glob over all runs.",
        "",
        "| config | what |",
        "| --- | --- |",
        *(f"| {name} | {CONFIG_DOCS.get(name, '')} |" for name in configs_present),
        "",
        "## Runs in this repo",
        "",
        *(f"- `{r}`" for r in runs_present),
        "",
        f"## Latest published run: `{run_id}`",
        "",
        "| config | rows |",
        "| --- | --- |",
        *(f"| {name} | {counts.get(name, 0)} |" for name in CONFIGS if name in counts),
        "",
        f"Precision of answered nodes: {precision}",
        "",
        f"Decontaminated problems (searched, kept out of sft/dpo/prm/kto): {decontaminated}"
        + (f" ({by_benchmark})" if by_benchmark else ""),
        "",
        *([card_info.decontamination_rule, ""] if card_info.decontamination_rule else []),
        "Models: " + (", ".join(f"`{m}`" for m in card_info.models) or "n/a"),
        "",
        "### Budget",
        "",
        "```yaml",
        budget_yaml if card_info.budget else "{}",
        "```",
        "",
        "### Config (secrets removed)",
        "",
        "```yaml",
        config_yaml if card_info.config else "{}",
        "```",
        "",
        "### Sample rows",
        "",
    ]
    for name in CONFIGS:
        if name not in samples:
            continue
        sample = samples.get(name)
        lines += [f"**{name}**", ""]
        if sample is None:
            lines += ["(no rows)", ""]
        else:
            lines += ["```json", json.dumps(sample, ensure_ascii=False, indent=2), "```", ""]
    if card_info.report_markdown:
        lines += _report_section(card_info.report_markdown, run_id)
    body = scrub(redact_text("\n".join(lines)), secrets)
    card = DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n{body}")
    return str(card)


_IMAGE = re.compile(r"\]\(([\w.-]+\.png)\)")


def report_path(run_id: str, name: str) -> str:
    return f"reports/run={run_id}/{name}"


def _report_section(markdown: str, run_id: str) -> list[str]:
    """The run report one heading level down, its images linked where they are uploaded."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("#"):
            line = "#" + line
        out.append(_IMAGE.sub(lambda m: f"]({report_path(run_id, m[1])})", line))
    return ["", *out, ""]


def _run_of(path: str) -> str | None:
    parts = path.split("/")
    if len(parts) >= 4 and parts[0] == "data" and parts[2].startswith("run="):
        return parts[2][len("run=") :]
    return None


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
    """Push ``<run_dir>/<config>/*.parquet`` as run ``run_id`` of dataset repo ``repo_id``.

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

    if not _RUN_ID.match(run_id):
        raise fail(f"Invalid run id {run_id!r}: use letters, digits, '.', '_' or '-'.")
    if repo_id.count("/") != 1:
        raise fail(f"Invalid repo id {repo_id!r}: expected '<namespace>/<name>'.")
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise fail(
            f"No Hugging Face token: set the environment variable {token_env} "
            "to a token with write access."
        )
    secrets = [token]

    local = _local_files(run_dir)
    if not any(local.values()):
        raise fail(f"No Parquet files under {run_dir}/<{'|'.join(CONFIGS)}>; nothing to publish.")
    # sft and dpo are always listed (0 rows is news); other configs when the run has them
    present = {name: files for name, files in local.items() if files or name in ("sft", "dpo")}
    counts = {name: _count_rows(files) for name, files in present.items()}
    samples = {name: _sample_row(files) for name, files in present.items()}

    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        existing = api.list_repo_files(repo_id, repo_type="dataset")
        prefixes = (
            *(f"data/{name}/run={run_id}/" for name in CONFIGS),
            report_path(run_id, ""),
        )
        added = {
            f"data/{name}/run={run_id}/{f.name}": f for name, files in local.items() for f in files
        }
        added.update({report_path(run_id, f.name): Path(f) for f in card_info.report_files})
        # Files re-added under the same path are overwritten, not deleted (as upload_folder does).
        deleted = sorted(p for p in existing if p.startswith(prefixes) and p not in added)
        after = (set(existing) - set(deleted)) | set(added)
        configs_present = [n for n in CONFIGS if any(p.startswith(f"data/{n}/") for p in after)]
        runs_present = sorted({r for p in after if (r := _run_of(p)) is not None})
        card = render_card(
            repo_id,
            run_id,
            card_info,
            counts=counts,
            samples=samples,
            configs_present=configs_present,
            runs_present=runs_present,
            secrets=secrets,
        )
        operations: list[CommitOperationAdd | CommitOperationDelete] = [
            CommitOperationDelete(path_in_repo=p) for p in deleted
        ]
        operations += [
            CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(f)) for p, f in added.items()
        ]
        operations.append(
            CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode())
        )
        info = api.create_commit(
            repo_id,
            operations,
            commit_message=f"Publish run {run_id}",
            repo_type="dataset",
        )
    except Exception as err:
        detail = scrub(f"{type(err).__name__}: {err}", secrets)
        # `from None`: the chained HTTP error carries request objects (headers included).
        raise fail(f"Publishing run {run_id} to {repo_id} failed: {detail}") from None

    logger.info(
        "published run %s to %s (%s): %s",
        run_id,
        repo_id,
        ", ".join(f"{k}={v}" for k, v in counts.items()),
        info.commit_url,
    )
    return PublishResult(
        repo_id=repo_id,
        run_id=run_id,
        commit_url=str(info.commit_url),
        counts=counts,
        uploaded=sorted(added),
        deleted=deleted,
    )
