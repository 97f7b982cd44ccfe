"""The search tree and the per-node aggregates that make selection O(depth).

Notation follows the paper (Sec. 2-3):

* ``m`` - subtree size m_x = |T(x)|, the node itself included;
* ``W`` - sum of Q over the subtree;
* ``D`` - sum of d(y) over the *unanswered* nodes y of the subtree, where d(y)
  counts the steps since the nearest answered ancestor (an answered node has
  no completion bias, Eq. 4).

Because the completion bias of Eq. 4 is linear in d, the corrected value is
``W~(s, rho) = W(s) + kappa (1 - rho) D(s) / d_ans`` - O(1) per child, no
subtree walks.  Adding a node updates the three sums along its path to the
root, O(depth).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from search.protocols import FinishReason

ROOT_ID = 0

_NOT_EXPANDABLE = (FinishReason.CONTEXT_OVERFLOW, FinishReason.ERROR)


@dataclass(slots=True)
class Node:
    """One node: a generated step (or whole solution) and its statistics."""

    id: int
    parent_id: int | None
    depth: int  # absolute depth; the root (the bare problem) is 0
    d: int  # d(x): steps since the last answered ancestor (0 when answered)
    text: str = ""  # generated text, step boundary excluded
    inserted_text: str = ""  # fixed text the search put before `text` (boundary, continuation)
    output_tokens: int = 0
    inserted_tokens: int = 0
    q: float = 0.0  # Q(x)
    answered: bool = False
    answer: str | None = None
    finish: FinishReason | None = None
    full_generation: bool = False
    from_generative: bool = False  # created through the virtual generative child
    iteration: int = 0  # the search step (expansion order) that created it
    c_used: float = 0.0  # C_used when it was created, before its own cost
    error: str | None = None
    score_context: Any = None
    children: list[int] = field(default_factory=list)
    # aggregates (Sec. 2 and Eq. 4)
    m: int = 1
    w: float = 0.0
    d_sum: float = 0.0
    # sums over the standard children's Q, for mu(p) and sigma^2(p) of Eq. 5
    child_q_sum: float = 0.0
    child_q_sqsum: float = 0.0

    @property
    def expandable(self) -> bool:
        """Failed nodes and paths that overflow the context are never expanded."""
        return self.error is None and self.finish not in _NOT_EXPANDABLE

    @property
    def segment(self) -> str:
        """This node's contribution to the trajectory text."""
        return self.inserted_text + self.text


