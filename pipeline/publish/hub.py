"""The dataset repo on the Hugging Face Hub: its layout, its card, and the commit of a run.

One dataset repo holds every run; every record type is a config (`CONFIGS`: the training types
first, then nodes, trees, tree_nodes, errors). A run's rows are split by problem: each local
Parquet file ``<run_dir>/<config>/<file>.parquet`` goes up as
``data/<config>/run=<run_id>/train-<file>.parquet`` (its rows whose ``split`` column is "train")
and ``data/<config>/run=<run_id>/test-<file>.parquet`` (its "test" rows); the run report's
figures go up under ``reports/run=<run_id>/``.  Which files, and how a local file becomes its
train and test files, is `pipeline.publish.publish_run`.

The README.md dataset card declares each config present in its YAML header: split ``train``
globs ``data/<config>/run=*/train-*.parquet`` and split ``test`` globs
``data/<config>/run=*/test-*.parquet`` (listed only when the repo holds a test file of that
config: a glob that matches nothing makes ``datasets`` fail). Runs published before the split
(files without the prefix) are listed in their config's ``train`` split one run folder each,
``data/<config>/run=<run_id>/*.parquet``, after the ``train-*`` glob (``datasets`` takes the
columns from the first file, so it reads their missing ``split`` as null), until they are
re-published. ``sft`` (else the first training config present) is marked ``default: true``,
so ``datasets.load_dataset(repo_id)`` returns its train and test splits, and
``load_dataset(repo_id, "prm", split="test")`` the held-out prm rows of every published run.

Re-publishing a run replaces that run's files only: one commit (`commit_run`) deletes
``data/*/run=<run_id>/*`` and adds the new files (other runs are untouched).

The token never reaches logs, the card, or exception messages. A Hub failure raises
:class:`HubPublishError` whose message ends with the shell command that retries the publish
(`retry_command`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    DatasetCard,
    DatasetCardData,
    HfApi,
)

from common.redact import redact_secrets, redact_text, scrub
from pipeline.records import RECORD_TYPES, TRAINING_TYPES
from pipeline.records.splits import SPLITS

__all__ = [
    "CONFIGS",
    "PAPER_TITLE",
    "SPLIT_COLUMN",
    "CardInfo",
    "HubPublishError",
    "PublishResult",
    "card_configs",
    "commit_run",
    "default_config",
    "render_card",
    "report_path",
    "retry_command",
]


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
    "step_dpo": "step-level preference pairs (`prompt`, `initial_reason_steps`, `chosen`, "
    "`rejected`, `full_chosen`, `full_rejected`, `answer`) as Step-DPO publishes them",
}
# The column that names a row's split (pipeline.records.splits); `errors` rows have none.
SPLIT_COLUMN = "split"
PAPER_TITLE = "Budget-Guided Monte Carlo Tree Search for LLM Data Synthesis (BG-MCTS)"


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
    counts: dict[str, int]  # config -> rows of this run (train + test)
    uploaded: list[str]
    deleted: list[str]
    split_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # config -> split -> rows


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


def _repo_file(path: str) -> tuple[str, str, str] | None:
    """(config, run folder, split) of a repo data file; split "" for a file published
    before the split (no train-/test- prefix)."""
    parts = path.split("/")
    if (
        len(parts) != 4
        or parts[0] != "data"
        or parts[1] not in CONFIGS
        or not parts[2].startswith("run=")
        or not parts[3].endswith(".parquet")
    ):
        return None
    split = next((s for s in SPLITS if parts[3].startswith(f"{s}-")), "")
    return parts[1], parts[2], split


def default_config(configs_present: Sequence[str]) -> str | None:
    """The config ``load_dataset(repo_id)`` loads: sft, else the first training config
    present, else the first config present."""
    for name in ("sft", *TRAINING_TYPES, *configs_present):
        if name in configs_present:
            return name
    return None


def card_configs(repo_files: Iterable[str]) -> list[dict[str, Any]]:
    """The card's YAML ``configs:`` for the files a repo holds (see the module docstring)."""
    found: dict[str, dict[str, set[str]]] = {}  # config -> split ("" = before the split) -> runs
    for path in repo_files:
        if (parsed := _repo_file(path)) is not None:
            config, run_folder, split = parsed
            found.setdefault(config, {}).setdefault(split, set()).add(run_folder)
    present = [name for name in CONFIGS if name in found]
    default = default_config(present)
    configs = []
    for name in present:
        splits = found[name]
        train = [f"data/{name}/run=*/train-*.parquet"] if "train" in splits else []
        train += [f"data/{name}/{run}/*.parquet" for run in sorted(splits.get("", ()))]
        data_files: list[dict[str, Any]] = []
        if train:
            data_files.append({"split": "train", "path": train[0] if len(train) == 1 else train})
        if "test" in splits:
            data_files.append({"split": "test", "path": f"data/{name}/run=*/test-*.parquet"})
        entry: dict[str, Any] = {"config_name": name, "data_files": data_files}
        if name == default:
            entry["default"] = True
        configs.append(entry)
    return configs


