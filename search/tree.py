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

A node never changes after `add_child` except for its aggregates and its
children list, so the tree caches what depends only on a node's text and its
children's Q: the path segments of a node (built from its nearest cached
ancestor, kept for every node whose path was asked for) and the sibling
priors of a parent (rebuilt when it gains a child).  The caches are not
pickled.
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
    def empty(self) -> bool:
        """The step holds no text but white space: the engine answered with nothing, which
        is never a step of a committed tree nor of a training row."""
        return not self.text.strip()

    @property
    def segment(self) -> str:
        """This node's contribution to the trajectory text."""
        return self.inserted_text + self.text


# One parent's selection data: (children count when built, priors of all children,
# (child, prior) of every expandable child).
_Selection = tuple[int, list[float], list[tuple[Node, float]]]


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
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._segments: dict[int, tuple[str, ...]] = {ROOT_ID: ()}
        self._selection: dict[int, _Selection] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_segments"], state["_selection"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_caches()

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
        """The segments of `path(node)`; cached per node, built from the nearest cached ancestor."""
        cache = self._segments
        segments = cache.get(node.id)
        if segments is None:
            nodes = self.nodes
            chain: list[str] = []
            current = node
            while (cached := cache.get(current.id)) is None:
                chain.append(current.segment)
                parent_id = current.parent_id
                assert parent_id is not None  # the root is always cached
                current = nodes[parent_id]
            chain.reverse()
            segments = cached + tuple(chain)
            cache[node.id] = segments
        return segments

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
        entry = self._selection.get(node.id)
        if entry is None or entry[0] != len(node.children):
            entry = self._build_selection(node)
        return list(entry[1])

    def selectable_children(self, node: Node) -> list[tuple[Node, float]]:
        """(child, P(child | node)) for every expandable child, in `node.children` order.

        The priors are those of `priors` (a softmax over all children, failed
        ones included).  Cached until `node` gains a child: read, never modify.
        """
        entry = self._selection.get(node.id)
        if entry is None or entry[0] != len(node.children):
            entry = self._build_selection(node)
        return entry[2]

    def _build_selection(self, node: Node) -> _Selection:
        nodes = self.nodes
        children = [nodes[i] for i in node.children]
        priors: list[float] = []
        if children:
            qs = [child.q for child in children]
            top = max(qs)
            exps = [math.exp(q - top) for q in qs]
            total = sum(exps)
            priors = [e / total for e in exps]
        selectable = [(c, p) for c, p in zip(children, priors, strict=True) if c.expandable]
        entry = (len(children), priors, selectable)
        self._selection[node.id] = entry
        return entry

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
        if not 0.0 <= q <= 1.0:  # NaN fails this too
            raise ValueError(f"Q must lie in [0, 1], got {q!r}")
        steps_since_answer = (0 if parent.answered else parent.d) + 1
        depth = parent.depth + 1
        d_sum = 0.0 if answered else float(steps_since_answer)
        nodes = self.nodes
        # Positional, in field order: a 22-keyword call costs several times more.
        node = Node(
            len(nodes),  # id
            parent.id,  # parent_id
            depth,
            0 if answered else steps_since_answer,  # d
            text,
            inserted_text,
            output_tokens,
            inserted_tokens,
            q,
            answered,
            answer,
            finish,
            full_generation,
            from_generative,
            iteration,
            c_used,
            error,
            score_context,
            [],  # children
            1,  # m
            q,  # w
            d_sum,
        )
        nodes.append(node)
        parent.children.append(node.id)
        parent.child_q_sum += q
        parent.child_q_sqsum += q * q
        self._backprop(parent, q, d_sum)
        if answered:
            self.answered_ids.append(node.id)
            self._answer_depth_sum += steps_since_answer
        if depth > self._max_depth:
            self._max_depth = depth
        width = self._width_by_depth.get(depth, 0) + 1
        self._width_by_depth[depth] = width
        if width > self._max_width:
            self._max_width = width
        return node

    def _backprop(self, start: Node, q: float, d: float) -> None:
        nodes = self.nodes
        current = start
        while True:
            current.m += 1
            current.w += q
            current.d_sum += d
            parent_id = current.parent_id
            if parent_id is None:
                return
            current = nodes[parent_id]

    def add_virtual_visits(self, node: Node, visits: int) -> None:
        """A virtual loss on `node`'s path: `visits` more visits of value 0 up to the root.

        With several expansions of one tree in flight (`max_inflight_expansions`), the
        children a pending expansion will add are counted at once with Q = 0 (the worst
        value), so the next selection walk sees that path as visited and goes elsewhere;
        the driver takes them back (`visits` < 0) just before the real children land.
        """
        nodes = self.nodes
        current = node
        while True:
            current.m += visits
            parent_id = current.parent_id
            if parent_id is None:
                return
            current = nodes[parent_id]

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