class Tree:
    """A search tree rooted at the problem.  Picklable; no deep copies needed."""

    def __init__(self, problem: str, response_prefix: str = "Step 1:") -> None:
        self.problem = problem
        self.response_prefix = response_prefix
        self.nodes: list[Node] = [Node(id=ROOT_ID, parent_id=None, depth=0, d=0)]
        self.answered_ids: list[int] = []
        self._answer_depth_sum = 0
        self._max_depth = 0
        self._width_by_depth: dict[int, int] = {0: 1}
        self._max_width = 1

    # ------------------------------------------------------------------ access
    @property
    def root(self) -> Node:
        return self.nodes[ROOT_ID]

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def children(self, node: Node) -> list[Node]:
        return [self.nodes[i] for i in node.children]

    def path(self, node: Node) -> list[Node]:
        """Nodes from the root's child down to `node` (the root excluded)."""
        out: list[Node] = []
        current: Node | None = node
        while current is not None and current.parent_id is not None:
            out.append(current)
            current = self.nodes[current.parent_id]
        out.reverse()
        return out

    def path_segments(self, node: Node) -> tuple[str, ...]:
        return tuple(n.segment for n in self.path(node))

    def assistant_text(self, node: Node) -> str:
        """The assistant turn so far: the prefilled prefix plus every segment."""
        return self.response_prefix + "".join(self.path_segments(node))

    @property
    def max_depth(self) -> int:
        return self._max_depth

    @property
    def max_width(self) -> int:
        """The largest number of nodes at one depth level."""
        return self._max_width

    @property
    def d_ans(self) -> float:
        """hat d_ans of Eq. 4.

        Running mean of d at which answers were completed (steps from the last
        answered ancestor, the same unit as d(x)); before the first answer, the
        maximum expanded depth.  Never below 1, so the ratio d/d_ans is finite.
        """
        if self.answered_ids:
            return max(1.0, self._answer_depth_sum / len(self.answered_ids))
        return float(max(1, self._max_depth))

    # ------------------------------------------------------------------ Eq. 4
    def w_tilde(self, node: Node, rho: float, kappa: float) -> float:
        """Corrected accumulated value W~(s, rho) = W + kappa (1 - rho) D / d_ans (Eq. 4)."""
        return node.w + kappa * (1.0 - rho) * node.d_sum / self.d_ans

    def child_mean_var(self, node: Node) -> tuple[float, float]:
        """mu(p) and sigma^2(p) of Q over the standard children (Eq. 5)."""
        count = len(node.children)
        if count == 0:
            return 0.0, 0.0
        mean = node.child_q_sum / count
        return mean, max(0.0, node.child_q_sqsum / count - mean * mean)

    def priors(self, node: Node) -> list[float]:
        """P(s | p) = softmax of sibling Q (Sec. 2), in `node.children` order."""
        qs = [self.nodes[i].q for i in node.children]
        if not qs:
            return []
        top = max(qs)
        exps = [math.exp(q - top) for q in qs]
        total = sum(exps)
        return [e / total for e in exps]

    # ------------------------------------------------------------------ growth
    def add_child(
        self,
        parent: Node,
        *,
        text: str,
        q: float,
        answered: bool,
        answer: str | None,
        finish: FinishReason,
        output_tokens: int,
        inserted_text: str = "",
        inserted_tokens: int = 0,
        full_generation: bool = False,
        from_generative: bool = False,
        iteration: int = 0,
        c_used: float = 0.0,
        error: str | None = None,
        score_context: Any = None,
    ) -> Node:
        """Attach an evaluated child and backpropagate m, W, D to the root (O(depth))."""
        if not 0.0 <= q <= 1.0 or math.isnan(q):
            raise ValueError(f"Q must lie in [0, 1], got {q!r}")
        steps_since_answer = (0 if parent.answered else parent.d) + 1
        node = Node(
            id=len(self.nodes),
            parent_id=parent.id,
            depth=parent.depth + 1,
            d=0 if answered else steps_since_answer,
            text=text,
            inserted_text=inserted_text,
            output_tokens=output_tokens,
            inserted_tokens=inserted_tokens,
            q=q,
            answered=answered,
            answer=answer,
            finish=finish,
            full_generation=full_generation,
            from_generative=from_generative,
            iteration=iteration,
            c_used=c_used,
            error=error,
            score_context=score_context,
            w=q,
            d_sum=0.0 if answered else float(steps_since_answer),
        )
        self.nodes.append(node)
        parent.children.append(node.id)
        parent.child_q_sum += q
        parent.child_q_sqsum += q * q
        self._backprop(parent, q, node.d_sum)
        if answered:
            self.answered_ids.append(node.id)
            self._answer_depth_sum += steps_since_answer
        self._max_depth = max(self._max_depth, node.depth)
        width = self._width_by_depth.get(node.depth, 0) + 1
        self._width_by_depth[node.depth] = width
        self._max_width = max(self._max_width, width)
        return node

    def _backprop(self, start: Node, q: float, d: float) -> None:
        current: Node | None = start
        while current is not None:
            current.m += 1
            current.w += q
            current.d_sum += d
            current = None if current.parent_id is None else self.nodes[current.parent_id]

    # ------------------------------------------------------------------ export
    def answered_nodes(self) -> list[Node]:
        return [self.nodes[i] for i in self.answered_ids]

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per node (parent id included) for Parquet and pictures."""
        return [
            {
                "node_id": n.id,
                "parent_id": n.parent_id,
                "depth": n.depth,
                "d": n.d,
                "text": n.text,
                "inserted_text": n.inserted_text,
                "output_tokens": n.output_tokens,
                "inserted_tokens": n.inserted_tokens,
                "q": n.q,
                "answered": n.answered,
                "answer": n.answer,
                "finish": None if n.finish is None else n.finish.value,
                "full_generation": n.full_generation,
                "from_generative": n.from_generative,
                "iteration": n.iteration,
                "c_used": n.c_used,
                "error": n.error,
                "m": n.m,
                "w": n.w,
                "d_sum": n.d_sum,
            }
            for n in self.nodes
        ]