def render_card(
    repo_id: str,
    run_id: str,
    card_info: CardInfo,
    *,
    counts: Mapping[str, Mapping[str, int]],
    samples: Mapping[str, dict[str, Any] | None],
    repo_files: Sequence[str],
    secrets: Sequence[str] = (),
) -> str:
    """The README.md dataset card for a repo holding `repo_files` after this publish: YAML
    header with ``configs:`` (`card_configs`) + a description of run `run_id`, whose rows per
    config and split are `counts`."""
    configs = card_configs(repo_files)
    # config -> its split names, in the card's config order
    splits = {c["config_name"]: [f["split"] for f in c["data_files"]] for c in configs}
    title = card_info.pretty_name or repo_id.split("/")[-1]
    card_data = DatasetCardData(
        pretty_name=title,
        license=card_info.license,
        tags=["synthetic", "bg-mcts", "sft", "dpo", "prm", "kto"],
        configs=configs,
    )
    lines = [
        *_introduction(title, card_info),
        *_loading_example(repo_id, splits),
        *_layout_and_splits(card_info, splits),
        *_runs_in_repo(repo_files),
        *_run_facts(run_id, card_info, counts, secrets),
        *_sample_rows(samples),
    ]
    if card_info.report_markdown:
        lines += _report_section(card_info.report_markdown, run_id)
    body = scrub(redact_text("\n".join(lines)), secrets)
    card = DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n{body}")
    return str(card)


def _introduction(title: str, card_info: CardInfo) -> list[str]:
    """The card's title and what the data is."""
    return [
        f"# {title}",
        "",
        f"Synthetic training data (SFT, DPO, PRM, KTO) and full search trees produced by "
        f"{card_info.producer}, the method of *{card_info.paper_title}*.",
        "",
    ]


def _loading_example(repo_id: str, splits: Mapping[str, Sequence[str]]) -> list[str]:
    """The code block that loads the data: the default config, each config's train split,
    and the held-out rows of one config (the others' are named the same way)."""
    default = default_config(list(splits))  # the config `card_configs` marked default
    with_test = _configs_with_test(splits)
    load = [
        *(
            [
                f'data = load_dataset("{repo_id}")  # {default}, the default config: '
                + " and ".join(splits[default])
                + " splits"
            ]
            if default
            else []
        ),
        *(
            f'{name} = load_dataset("{repo_id}", "{name}", split="train")'
            for name, names in splits.items()
            if "train" in names
        ),
        *(f'{n}_test = load_dataset("{repo_id}", "{n}", split="test")' for n in with_test[:1]),
    ]
    return [
        "Load it with:",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        *load,
        "```",
        "",
    ]


def _layout_and_splits(card_info: CardInfo, splits: Mapping[str, Sequence[str]]) -> list[str]:
    """Where each run's files live, how rows are held out by problem, and what each config
    holds."""
    fraction = (card_info.config.get("records") or {}).get("test_fraction")
    fraction_text = (
        f"`records.test_fraction` = {fraction}"
        if fraction is not None
        else "`records.test_fraction`"
    )
    with_test = ", ".join(f"`{n}`" for n in _configs_with_test(splits)) or "none"
    return [
        "Each run lives under `data/<config>/run=<run_id>/`: its `train-*.parquet` and "
        "`test-*.parquet` files; a config's `train` and `test` splits glob over all runs.",
        "",
        "**Held-out split, by problem**: a problem's rows are all `train` or all `test`, in "
        f"every config and every run (a hash of the problem id, {fraction_text}; the `split` "
        "column says which). `errors` rows, and runs made before the split, are all `train`. "
        f"Configs with a `test` split: {with_test}.",
        "",
        "| config | what |",
        "| --- | --- |",
        *(f"| {name} | {CONFIG_DOCS.get(name, '')} |" for name in splits),
        "",
    ]


