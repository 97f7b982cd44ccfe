"""Where things live in the dataset repo, and the card's ``configs:`` that reads them.

One dataset repo holds every run; every record type is a config (`CONFIGS`: the training
types first, then nodes, trees, tree_nodes, errors).  A run's rows go up as a few shards per
config and split (`pipeline.publish.shards`)::

    data/<config>/run=<run_id>/train-<digest>-00000-of-00001.parquet
    data/<config>/run=<run_id>/test-<digest>-00000-of-00001.parquet
    reports/run=<run_id>/<figure>.png          the run report's figures
    runs.json                                  every run's facts (`pipeline.publish.run_index`)
    README.md                                  the dataset card (`pipeline.publish.card`)

So a folder holds one entry per run (``data/<config>/``, ``reports/``) and a run folder a
few shards: 30 nights of 500 problems are about 600 files, where one file per tree per
table was about 100,000.

The card declares each config present in its YAML header: split ``train`` globs
``data/<config>/run=*/train-*.parquet`` and split ``test`` globs
``data/<config>/run=*/test-*.parquet`` (listed only when the repo holds a test file of that
config: a glob that matches nothing makes ``datasets`` fail).  Runs published in the
earlier one-file-per-part layout (``train-part-<batch>.parquet``) match the same globs and
are read as they are.  Runs published before the split (files without the prefix) are
listed in their config's ``train`` split one run folder each,
``data/<config>/run=<run_id>/*.parquet``, after the ``train-*`` glob (``datasets`` takes the
columns from the first file, so it reads their missing ``split`` as null), until they are
re-published.  Both earlier layouts become shards without their run folders with
``python -m jobs.publish --reshard`` (`pipeline.publish.reshard`).  ``sft`` (else the first
training config present) is marked ``default: true``, so ``datasets.load_dataset(repo_id)``
returns its train and test splits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.records import RECORD_TYPES, TRAINING_TYPES
from pipeline.records.splits import SPLITS

__all__ = [
    "CARD",
    "CONFIGS",
    "RUN_INDEX",
    "card_configs",
    "data_folder",
    "default_config",
    "report_path",
    "run_of",
    "run_prefixes",
]

# Every record type (pipeline.records.RECORD_TYPES), training data first.
CONFIGS: tuple[str, ...] = (
    *TRAINING_TYPES,
    *(name for name in RECORD_TYPES if name not in TRAINING_TYPES),
)
CARD = "README.md"
RUN_INDEX = "runs.json"


def data_folder(config: str, run_id: str) -> str:
    """The repo folder of one run's rows of one config."""
    return f"data/{config}/run={run_id}"


def report_path(run_id: str, name: str) -> str:
    """Where the run report's file `name` goes in the repo."""
    return f"reports/run={run_id}/{name}"


def run_prefixes(run_id: str) -> tuple[str, ...]:
    """Every repo folder that holds run `run_id`'s files (with a trailing slash)."""
    return (*(data_folder(name, run_id) + "/" for name in CONFIGS), report_path(run_id, ""))


def run_of(path: str) -> str | None:
    """The run a repo data file belongs to (None for other files)."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[0] == "data" and parts[2].startswith("run="):
        return parts[2][len("run=") :]
    return None


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
