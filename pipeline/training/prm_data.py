"""The rows `bgmcts train-prm` trains on: a run's `prm` rows, filtered, as token ids.

Which rows: every counted `prm` row of the given run folders, except

* ``test_split``: rows of a problem the run put in its ``test`` split (never trained on:
  the split exists to measure a model on problems it has not seen);
* ``excluded``: problems named in ``--exclude-problems`` (a benchmark's held-out set);
* ``duplicate``: the same prompt and steps again (two runs of one config write many of
  the same paths); the first run named wins;
* ``max_rows``: beyond ``--max-rows``, a seeded shuffle keeps a prefix, so a smaller
  subset is part of every larger one (learning curves);
* ``too_long``: no step ends within ``max_length`` tokens (nothing left to learn from).

How a row becomes ids: `actors.engines.step_layout.layout`, the layout TRL's PRMTrainer
used and every one-pass engine serves - [bos] + prompt + each step and its separator -
cut to ``max_length`` keeping the start, as TRL did.  Each separator carries its step's
target (the probability that the step is good: 1.0 or 0.0 for hard labels, the
Monte-Carlo value for soft ones); every other position is ignored by the loss.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actors.engines.step_layout import Tokenize, layout
from pipeline.errors import InputError

LabelMode = Literal["hard", "soft", "threshold"]
IGNORE = -100  # the label transformers' losses skip (TRL's PRMTrainer used it too)
COLUMNS = ["prompt", "completions", "labels", "values", "problem_id", "split"]


@dataclass(frozen=True, slots=True)
class PrmRow:
    """One path to train on: its prompt, its steps and one target per step in [0, 1]."""

    problem_id: str
    prompt: str
    steps: tuple[str, ...]
    targets: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Encoded:
    """A row as the model sees it: ids, and per position a class label and a target."""

    problem_id: str
    input_ids: list[int]
    labels: list[int]  # IGNORE, or the hard class (target >= 0.5) at a separator
    targets: list[float]  # the probability of "good" at a separator, 0.0 elsewhere


@dataclass
class Selection:
    """The rows kept, and how many were dropped for each reason."""

    rows: list[PrmRow]
    read: int
    dropped: Counter[str] = field(default_factory=Counter)


def read_problem_ids(path: str | Path) -> set[str]:
    """Problem ids, one a line (blank lines skipped); a missing file is bad input."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--exclude-problems: {path} does not exist") from None
    return {line.strip() for line in text.splitlines() if line.strip()}


def row_fault(row: dict[str, Any], mode: LabelMode) -> str | None:
    """What makes `row` unfit to train on, or None: text that is not text, a step count
    that differs from its labels' (or values'), a label that is not true or false, a
    value that is not a finite number in [0, 1] (a NaN target makes the loss NaN)."""
    if not isinstance(row.get("prompt"), str) or not isinstance(row.get("problem_id"), str):
        return "its prompt or problem_id is not text"
    steps = row.get("completions")
    if not isinstance(steps, list) or not all(isinstance(step, str) for step in steps):
        return "its completions are not a list of texts"
    column = "labels" if mode == "hard" else "values"
    given = row.get(column)
    if not isinstance(given, list) or len(given) != len(steps):
        size = len(given) if isinstance(given, list) else "no"
        return f"it has {len(steps)} steps and {size} {column}"
    for i, item in enumerate(given):
        if mode == "hard" and not isinstance(item, bool):
            return f"labels[{i}] is {item!r}, not true or false"
        if mode != "hard" and not (
            isinstance(item, int | float) and not isinstance(item, bool) and 0.0 <= item <= 1.0
        ):
            return f"values[{i}] is {item!r}, not a finite number in [0, 1]"
    return None


def targets_of(row: dict[str, Any], mode: LabelMode, threshold: float) -> tuple[float, ...]:
    """One target per step: the hard label, the soft value, or the value against a threshold."""
    if mode == "hard":
        return tuple(1.0 if label else 0.0 for label in row["labels"])
    if mode == "soft":
        return tuple(float(value) for value in row["values"])
    return tuple(1.0 if value >= threshold else 0.0 for value in row["values"])


def select_rows(
    runs: Sequence[tuple[str, Iterable[dict[str, Any]]]],
    *,
    exclude: set[str],
    mode: LabelMode,
    threshold: float,
    max_rows: int | None,
    seed: int,
) -> Selection:
    """The rows to train on from each run's `prm` rows (`runs`: name and rows, in order).

    A row unfit to train on (`row_fault`) is refused, naming its run, its place and its
    problem, before anything is trained: the pipeline never writes one, so the run
    folder is not what it seems."""
    kept: list[PrmRow] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    selection = Selection(rows=kept, read=0)
    for name, rows in runs:
        for number, row in enumerate(rows):
            fault = row_fault(row, mode)
            if fault is not None:
                raise InputError(
                    f"{name}: prm row {number} (problem {row.get('problem_id')!r}) cannot be "
                    f"trained on: {fault}"
                )
            selection.read += 1
            if row["split"] == "test":
                selection.dropped["test_split"] += 1
                continue
            if row["problem_id"] in exclude:
                selection.dropped["excluded"] += 1
                continue
            key = (row["prompt"], tuple(row["completions"]))
            if key in seen:
                selection.dropped["duplicate"] += 1
                continue
            seen.add(key)
            kept.append(
                PrmRow(row["problem_id"], row["prompt"], key[1], targets_of(row, mode, threshold))
            )
    if max_rows is not None and len(kept) > max_rows:
        # a seeded permutation's prefix: the subset of N rows lies inside that of N+1
        order = list(range(len(kept)))
        random.Random(seed).shuffle(order)
        chosen = sorted(order[:max_rows])
        selection.dropped["max_rows"] += len(kept) - max_rows
        selection.rows = [kept[i] for i in chosen]
    return selection


def encode(
    row: PrmRow, tokenize: Tokenize, separator: int, bos: int | None, max_length: int
) -> Encoded | None:
    """`row` in the step layout, cut to `max_length` (the start kept); None when no step's
    separator is left within it."""
    laid = layout(tokenize, row.prompt, row.steps, separator, bos)
    ids = laid.input_ids[:max_length]
    labels = [IGNORE] * len(ids)
    targets = [0.0] * len(ids)
    for position, target in zip(laid.positions, row.targets, strict=True):
        if position < len(ids):
            labels[position] = 1 if target >= 0.5 else 0
            targets[position] = target
    if all(label == IGNORE for label in labels):
        return None
    return Encoded(row.problem_id, ids, labels, targets)


def encode_rows(
    selection: Selection, tokenize: Tokenize, separator: int, bos: int | None, max_length: int
) -> list[Encoded]:
    """Every selected row encoded; rows with no step inside `max_length` are dropped
    (``too_long``)."""
    encoded: list[Encoded] = []
    for row in selection.rows:
        item = encode(row, tokenize, separator, bos, max_length)
        if item is None:
            selection.dropped["too_long"] += 1
        else:
            encoded.append(item)
    return encoded


def class_counts(encoded: Sequence[Encoded]) -> tuple[int, int]:
    """(positive, negative) labelled steps, a step being positive when its target >= 0.5."""
    positives = negatives = 0
    for item in encoded:
        positives += sum(label == 1 for label in item.labels)
        negatives += sum(label == 0 for label in item.labels)
    return positives, negatives


__all__ = [
    "COLUMNS",
    "IGNORE",
    "Encoded",
    "LabelMode",
    "PrmRow",
    "Selection",
    "class_counts",
    "encode",
    "encode_rows",
    "read_problem_ids",
    "row_fault",
    "select_rows",
    "targets_of",
]
