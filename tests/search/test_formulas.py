"""Each formula of the paper against hand-computed numbers on `conftest.small_tree`.

Tree: root -> a (Q .8) -> c (Q .6), d (Q 1.0, answered); root -> b (Q .4).
d(x): a=1, b=1, c=2, d=0 (answered).  m: root 5, a 3, b/c/d 1.
W: a = .8+.6+1.0 = 2.4, b = .4.  D: a = 1+2+0 = 3, b = 1, root = 4.
d_ans = mean steps to the answers = 2 (d was reached two steps below the root).
"""

from __future__ import annotations

import math

import pytest

from search.algorithms.puct import PuctSearch, PuctSettings
from search.budget import Budget
from search.config import BGMCTSConfig, MCTSConfig, NodeUnit
from search.formulas import bg_puct, e_gen, litesearch_width, puct
from tests.search.conftest import small_tree

SQRT2 = math.sqrt(2)


def test_rho_is_one_minus_used_over_budget() -> None:
    """Eq. 2: rho = 1 - C_used / B; 2500 of 10000 used -> 0.75."""
    budget = Budget(total=10_000, used=2_500)
    assert budget.rho == pytest.approx(0.75)
    assert Budget(total=10_000, used=10_000).rho == 0.0


def test_aggregates_on_small_tree() -> None:
    tree = small_tree()
    root, a, b, c, d = tree.nodes
    assert [n.m for n in (root, a, b, c, d)] == [5, 3, 1, 1, 1]
    assert a.w == pytest.approx(2.4) and root.w == pytest.approx(2.8)
    assert (a.d_sum, b.d_sum, root.d_sum) == (3.0, 1.0, 4.0)
    assert (c.d, d.d) == (2, 0)
    assert tree.d_ans == 2.0


def test_w_tilde_eq4() -> None:
    """W~(a, rho=.25) = 2.4 + 1 * (1 - .25) * 3 / 2 = 3.525; W~(b) = .4 + .75 * 1/2 = .775."""
    tree = small_tree()
    assert tree.w_tilde(tree[1], 0.25, 1.0) == pytest.approx(3.525)
    assert tree.w_tilde(tree[2], 0.25, 1.0) == pytest.approx(0.775)
    assert tree.w_tilde(tree[4], 0.25, 1.0) == pytest.approx(1.0)  # answered: no bias


def test_priors_softmax_of_sibling_q() -> None:
    """P(a) = e^.8 / (e^.8 + e^.4) = 2.22554 / 3.71737 = 0.598688."""
    tree = small_tree()
    assert tree.priors(tree.root) == pytest.approx([0.598688, 0.401312], abs=1e-6)


def test_puct_eq1() -> None:
    """PUCT(root, a) = 2.4/3 + sqrt2 * .598688 * sqrt(ln 5 / 3) = .8 + .620143 = 1.420143."""
    assert puct(2.4, 3, 5, 0.598688, SQRT2) == pytest.approx(1.420143, abs=1e-5)


def test_bg_puct_eq3() -> None:
    """BG-PUCT(root, a, .25) = 3.525/3 + .25 sqrt2 .598688 sqrt(ln5/3) = 1.175 + .155036 = 1.330036.

    BG-PUCT(root, b, .25) = .775/1 + .25 sqrt2 .401312 sqrt(ln 5) = .775 + .180001 = .955001.
    """
    assert bg_puct(3.525, 3, 5, 0.598688, SQRT2, 0.25) == pytest.approx(1.330036, abs=1e-5)
    assert bg_puct(0.775, 1, 5, 0.401312, SQRT2, 0.25) == pytest.approx(0.955001, abs=1e-5)


def test_e_gen_eq5() -> None:
    """E_gen(root, .25): mu = (.8+.4)/2 = .6, sigma^2 = (.2^2+.2^2)/2 = .04 -> .6+.25*.04 = .61."""
    tree = small_tree()
    mu, var = tree.child_mean_var(tree.root)
    assert (mu, var) == (pytest.approx(0.6), pytest.approx(0.04))
    assert e_gen(mu, var, 1.0, 0.25) == pytest.approx(0.61)


