"""LiteSearch (Wang et al. 2024) as the paper's baseline (Sec. 4.1, App. C, App. I).

Every node x gets an expansion budget

    b(x) = min(max_width, max(1, ceil(C / depth(x)))),  C = min{C : 1 - (1 - v(x))^C > epsilon}

(`search.formulas.litesearch_width`), with v(x) = Q(x) and epsilon = 0.9.  Each
step selects, among the nodes that can still be expanded and have fewer than
b(x) children, the one with the highest value, and expands it:

* incremental mode: one child per step (one request, n = 1), then select again;
* batch mode: all the node's remaining room at once (one request, n = b(x) - |children|).

The search ends early (App. C, App. I) once an answered node with an extracted
answer scores Q > early_stop_threshold (0.9), and ends when no node has room
left; the budget may then stay partly unused, as the paper reports for
LiteSearch (Sec. 4.2).  The paper disables LiteSearch's greedy pre-generation
to align token counting (Sec. 4.1), so there is none here.

Points of LiteSearch this implementation had to interpret:

* v(x) is the reward model's Q(x) alone, for both the width and the
  selection.  The original LiteSearch scores a node by its value network's
  estimate (the "future") together with the search progress so far (the
  "history"); the paper's setting has one process reward model (Sec. 4.1)
  and no value network, so Q stands for both.
* The root (the bare problem) has no score: it counts as v = 0 and depth 1,
  so it gets the maximum width and is the first node selected.  Every other
  node uses its absolute depth (a root child has depth 1).
* Failed and context-overflowed nodes (`Node.expandable` false) are never
  selected; their Q (0) still counts them as children of their parent, so a
  failed generation uses one unit of the parent's room.
* Answered nodes stay selectable: the paper continues any answered node with
  its continuation prompt (Sec. 4.1), and the driver does that for every
  algorithm.  The config's `expand_answered: false` treats them as terminal instead, as the
  original LiteSearch does.
* Ties in value go to the lowest node id (the earliest created).
* When the driver drops trailing choices near the end of the budget, a batch
  expansion may come back short; the node then keeps the missing room and can
  be selected again.

Under `conventions: reference` the width is truncated instead of rounded up
(`litesearch_width_truncated`, as lite_search_incremental.py and
lite_search_batch.py of the released code compute it), and the driver
generates a batch expansion one child per request.

Selection is O(log N) per step: a max-heap of (-v, id) holds every candidate.
A node's value never changes, so neither does b(x); an entry is removed lazily
when its node is found full at the top of the heap.
"""

from __future__ import annotations

import heapq

from search.algorithms.base import Expansion, SearchAlgorithm
from search.budget import Budget
from search.config import LiteSearchConfig
from search.formulas import litesearch_width, litesearch_width_truncated
from search.tree import ROOT_ID, Node, Tree


class LiteSearch(SearchAlgorithm):
    """LiteSearch-Incre. / LiteSearch-Batch of the paper's Table 1."""

    def __init__(self, config: LiteSearchConfig, *, expand_answered: bool | None = None) -> None:
        self.config = config
        self.mode = config.mode
        self.name = f"litesearch_{config.mode}"
        self.unit = config.node_unit
        self.expand_answered = (
            config.expand_answered if expand_answered is None else expand_answered
        )
        self._heap: list[tuple[float, int]] = []  # (-v(x), x.id): a max-heap on value
        self._synced = 0  # nodes with id < _synced have been registered
        self._best_answer_q = -1.0
        self._width_rule = litesearch_width_truncated if config.reference else litesearch_width

    @classmethod
    def from_config(cls, config: LiteSearchConfig, seed: int = 0) -> LiteSearch:
        return cls(config)

    # ------------------------------------------------------------------ rule
    def value(self, node: Node) -> float:
        """v(x): Q(x), and 0 for the unscored root."""
        return 0.0 if node.id == ROOT_ID else node.q

    def width(self, node: Node) -> int:
        """b(x), LiteSearch's expansion budget (the root: v = 0, depth 1 -> max width)."""
        depth = max(1, node.depth)
        return self._width_rule(self.value(node), depth, self.config.epsilon, self.config.max_width)

    def room(self, node: Node) -> int:
        """How many more children `node` may get: b(x) - |children|, at least 0."""
        return max(0, self.width(node) - len(node.children))

    def is_candidate(self, node: Node) -> bool:
        if not node.expandable:
            return False
        return self.expand_answered or not node.answered

    # ------------------------------------------------------------------ state
    def _sync(self, tree: Tree) -> None:
        """Register every node created since the last call (O(new nodes x log N)).

        Node ids are dense and increasing, so this also picks up nodes of a
        hand-built tree and of expansions whose `observe` never came.
        """
        for node_id in range(self._synced, len(tree)):
            node = tree[node_id]
            if node.answered and node.answer is not None:
                self._best_answer_q = max(self._best_answer_q, node.q)
            if self.is_candidate(node):
                heapq.heappush(self._heap, (-self.value(node), node.id))
        self._synced = max(self._synced, len(tree))

    def select(self, tree: Tree) -> Node | None:
        """The highest-valued candidate with room (lowest id on ties), or None."""
        self._sync(tree)
        while self._heap:
            node = tree[self._heap[0][1]]
            if self.room(node) > 0:
                return node
            heapq.heappop(self._heap)  # full for good: v(x), hence b(x), never changes
        return None

    # ------------------------------------------------------------------ API
    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        node = self.select(tree)
        if node is None:
            return []
        n = 1 if self.mode == "incremental" else self.room(node)
        return [Expansion(node.id, n, self.unit)]

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:
        self._sync(tree)

    def should_stop(self, tree: Tree, budget: Budget) -> bool:
        """App. C / App. I: stop once an answered node scores Q > the threshold."""
        self._sync(tree)
        return self.config.early_stop and self._best_answer_q > self.config.early_stop_threshold

    @property
    def best_answer_q(self) -> float:
        """The highest Q of an answered node seen so far (-1 before any)."""
        return self._best_answer_q

    @property
    def heap_size(self) -> int:
        """Entries in the candidate heap, stale ones included (for tests)."""
        return len(self._heap)
