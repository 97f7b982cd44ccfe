"""Choosing the search's final answer among its answered nodes.

* highest_q (paper, Sec. 4.1): the answered node with the highest Q.
* majority (paper, Sec. 4.3, physics): the most frequent answer.
* q_weighted: the answer with the largest sum of Q.

Only nodes with an extracted answer compete.  Ties go to the answer reached
first.  The tally is incremental so the anytime trace costs O(1) per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from search.config import AnswerRule
from search.tree import Node


def normalize_answer(answer: str) -> str:
    return " ".join(answer.split())


@dataclass(slots=True)
class AnswerTally:
    rule: AnswerRule
    best_node: Node | None = None
    _count: dict[str, int] = field(default_factory=dict)
    _q_sum: dict[str, float] = field(default_factory=dict)
    _best_by_answer: dict[str, Node] = field(default_factory=dict)

    def add(self, node: Node) -> None:
        if not node.answered or node.answer is None:
            return
        key = normalize_answer(node.answer)
        self._count[key] = self._count.get(key, 0) + 1
        self._q_sum[key] = self._q_sum.get(key, 0.0) + node.q
        held = self._best_by_answer.get(key)
        if held is None or node.q > held.q:
            self._best_by_answer[key] = node
        if self.best_node is None or node.q > self.best_node.q:
            self.best_node = node

    @property
    def answer(self) -> str | None:
        node = self.chosen_node
        return None if node is None else normalize_answer(node.answer or "")

    @property
    def chosen_node(self) -> Node | None:
        """The node that carries the chosen answer (its best-Q node for votes)."""
        if self.rule is AnswerRule.HIGHEST_Q or not self._count:
            return self.best_node
        weight = self._count if self.rule is AnswerRule.MAJORITY else self._q_sum
        # dicts keep insertion order, so max() keeps the answer reached first on ties
        key = max(weight, key=lambda a: weight[a])
        return self._best_by_answer[key]

    def votes(self) -> dict[str, int]:
        return dict(self._count)
