"""BG-MCTS (Sec. 3) and budget-agnostic MCTS (Eq. 1) as one PUCT selector.

Selection walks from the root.  At a leaf it expands k children; at an
internal node it scores every standard child with BG-PUCT (Eq. 3, using the
completion-biased W~ of Eq. 4) and the virtual generative child with E_gen
(Eq. 5), and either descends or widens (Eq. 6).  Turning off the rho factors,
the completion bias and the generative child gives plain PUCT MCTS, which is
also the paper's all-ablated row of Table 2.

Under `conventions: reference` two counts follow the released code instead
(github.com/Sora-Miyamoto/bg-mcts, treesearch/src/treesearch/algos/):

* BG-MCTS (bg_mcts.py): backpropagation stops below the root, so the root's
  visit count stays 1 and ln(m_root) = 0: the root's children get no
  exploration term (only E_gen widens the root).
* MCTS (standard_mcts.py): a new node's own statistics are updated twice (at
  creation and again by backpropagation), so a non-root node counts m + 1 visits
  and W + Q(x) value; the root counts the m - 1 nodes below it.  The released
  driver also takes the square root of the configured weight before the class
  takes it again: the effective c is sqrt(c) (2^(1/4) for c = sqrt 2).

Per selection the cost is O(depth x branching): every statistic is an O(1)
read of the node aggregates kept by `Tree`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from search.algorithms.base import Expansion, SearchAlgorithm
from search.budget import Budget
from search.config import BGMCTSConfig, MCTSConfig, NodeUnit
from search.formulas import bg_puct, e_gen, puct
from search.tree import ROOT_ID, Node, Tree


@dataclass(frozen=True, slots=True)
class PuctSettings:
    k: int
    c: float
    unit: NodeUnit
    early_stop: bool
    early_stop_threshold: float
    # BG-MCTS's terms; each default turns its term off, which leaves plain PUCT MCTS
    kappa: float = 0.0
    lam: float = 0.0
    explore_annealing: bool = False
    exploit_shaping: bool = False
    widen_annealing: bool = False
    generative_node: bool = False
    root_explores: bool = True  # False: the released BG-MCTS (ln m_root = 0)

    @classmethod
    def from_config(cls, config: BGMCTSConfig | MCTSConfig) -> PuctSettings:
        mcts = cls(
            k=config.k,
            c=config.c,
            unit=config.node_unit,
            early_stop=config.early_stop,
            early_stop_threshold=config.early_stop_threshold,
        )
        if isinstance(config, MCTSConfig):
            return mcts
        return replace(
            mcts,
            kappa=config.kappa,
            lam=config.lam,
            explore_annealing=config.explore_annealing,
            exploit_shaping=config.exploit_shaping,
            widen_annealing=config.widen_annealing,
            generative_node=config.generative_node,
            root_explores=not config.reference,
        )


class PuctSearch(SearchAlgorithm):
    def __init__(self, settings: PuctSettings, name: str) -> None:
        self.s = settings
        self.name = name
        self._exhausted: set[int] = set()
        self._best_answer_q = -1.0

    @classmethod
    def from_config(cls, config: BGMCTSConfig | MCTSConfig, seed: int = 0) -> PuctSearch:
        """BG-MCTS, or MCTS: under `reference` the released code's visit counts
        (`ReferenceMCTS`); BG-MCTS's reference decisions are all in its settings."""
        settings = PuctSettings.from_config(config)
        if isinstance(config, MCTSConfig) and config.reference:
            return ReferenceMCTS(settings, "mcts")
        return PuctSearch(settings, config.algorithm)

    def child_scores(self, tree: Tree, parent: Node, rho: float) -> list[tuple[Node, float]]:
        """BG-PUCT (Eq. 3) of every selectable standard child of `parent`.

        W~ = W + kappa (1 - rho) D / d_ans (Eq. 4); the factor before D is the same
        for every child, so it is computed once.
        """
        s = self.s
        explore_rho = rho if s.explore_annealing else 1.0
        bias = s.kappa * (1.0 - rho) / tree.d_ans if s.exploit_shaping else 0.0
        m_parent = parent.m if s.root_explores or parent.id != ROOT_ID else 1
        scored: list[tuple[Node, float]] = []
        for child, prior in tree.selectable_children(parent):
            if child.id in self._exhausted:
                continue
            value = child.w + bias * child.d_sum
            scored.append((child, bg_puct(value, child.m, m_parent, prior, s.c, explore_rho)))
        return scored

    def generative_score(self, tree: Tree, parent: Node, rho: float) -> float:
        """E_gen(p, rho) of the virtual generative child (Eq. 5)."""
        mu, variance = tree.child_mean_var(parent)
        return e_gen(mu, variance, self.s.lam, rho if self.s.widen_annealing else 1.0)

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        """One selection walk from the root (Eqs. 3-6).

        The same arithmetic as `child_scores` and `generative_score`, written out
        with the per-walk constants hoisted: rho, d_ans and hence the Eq. 4 bias
        are fixed during a walk, and ln(m_p) is taken once per visited node.
        """
        s = self.s
        rho = budget.rho
        rc = (rho if s.explore_annealing else 1.0) * s.c
        bias = s.kappa * (1.0 - rho) / tree.d_ans if s.exploit_shaping else 0.0
        lam_rho = s.lam * (rho if s.widen_annealing else 1.0)
        generative_node = s.generative_node
        root_explores = s.root_explores
        exhausted = self._exhausted
        selectable_children = tree.selectable_children
        log, sqrt = math.log, math.sqrt
        node = tree.root
        while True:
            count = len(node.children)
            if not count:
                return [Expansion(node.id, s.k, s.unit)]
            log_m = log(node.m) if root_explores or node.id else 0.0
            best: Node | None = None
            best_score = 0.0
            for child, prior in selectable_children(node):
                if exhausted and child.id in exhausted:
                    continue
                m = child.m
                # bg_puct (Eq. 3) with W~ of Eq. 4, operation for operation
                score = (child.w + bias * child.d_sum) / m + rc * (prior * sqrt(log_m / m))
                if best is None or score > best_score:
                    best, best_score = child, score
            # Eq. 6: widen when the generative child scores at least the best child.
            if generative_node:
                if best is None:
                    return [Expansion(node.id, 1, s.unit, from_generative=True)]
                # e_gen (Eq. 5) over Tree.child_mean_var, operation for operation
                mean = node.child_q_sum / count
                variance = node.child_q_sqsum / count - mean * mean
                if not variance > 0.0:  # max(0.0, variance), without the call
                    variance = 0.0
                if mean + lam_rho * variance >= best_score:
                    return [Expansion(node.id, 1, s.unit, from_generative=True)]
            if best is None:
                # Every child is failed or exhausted and this node cannot widen.
                exhausted.add(node.id)
                if node.id == ROOT_ID:
                    return []
                node = tree.root
                continue
            node = best

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:
        for child in children:
            if child.answered and child.answer is not None:
                self._best_answer_q = max(self._best_answer_q, child.q)

    def should_stop(self, tree: Tree, budget: Budget) -> bool:
        """App. I: stop once an answered node scores above the threshold."""
        return self.s.early_stop and self._best_answer_q > self.s.early_stop_threshold


class ReferenceMCTS(PuctSearch):
    """MCTS with the released code's visit counts (see the module docstring).

    Plain PUCT without widening: descend to a leaf, expand k children there.
    Statistics are derived from the tree's exact aggregates: a non-root child
    counts m + 1 visits and W + Q value; the root counts m - 1 visits.
    """

    def child_scores(self, tree: Tree, parent: Node, rho: float) -> list[tuple[Node, float]]:
        c = math.sqrt(self.s.c)
        visits_p = parent.m - 1 if parent.id == ROOT_ID else parent.m + 1
        return [
            (child, puct(child.w + child.q, child.m + 1, visits_p, prior, c))
            for child, prior in tree.selectable_children(parent)
            if child.id not in self._exhausted
        ]

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        s = self.s
        node = tree.root
        while True:
            if not node.children:
                return [Expansion(node.id, s.k, s.unit)]
            best: Node | None = None
            best_score = 0.0
            for child, score in self.child_scores(tree, node, 1.0):
                if best is None or score > best_score:
                    best, best_score = child, score
            if best is None:
                # Every child is failed or exhausted (a case the released code never meets).
                self._exhausted.add(node.id)
                if node.id == ROOT_ID:
                    return []
                node = tree.root
                continue
            node = best
