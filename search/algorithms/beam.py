"""Step-level beam search, the beam-style baseline of the paper's App. H.

Beam width W = 5, branching factor K = 10 (App. H).  The root is the
only beam at the start.  Each step expands every active beam once with K
children (one request of n = K per beam; the driver runs them concurrently),
then keeps the top-W children of the whole step by Q (ties: lower id).  Kept
children that reached an answer are finished and never expanded; the other
kept children become the next step's beams.  The search ends when no beam is
left, which may leave part of the budget unused: "it expands and prunes only
the current frontier, rather than revisiting arbitrary internal nodes" (App. H).

Points App. H leaves open and how they are read here:

* Finished (answered) hypotheses keep their slot among the W kept children,
  so the beam narrows as answers are found (the usual "finished hypotheses"
  variant); they are not continued with the continuation prompt.
* Failed and context-overflowed children (`Node.expandable` false) are no
  candidates: they can neither be expanded nor carry an answer, so they are
  dropped before the top-W cut instead of taking a slot.
* Pruning ranks the children of one step only (the frontier), never older
  nodes; beams from different parents compete in one pool.
* Near the end of the budget the driver may drop trailing choices or whole
  trailing expansions.  A step is complete when every expansion proposed for
  it has been observed, or, failing that, when `propose` is called again;
  either way the kept set is formed from the children that exist.
"""

from __future__ import annotations

from search.algorithms.base import Expansion, SearchAlgorithm
from search.budget import Budget
from search.config import BeamConfig
from search.tree import ROOT_ID, Node, Tree


class BeamSearch(SearchAlgorithm):
    name = "beam"

    def __init__(self, config: BeamConfig) -> None:
        self.width = config.width
        self.branching = config.branching
        self.unit = config.node_unit
        self.beams: list[int] = [ROOT_ID]  # the next step's beams
        self.finished: list[int] = []  # answered nodes kept by a step
        self.steps = 0  # completed steps
        self._pending: set[int] = set()  # beams proposed this step, not yet observed
        self._step_children: list[Node] = []
        self._in_step = False

    @classmethod
    def from_config(cls, config: BeamConfig, seed: int = 0) -> BeamSearch:
        return cls(config)

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        if self._in_step:  # some expansions of the last step never came back
            self._finish_step()
        if not self.beams:
            return []
        self._in_step = True
        self._pending = set(self.beams)
        self._step_children = []
        return [Expansion(beam, self.branching, self.unit) for beam in self.beams]

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:
        if not self._in_step or expansion.node_id not in self._pending:
            return
        self._pending.discard(expansion.node_id)
        self._step_children.extend(children)
        if not self._pending:
            self._finish_step()

    def _finish_step(self) -> None:
        """Keep the step's top-W children by Q; answered ones finish, the rest are beams."""
        candidates = [c for c in self._step_children if c.expandable]
        kept = sorted(candidates, key=lambda c: (-c.q, c.id))[: self.width]
        self.finished.extend(c.id for c in kept if c.answered)
        self.beams = [c.id for c in kept if not c.answered]
        self.steps += 1
        self._in_step = False
        self._pending = set()
        self._step_children = []
