"""Answer choice: highest Q (paper, math), majority vote (paper, physics), Q-weighted vote."""

from __future__ import annotations

import pytest

from search.answer_choice import AnswerTally
from search.config import AnswerRule
from search.protocols import FinishReason
from search.tree import Tree


def _tally(rule: AnswerRule, answers: list[tuple[str | None, float]]) -> AnswerTally:
    tree = Tree("p")
    tally = AnswerTally(rule)
    for answer, q in answers:
        node = tree.add_child(
            tree.root,
            text="t",
            q=q,
            answered=True,
            answer=answer,
            finish=FinishReason.EOS,
            output_tokens=1,
        )
        tally.add(node)
    return tally


ANSWERS = [("7", 0.9), ("12", 0.5), ("12", 0.3), (" 12 ", 0.35), ("3", 0.95), (None, 0.99)]


@pytest.mark.parametrize(
    ("rule", "answer", "q"),
    [
        # highest Q with an extracted answer: "3" at .95 (the .99 node has no answer)
        (AnswerRule.HIGHEST_Q, "3", 0.95),
        # votes: "12" x3 (whitespace normalised) beats "7" and "3"; carried by its best node
        (AnswerRule.MAJORITY, "12", 0.5),
        # Q sums: 12 -> .5+.3+.35 = 1.15 > 3 -> .95 > 7 -> .9
        (AnswerRule.Q_WEIGHTED, "12", 0.5),
    ],
)
def test_rules(rule: AnswerRule, answer: str, q: float) -> None:
    tally = _tally(rule, ANSWERS)
    assert tally.answer == answer
    assert tally.chosen_node is not None and tally.chosen_node.q == q


def test_ties_go_to_the_answer_reached_first() -> None:
    tally = _tally(AnswerRule.MAJORITY, [("a", 0.1), ("b", 0.9), ("b", 0.2), ("a", 0.3)])
    assert tally.answer == "a"
    assert _tally(AnswerRule.HIGHEST_Q, [("a", 0.5), ("b", 0.5)]).answer == "a"


def test_no_answers_means_no_choice() -> None:
    tally = _tally(AnswerRule.MAJORITY, [(None, 0.9)])
    assert tally.answer is None and tally.chosen_node is None and tally.votes() == {}
