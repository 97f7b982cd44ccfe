"""A naive BG-MCTS selection: the oracle for `search.algorithms.puct.PuctSearch`.

It keeps no aggregates, as the paper's reference implementation: at every node on
the selection path it recomputes, for each child s, m_s and W~(s, rho) = sum over
T(s) of [Q(x) + kappa (1 - rho) d(x) / d_ans] by walking the whole subtree of s
(d(x) = 0 for answered nodes), so its "backprop" is just appending the node.  The
formulas are written out again here (not imported from `search.formulas`), so a
lock-step comparison tests that both versions implement the same equations.

`tests/search/test_naive_bg_mcts.py` compares it with the library step by step (the
retired `benchmarks/select_backprop.py` timed both: docs/benchmarks.md).  (`straightforward.py`
holds plain versions of whole searches against a world; this one is a single selection on a
bare tree.)
"""

from __future__ import annotations

import math

from search.algorithms.puct import PuctSettings
from search.tree import Tree

# (node_id, n, from_generative) of one expansion: what a selection decided.
Choice = tuple[int, int, bool]


class NaiveNode:
    """A node with no cached subtree statistics."""

    __slots__ = ("answered", "children", "d", "depth", "id", "parent_id", "q")

    def __init__(
        self, node_id: int, parent_id: int | None, depth: int, d: int, q: float, answered: bool
    ) -> None:
        self.id = node_id
        self.parent_id = parent_id
        self.depth = depth
        self.d = d  # steps since the last answered ancestor; 0 when answered
        self.q = q
        self.answered = answered
        self.children: list[int] = []


class NaiveTree:
    """Only parent/child links, Q, d and the running d_ans estimate."""

    def __init__(self) -> None:
        self.nodes: list[NaiveNode] = [NaiveNode(0, None, 0, 0, 0.0, False)]
        self.answer_count = 0
        self.answer_d_sum = 0
        self.max_depth = 0

    def __len__(self) -> int:
        return len(self.nodes)

    @classmethod
    def from_tree(cls, tree: Tree) -> NaiveTree:
        """The same tree, without aggregates (nodes are added in id order)."""
        naive = cls()
        for node in list(tree)[1:]:
            assert node.parent_id is not None
            added = naive.add_child(node.parent_id, node.q, node.answered)
            assert (added.id, added.d, added.depth) == (node.id, node.d, node.depth)
        return naive

    @property
    def d_ans(self) -> float:
        """Running mean d of answered nodes, else the maximum depth; at least 1."""
        if self.answer_count:
            return max(1.0, self.answer_d_sum / self.answer_count)
        return float(max(1, self.max_depth))

    def add_child(self, parent_id: int, q: float, answered: bool) -> NaiveNode:
        """Append a node: nothing to backpropagate, every statistic is recomputed."""
        parent = self.nodes[parent_id]
        steps = (0 if parent.answered else parent.d) + 1
        node = NaiveNode(
            len(self.nodes), parent_id, parent.depth + 1, 0 if answered else steps, q, answered
        )
        self.nodes.append(node)
        parent.children.append(node.id)
        if answered:
            self.answer_count += 1
            self.answer_d_sum += steps
        self.max_depth = max(self.max_depth, node.depth)
        return node

    def subtree_stats(self, node_id: int, bias: float) -> tuple[int, float]:
        """m_s and W~(s) = sum over T(s) of Q(x) + bias d(x), by walking T(s).

        `bias` is kappa (1 - rho) / d_ans; d(x) = 0 for answered x.
        """
        nodes = self.nodes
        stack = [node_id]
        m = 0
        w_tilde = 0.0
        while stack:
            x = nodes[stack.pop()]
            m += 1
            w_tilde += x.q + bias * x.d
            stack.extend(x.children)
        return m, w_tilde


def naive_select(tree: NaiveTree, s: PuctSettings, rho: float) -> Choice:
    """BG-MCTS selection (Eqs. 3-6) with every statistic recomputed by subtree walks.

    Mirrors `PuctSearch.propose` for trees without failed nodes (every node is
    expandable, so no node is ever marked exhausted).
    """
    explore_rho = rho if s.explore_annealing else 1.0
    widen_rho = rho if s.widen_annealing else 1.0
    kappa = s.kappa if s.exploit_shaping else 0.0
    bias = kappa * (1.0 - rho) / tree.d_ans
    node = tree.nodes[0]
    while True:
        if not node.children:
            return (node.id, s.k, False)
        children = [tree.nodes[i] for i in node.children]
        stats = [tree.subtree_stats(child.id, bias) for child in children]
        m_parent = 1 + sum(m for m, _ in stats)
        # P(s | p): softmax of the siblings' Q.
        qs = [child.q for child in children]
        top = max(qs)
        exps = [math.exp(q - top) for q in qs]
        total = sum(exps)
        best: NaiveNode | None = None
        best_score = -math.inf
        for child, (m_child, w_tilde), e in zip(children, stats, exps, strict=True):
            prior = e / total
            # Eq. 3: W~(s, rho) / m_s + rho c P(s|p) sqrt(ln(m_p) / m_s)
            score = w_tilde / m_child + explore_rho * s.c * prior * math.sqrt(
                math.log(m_parent) / m_child
            )
            if best is None or score > best_score:
                best, best_score = child, score
        if s.generative_node:
            # Eq. 5: E_gen = mu(p) + lambda rho sigma^2(p); Eq. 6: widen on >=.
            mu = sum(qs) / len(qs)
            variance = sum((q - mu) ** 2 for q in qs) / len(qs)
            if best is None or mu + s.lam * widen_rho * variance >= best_score:
                return (node.id, 1, True)
        if best is None:
            raise RuntimeError("naive selection found no child (failed nodes unsupported)")
        node = best
