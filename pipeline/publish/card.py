"""The dataset card (README.md): what a user filters on, loads, and reads about each run.

Its YAML header is what the Hub's search filters read: ``license`` (`publish.license`,
required before a repo is public), ``language``, ``task_categories``, ``size_categories``
(from the rows of the training configs over every run in ``runs.json``), ``source_datasets``
(the problem sources of those runs that are Hub datasets), the ``trl`` tag (the training
configs are TRL's formats) and ``configs:`` (`pipeline.publish.layout.card_configs`).  Its
body says how to load each config, how rows are held out by problem, every run in the repo
(one table row each) and the facts of the run just published, with its report.

The token never reaches the card: the text is scrubbed of every secret it was given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]
from huggingface_hub import DatasetCard, DatasetCardData

from common.redact import redact_secrets, redact_text, scrub
from pipeline.publish.layout import (
    CONFIGS,
    card_configs,
    default_config,
    report_path,
    run_of,
)
from pipeline.publish.run_index import size_category, training_rows
from pipeline.records import TRAINING_TYPES

__all__ = ["PAPER_TITLE", "TAGS", "TASK_CATEGORIES", "CardInfo", "render_card"]

PAPER_TITLE = "Budget-Guided Monte Carlo Tree Search for LLM Data Synthesis (BG-MCTS)"
# Search-time tags: "trl" marks datasets in TRL's formats (as trl-lib's own datasets do).
TAGS = ("synthetic", "bg-mcts", "trl", "sft", "dpo", "prm", "kto", "math")
# Problems in, worked solutions out: the Hub's task for such data.
TASK_CATEGORIES = ("text-generation",)
# The run table's columns: the training configs, in the card's config order.
RUN_TABLE_CONFIGS = tuple(name for name in CONFIGS if name in TRAINING_TYPES)
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
    # An SPDX id or a Hub license key (publish.license); a public repo needs one.
    license: str | None = None
    language: Sequence[str] = ("en",)
    # The Hub dataset the run's problems came from (source.kind hf), for source_datasets.
    source_dataset: str | None = None
    # The run report (pipeline.report.run_report): its markdown goes into the card, its files
    # (PNGs) are uploaded under reports/run=<run_id>/ and the card links them there.
    report_markdown: str | None = None
    report_files: Sequence[Path] = ()


def render_card(
    repo_id: str,
    run_id: str,
    card_info: CardInfo,
    *,
    counts: Mapping[str, Mapping[str, int]],
    samples: Mapping[str, dict[str, Any] | None],
    repo_files: Sequence[str],
    runs: Sequence[Mapping[str, Any]] = (),
    secrets: Sequence[str] = (),
) -> str:
    """The README.md dataset card for a repo holding `repo_files` after this publish: YAML
    header (`card_configs`, license, language, task, size and source fields) + a description
    of every run (`runs`: the entries of ``runs.json``) and of run `run_id`, whose rows per
    config and split are `counts`."""
    configs = card_configs(repo_files)
    # config -> its split names, in the card's config order
    splits = {c["config_name"]: [f["split"] for f in c["data_files"]] for c in configs}
    title = card_info.pretty_name or repo_id.split("/")[-1]
    sources = sorted({str(e["source"]) for e in runs if e.get("source")})
    card_data = DatasetCardData(
        pretty_name=title,
        license=card_info.license,
        language=list(card_info.language) or None,
        task_categories=list(TASK_CATEGORIES),
        size_categories=[size_category(training_rows(runs))],
        source_datasets=sources or None,
        tags=list(TAGS),
        configs=configs,
    )
    lines = [
        *_introduction(title, card_info),
        *_loading_example(repo_id, splits),
        *_layout_and_splits(card_info, splits),
        *_runs_in_repo(repo_files, runs),
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


def _runs_in_repo(repo_files: Sequence[str], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every run the repo holds data of after this publish, one table row each: when it was
    published and its rows per training config (from ``runs.json``; unknown for a run
    published before it)."""
    names = sorted({r for p in repo_files if (r := run_of(p)) is not None})
    known = {str(e["run_id"]): e for e in runs}
    columns = list(RUN_TABLE_CONFIGS)
    lines = [
        "## Runs in this repo",
        "",
        "| run | published | problems | " + " | ".join(columns) + " | precision |",
        "| --- | --- | --- | " + " | ".join("---" for _ in columns) + " | --- |",
    ]
    for name in names:
        entry = known.get(name)
        if entry is None:
            cells = ["(before runs.json)", "?", *("?" for _ in columns), "?"]
        else:
            rows = entry.get("rows") or {}
            precision = entry.get("answered_precision")
            cells = [
                str(entry.get("published_at", "?")),
                str(sum((rows.get("trees") or {}).values())) if "trees" in rows else "?",
                *(str(sum((rows.get(c) or {}).values())) for c in columns),
                "n/a" if precision is None else f"{float(precision):.4f}",
            ]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return [*lines, ""]


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


def _report_section(markdown: str, run_id: str) -> list[str]:
    """The run report one heading level down, its images linked where they are uploaded."""
    out = []
    for line in markdown.splitlines():
        if line.startswith("#"):
            line = "#" + line
        out.append(_IMAGE.sub(lambda m: f"]({report_path(run_id, m[1])})", line))
    return ["", *out, ""]