def test_unified_selection_eq6_descends_then_expands_leaf() -> None:
    """At rho=.25: root: a 1.330 > b .955 > E_gen .61 -> descend to a.

    At a: W~(c) = .6 + .75*2/2 = 1.35, W~(d) = 1.0; priors softmax(.6, 1.0) = (.401312, .598688);
    BG(c) = 1.35 + .25 sqrt2 .401312 sqrt(ln 3) = 1.498717, BG(d) = 1.0 + .221859 = 1.221859,
    E_gen(a) = .8 + .25 * .04 = .81 -> descend to c, a leaf -> expand k=2 children.
    """
    tree = small_tree()
    search = PuctSearch(PuctSettings.from_config(BGMCTSConfig()), "bg_mcts")
    scores = dict((n.id, s) for n, s in search.child_scores(tree, tree.root, 0.25))
    assert scores == {1: pytest.approx(1.330036, abs=1e-5), 2: pytest.approx(0.955001, abs=1e-5)}
    scores_a = dict((n.id, s) for n, s in search.child_scores(tree, tree[1], 0.25))
    assert scores_a == {3: pytest.approx(1.498717, abs=1e-5), 4: pytest.approx(1.221859, abs=1e-5)}
    assert search.generative_score(tree, tree[1], 0.25) == pytest.approx(0.81)
    (expansion,) = search.propose(tree, Budget(total=100, used=75))
    assert (expansion.node_id, expansion.n, expansion.from_generative) == (3, 2, False)
    assert expansion.unit is NodeUnit.SEQUENTIAL


def test_generative_child_wins_when_subtree_disappoints() -> None:
    """Widening (Eq. 6): children first scored high, their subtrees scored low.

    root -> a (.9) -> a1 (0), a2 (0);  root -> b (.9) -> b1 (0), b2 (0).  rho = 1.
    W(a)/m_a = .9/3 = .3; P = .5; bonus = sqrt2 * .5 * sqrt(ln 7 / 3) = .70711 * .80538 = .56949
    so BG(a) = .3 + .56949 = .86949 < E_gen = mu .9 + 1 * 0 = .9 -> widen the root with 1 child.
    """
    from search.protocols import FinishReason
    from search.tree import Tree

    tree = Tree("p")
    kw = {"answered": False, "answer": None, "finish": FinishReason.STOP_STRING, "output_tokens": 1}
    for name in ("a", "b"):
        top = tree.add_child(tree.root, text=name, q=0.9, **kw)  # type: ignore[arg-type]
        for _ in range(2):
            tree.add_child(top, text=name + "'", q=0.0, **kw)  # type: ignore[arg-type]
    search = PuctSearch(PuctSettings.from_config(BGMCTSConfig()), "bg_mcts")
    bonus = SQRT2 * 0.5 * math.sqrt(math.log(7) / 3)
    assert bonus == pytest.approx(0.56949, abs=1e-5)
    (expansion,) = search.propose(tree, Budget(total=100))
    assert (expansion.node_id, expansion.n, expansion.from_generative) == (0, 1, True)
    # MCTS has no generative child: it descends instead.
    mcts = PuctSearch(PuctSettings.from_config(MCTSConfig()), "mcts")
    (plain,) = mcts.propose(tree, Budget(total=100))
    assert plain.node_id != 0 and not plain.from_generative


@pytest.mark.parametrize(
    ("value", "depth", "width"),
    [
        (0.5, 1, 4),  # 1 - .5^C > .9: C=3 gives .875, C=4 gives .9375 -> 4
        (0.5, 2, 2),  # 4 / 2
        (0.9, 1, 2),  # borderline: see the docstring
        (0.0, 1, 10),  # never reaches epsilon -> clipped to 10
        (0.2, 1, 10),  # 1 - .8^C > .9 needs C=11 -> clipped to 10
        (0.2, 3, 4),  # ceil(11 / 3)
    ],
)
def test_litesearch_width(value: float, depth: int, width: int) -> None:
    """LiteSearch's width: smallest C with 1-(1-v)^C > .9, divided by depth, clipped to [1, 10].

    v=.9: C=1 gives 1 - .1 = .9, not > .9 (strict), so C = 2.
    """
    assert litesearch_width(value, depth, 0.9, 10) == width
