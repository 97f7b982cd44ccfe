"""Tree bookkeeping, answer detection (App. A) and budget arithmetic (Eq. 2)."""

from __future__ import annotations

import pickle

import pytest

from search.answers import extract_boxed, is_answered
from search.budget import Budget, BudgetViolation, TokenWeights
from search.protocols import FinishReason, TokenCounts
from search.tree import Tree
from tests.search.conftest import small_tree


def test_answer_pattern_and_natural_end() -> None:
    stop, eos, length = FinishReason.STOP_STRING, FinishReason.EOS, FinishReason.LENGTH
    assert is_answered("Therefore, the final answer is: $\\boxed{72}$.", stop)
    assert is_answered("no box, but the model ended", eos)
    assert not is_answered("the boxed value \\boxed{3} without the phrase", stop)
    assert not is_answered("cut mid answer is \\boxed{", length)
    assert is_answered("so the answer is $\\boxed{4}$ and more", length)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("answer is $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\sqrt{x^{2}+1}} done", "\\sqrt{x^{2}+1}"),
        ("good \\boxed{7} then cut \\boxed{8", "7"),
        ("\\boxed {12}", "12"),
        ("nothing here", None),
    ],
)
def test_extract_last_balanced_boxed(text: str, answer: str | None) -> None:
    assert extract_boxed(text) == answer


def test_paths_and_trajectory_text() -> None:
    tree = small_tree()
    c = tree[3]
    assert [n.id for n in tree.path(c)] == [1, 3]
    assert tree.assistant_text(c) == "Step 1: a c"
    assert tree.path_segments(tree.root) == ()


def test_depth_since_last_answer_resets_under_an_answer() -> None:
    tree = small_tree()
    answered = tree[4]
    child = tree.add_child(
        answered,
        text=" more",
        q=0.5,
        answered=False,
        answer=None,
        finish=FinishReason.STOP_STRING,
        output_tokens=1,
    )
    grandchild = tree.add_child(
        child, text=" x", q=0.5, answered=True, answer="1", finish=FinishReason.EOS, output_tokens=1
    )
    assert (child.depth, child.d) == (3, 1)
    assert (grandchild.depth, grandchild.d) == (4, 0)
    # d_ans = mean(steps to answer) = mean(2, 2) = 2
    assert tree.d_ans == 2.0


def test_d_ans_before_any_answer_is_max_depth() -> None:
    tree = Tree("p")
    assert tree.d_ans == 1.0  # never below 1
    kw = {"answered": False, "answer": None, "finish": FinishReason.STOP_STRING}
    n = tree.root
    for _ in range(3):
        n = tree.add_child(n, text="s", q=0.5, output_tokens=1, **kw)  # type: ignore[arg-type]
    assert tree.d_ans == 3.0


def test_width_and_depth_stats() -> None:
    tree = small_tree()
    assert (tree.max_depth, tree.max_width) == (2, 2)


def test_tree_pickles_and_exports_flat_rows() -> None:
    tree = small_tree()
    clone = pickle.loads(pickle.dumps(tree))
    assert clone.rows() == tree.rows()
    rows = tree.rows()
    assert [r["parent_id"] for r in rows] == [None, 0, 0, 1, 1]
    assert rows[4]["answered"] and rows[4]["answer"] == "5" and rows[4]["finish"] == "eos"


def test_q_outside_unit_interval_is_rejected() -> None:
    tree = Tree("p")
    with pytest.raises(ValueError, match="Q must lie in"):
        tree.add_child(
            tree.root,
            text="x",
            q=1.5,
            answered=False,
            answer=None,
            finish=FinishReason.EOS,
            output_tokens=1,
        )


def test_max_tokens_never_lets_n_choices_overspend() -> None:
    budget = Budget(total=100, used=95)
    assert budget.max_tokens_per_choice(n=2, cap=512) == 2  # 2 choices x 2 <= 5
    assert budget.max_tokens_per_choice(n=1, cap=3) == 3
    assert budget.max_tokens_per_choice(n=1, cap=512, inserted_tokens=5) == 0
    assert budget.max_tokens_per_choice(n=6, cap=512) == 0


def test_cost_model_weights_input_and_prm_tokens() -> None:
    budget = Budget(total=1000, cost=TokenWeights(policy_output=1, policy_input=0.5, prm_output=2))
    budget.charge(
        TokenCounts(policy_output_tokens=100, policy_input_tokens=200, inserted_prompt_tokens=10),
        "policy",
    )
    budget.charge(TokenCounts(prm_input_tokens=50, prm_output_tokens=20), "scoring")
    assert budget.used == pytest.approx(100 + 100 + 10 + 40)
    assert (budget.tokens.policy_output_tokens, budget.tokens.prm_output_tokens) == (100, 20)
    with pytest.raises(BudgetViolation, match="only 750"):
        budget.charge(TokenCounts(policy_output_tokens=751), "policy")
    assert budget.tokens.policy_output_tokens == 100  # a charge refused counts nothing


def test_the_score_reserve_is_held_only_while_scoring_is_charged() -> None:
    free = Budget(total=1000, max_score_tokens=(400, 10))
    assert free.score_reserve(3) == 0.0
    charged = Budget(
        total=1000, cost=TokenWeights(prm_input=0.5, prm_output=2), max_score_tokens=(400, 10)
    )
    assert charged.score_reserve() == 220.0 and charged.score_reserve(3) == 660.0
    # every choice's score is held back before the request is sized: 1000 - 4 x 220 = 120
    assert charged.max_tokens_per_choice(n=4, cap=512) == 30


def test_bad_budget_and_weights_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="budget must be a positive"):
        Budget(total=0)
    with pytest.raises(ValueError, match="policy_input"):
        TokenWeights(policy_input=-1)
