"""Which prm rows `bgmcts train-prm` trains on, and how each becomes ids and labels."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.training.prm_data import (
    IGNORE,
    PrmRow,
    class_counts,
    encode,
    encode_rows,
    select_rows,
)

SEP = 10  # the id of "\n" in the character tokenizer below


def tokenize(text: str) -> list[int]:
    """One id per character: every step's length in tokens is its length in characters."""
    return [ord(c) for c in text]


def row(
    problem: str, steps: list[str], *, split: str = "train", prompt: str = "Q"
) -> dict[str, Any]:
    labels = [i % 2 == 0 for i in range(len(steps))]
    values = [0.75 if good else 0.25 for good in labels]
    return {
        "prompt": prompt,
        "completions": steps,
        "labels": labels,
        "values": values,
        "problem_id": problem,
        "split": split,
    }


def test_test_split_excluded_and_duplicates_are_dropped_in_order() -> None:
    first = [row("a", ["x"]), row("b", ["y"], split="test"), row("c", ["z"])]
    second = [row("a", ["x"]), row("a", ["x", "w"]), row("d", ["v"])]
    chosen = select_rows(
        [("r1", first), ("r2", second)],
        exclude={"c", "b"},
        mode="hard",
        threshold=0.5,
        max_rows=None,
        seed=0,
    )
    assert [(r.problem_id, r.steps) for r in chosen.rows] == [
        ("a", ("x",)),
        ("a", ("x", "w")),
        ("d", ("v",)),
    ]
    # a test-split row counts as test_split even when its problem is also excluded
    assert chosen.read == 6
    assert dict(chosen.dropped) == {"test_split": 1, "excluded": 1, "duplicate": 1}


def test_label_modes() -> None:
    rows = [("r", [row("a", ["s1", "s2", "s3"])])]
    kwargs: dict[str, Any] = {"exclude": set(), "max_rows": None, "seed": 0}
    hard = select_rows(rows, mode="hard", threshold=0.5, **kwargs).rows[0]
    soft = select_rows(rows, mode="soft", threshold=0.5, **kwargs).rows[0]
    cut = select_rows(rows, mode="threshold", threshold=0.8, **kwargs).rows[0]
    assert hard.targets == (1.0, 0.0, 1.0)
    assert soft.targets == (0.75, 0.25, 0.75)
    assert cut.targets == (0.0, 0.0, 0.0)


def test_max_rows_is_a_seeded_prefix_so_subsets_nest() -> None:
    rows = [("r", [row(f"p{i}", [f"step {i}"]) for i in range(30)])]
    kwargs: dict[str, Any] = {"exclude": set(), "mode": "hard", "threshold": 0.5}

    def ids(n: int, seed: int) -> set[str]:
        chosen = select_rows(rows, max_rows=n, seed=seed, **kwargs)
        assert chosen.dropped["max_rows"] == 30 - n
        return {r.problem_id for r in chosen.rows}

    assert ids(10, 0) == ids(10, 0) and len(ids(10, 0)) == 10
    assert ids(5, 0) < ids(10, 0) < ids(20, 0)
    assert ids(10, 0) != ids(10, 1)


def test_labels_sit_on_the_separators_only() -> None:
    item = encode(PrmRow("a", "Q:", ("ab", "", "c"), (1.0, 0.0, 0.5)), tokenize, SEP, 1, 100)
    assert item is not None
    # [bos] Q : a b \n \n c \n
    assert item.input_ids == [1, ord("Q"), ord(":"), ord("a"), ord("b"), SEP, SEP, ord("c"), SEP]
    assert item.labels == [IGNORE] * 5 + [1, 0, IGNORE, 1]
    assert item.targets == [0.0] * 5 + [1.0, 0.0, 0.0, 0.5]
    assert class_counts([item]) == (2, 1)


def test_long_rows_keep_the_start_and_rows_with_no_step_left_are_dropped() -> None:
    short = PrmRow("a", "Q", ("ab", "cdef"), (1.0, 0.0))
    cut = encode(short, tokenize, SEP, None, 5)  # Q a b \n c | d e f \n
    assert cut is not None
    assert cut.input_ids == [ord("Q"), ord("a"), ord("b"), SEP, ord("c")]
    assert cut.labels == [IGNORE, IGNORE, IGNORE, 1, IGNORE]
    long_prompt = PrmRow("b", "Q" * 10, ("ab",), (1.0,))
    assert encode(long_prompt, tokenize, SEP, None, 5) is None
    chosen = select_rows(
        [("r", [row("a", ["ab", "cdef"]), row("b", ["ab"], prompt="Q" * 10)])],
        exclude=set(),
        mode="hard",
        threshold=0.5,
        max_rows=None,
        seed=0,
    )
    encoded = encode_rows(chosen, tokenize, SEP, None, 5)
    assert [e.problem_id for e in encoded] == ["a"] and chosen.dropped["too_long"] == 1


def test_steps_and_labels_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        encode(PrmRow("a", "Q", ("x", "y"), (1.0,)), tokenize, SEP, None, 100)
