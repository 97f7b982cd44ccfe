"""`answer_extraction`: the paper's boxed rule (default) and `last_number` for weak models."""

from __future__ import annotations

import asyncio

import pytest

from search import parse_search_config, run_search
from search.answers import AnswerExtraction, extract_answer, extract_last_number
from search.protocols import FinishReason, Generation, GenerationRequest


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the answer is 8.", "8"),
        ("3 + 5 = 8 apples, then 8 - 2 = 6. The answer is 6", "6"),
        ("He has 1,080 coins.", "1080"),
        ("Half of it: 3/4 of a cake", "3/4"),
        ("It is -4.5 degrees.", "-4.5"),
        ("No number here.", None),
    ],
)
def test_last_number(text: str, expected: str | None) -> None:
    assert extract_last_number(text) == expected


def test_boxed_wins_in_both_modes_and_boxed_mode_never_reads_numbers() -> None:
    text = "The answer is $\\boxed{12}$ and then 7 more words 9"
    assert extract_answer(text, AnswerExtraction.BOXED) == "12"
    assert extract_answer(text, AnswerExtraction.LAST_NUMBER) == "12"
    assert extract_answer("So the answer is 8.", AnswerExtraction.BOXED) is None
    assert extract_answer("So the answer is 8.", AnswerExtraction.LAST_NUMBER) == "8"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # SmolLM2 goes on after its answer, inventing a problem with other numbers
        ("Emma has 10 + 7 = 17 marbles. The answer is 17.\n\nProblem:\nMia has 3 + 2 = 5", "17"),
        ("The answer is 16.\n\nProblem:\nInes has 16 + 2 = 20. The answer is 20.", "16"),
        ("Grace has 4 boxes. The answer is 4 x 3 = 12 books.\nStep 2", "12"),
        ("the answer is: $18$", "18"),
        ("The answer is 4.5 degrees. Then 9", "4.5"),
        ("The answer is 1,080 coins.", "1080"),
        ("The answer is unclear, 3 + 4 = 7", "7"),  # no number stated: the last number
        ("He has 3 + 4 = 7 coins", "7"),
    ],
)
def test_last_number_mode_takes_the_first_stated_answer(text: str, expected: str) -> None:
    assert extract_answer(text, AnswerExtraction.LAST_NUMBER) == expected


def test_config_default_is_the_papers_rule_and_bad_values_name_the_field() -> None:
    assert parse_search_config({"algorithm": "bg_mcts"}).answer_extraction == "boxed"
    config = parse_search_config({"algorithm": "bg_mcts", "answer_extraction": "last_number"})
    assert config.answer_extraction is AnswerExtraction.LAST_NUMBER
    with pytest.raises(ValueError, match="answer_extraction"):
        parse_search_config({"algorithm": "bg_mcts", "answer_extraction": "first"})


class _Plain:
    """A policy that ends every generation naturally with a plain-text answer."""

    name = "plain"

    async def generate(self, request: GenerationRequest) -> list[Generation]:
        return [Generation("So the answer is 8.", 5, FinishReason.EOS)] * request.n

    async def count_tokens(self, text: str) -> int:
        return len(text.split())


class _Half:
    name = "half"

    async def score(self, request: object) -> object:
        from search.protocols import Score

        return Score(0.5)


@pytest.mark.parametrize(("mode", "answer"), [("boxed", None), ("last_number", "8")])
def test_the_driver_uses_the_configured_extraction(mode: str, answer: str | None) -> None:
    config = parse_search_config(
        {"algorithm": "bg_mcts", "answer_extraction": mode, "step_max_tokens": 8}
    )
    result = asyncio.run(run_search("What is 3+5?", config, _Plain(), _Half(), budget=20, seed=0))
    answered = result.answered_nodes
    assert answered and all(n.answer == answer for n in answered)
    assert result.chosen_answer == answer


def test_last_number_mode_also_answers_on_a_plain_answer_is_number() -> None:
    from search.answers import is_answered

    stop = FinishReason.STOP_STRING
    text = "Carla has 18 stickers now. The answer is: 18"
    assert not is_answered(text, stop)  # App. A needs the box
    assert not is_answered(text, stop, AnswerExtraction.BOXED)
    assert is_answered(text, stop, AnswerExtraction.LAST_NUMBER)
    assert is_answered("so the answer is $7$", stop, AnswerExtraction.LAST_NUMBER)
    assert not is_answered("the answer is unclear", stop, AnswerExtraction.LAST_NUMBER)