def _configs_with_test(splits: Mapping[str, Sequence[str]]) -> list[str]:
    return [name for name, names in splits.items() if "test" in names]


def _runs_in_repo(repo_files: Sequence[str]) -> list[str]:
    """Every run the repo holds data of, after this publish."""
    runs = sorted({r for p in repo_files if (r := _run_of(p)) is not None})
    return ["## Runs in this repo", "", *(f"- `{r}`" for r in runs), ""]


def _run_facts(
    run_id: str,
    card_info: CardInfo,
    counts: Mapping[str, Mapping[str, int]],
    secrets: Sequence[str],
) -> list[str]:
    """The published run: rows per config and split, precision, decontamination, models,
    budget and config (secrets removed)."""
    precision = (
        "n/a" if card_info.answered_precision is None else f"{card_info.answered_precision:.4f}"
    )
    decontaminated = sum(card_info.decontaminated.values())
    by_benchmark = ", ".join(f"{k}: {v}" for k, v in sorted(card_info.decontaminated.items()))
    return [
        f"## Latest published run: `{run_id}`",
        "",
        "| config | train rows | test rows |",
        "| --- | --- | --- |",
        *(
            f"| {name} | {counts[name].get('train', 0)} | {counts[name].get('test', 0)} |"
            for name in CONFIGS
            if name in counts
        ),
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
        *_yaml_block(card_info.budget, secrets),
        "",
        "### Config (secrets removed)",
        "",
        *_yaml_block(card_info.config, secrets),
        "",
    ]


def _yaml_block(values: Mapping[str, Any], secrets: Sequence[str]) -> list[str]:
    """`values` as a fenced YAML block, keys sorted, secrets redacted."""
    dumped = yaml.safe_dump(
        redact_secrets(dict(values), secrets), sort_keys=True, allow_unicode=True
    )
    return ["```yaml", dumped.rstrip() if values else "{}", "```"]


def _sample_rows(samples: Mapping[str, dict[str, Any] | None]) -> list[str]:
    """One row of each config (as JSON), in config order; "(no rows)" for an empty one."""
    lines = ["### Sample rows", ""]
    for name in CONFIGS:
        if name not in samples:
            continue
        sample = samples[name]
        lines += [f"**{name}**", ""]
        if sample is None:
            lines += ["(no rows)", ""]
        else:
            lines += ["```json", json.dumps(sample, ensure_ascii=False, indent=2), "```", ""]
    return lines


_IMAGE = re.compile(r"\]\(([\w.-]+\.png)\)")


def report_path(run_id: str, name: str) -> str:
    """Where the run report's file `name` goes in the repo."""
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


def commit_run(
    repo_id: str,
    run_id: str,
    added: Mapping[str, Path],
    card_info: CardInfo,
    *,
    counts: Mapping[str, Mapping[str, int]],
    samples: Mapping[str, dict[str, Any] | None],
    api: HfApi,
    private: bool,
    secrets: Sequence[str],
    fail: Callable[[str], HubPublishError],
) -> tuple[Any, list[str]]:
    """One commit: delete run `run_id`'s old files, add `added` (repo path -> local file) and
    the card; returns the commit info and the deleted paths.  Any failure is `fail`'s
    `HubPublishError`, its message scrubbed of `secrets` and URL credentials."""
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        existing = api.list_repo_files(repo_id, repo_type="dataset")
        prefixes = (
            *(f"data/{name}/run={run_id}/" for name in CONFIGS),
            report_path(run_id, ""),
        )
        # Files re-added under the same path are overwritten, not deleted (as upload_folder does).
        deleted = sorted(p for p in existing if p.startswith(prefixes) and p not in added)
        after = sorted((set(existing) - set(deleted)) | set(added))
        card = render_card(
            repo_id,
            run_id,
            card_info,
            counts=counts,
            samples=samples,
            repo_files=after,
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
        # HTTP errors quote the URL they called: the endpoint's userinfo, signed query values
        detail = scrub(redact_text(f"{type(err).__name__}: {err}"), secrets)
        # `from None`: the chained HTTP error carries request objects (headers included).
        raise fail(f"Publishing run {run_id} to {repo_id} failed: {detail}") from None
    return info, deleted
