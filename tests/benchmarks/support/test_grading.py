"""benchmarks/support/grading.py: completions cut at the policy's stops, then graded with
the real math-verify, one draw or k draws per problem."""

from __future__ import annotations

from benchmarks.support.grading import cut_at_stops, grade_draws, grade_now
from search.answers import AnswerExtraction


def test_completions_are_cut_at_the_policy_stops() -> None:
    text = "Step 1: 3 + 4 = 7. The answer is 7.\nProblem: Ben has 9"
    assert cut_at_stops(text, ["Problem:"]) == "Step 1: 3 + 4 = 7. The answer is 7.\n"
    assert cut_at_stops(text, []) == text


def test_an_answer_after_a_stop_does_not_count() -> None:
    texts = ["The answer is 30.0.", "The answer is 4.\nProblem: x has 5", "none"]
    graded = grade_now(
        texts, ["30", "5", "1"], extraction=AnswerExtraction.LAST_NUMBER, stops=["Problem:"]
    )
    assert graded == [True, False, False]


def test_draws_keep_their_problem() -> None:
    draws = [["It is 2.", "It is 3."], ["It is 9.", "It is 9."]]
    graded = grade_draws(draws, ["2", "9"], extraction=AnswerExtraction.LAST_NUMBER)
    assert graded == [[True, False], [True, True]]
