"""AB-MCTS-M and AB-MCTS-A (Inoue et al., 2025) through `treequest` 0.3.3.

treequest decides, the driver generates.  Each `propose` asks treequest once
(`ask`, one action named ``"gen"``) and turns the trial into one expansion of
one child; `observe` tells treequest that child's Q.  Our tree node id is the
treequest node state (the root's state is None), so treequest's tree mirrors
ours node for node.  Exactly one trial is in flight at a time.

Choices the paper and treequest leave open:

* A failed child (`Node.expandable` is False: generation error, context
  overflow, scorer failure) is told with score 0, so treequest learns that
  the branch fails and never waits on the trial.
* treequest may still select a failed node to expand (its score is low, not
  excluded).  Such a node is never sent to the driver.  Each time it is
  picked, treequest is told a *virtual* failed child of it (score 0, state a
  negative id, nothing generated or charged), so repeated picks pile up
  zeros (four equal scores in a subtree make AB-MCTS-M's pruning skip it).
  Then treequest is asked again, up to `max_reasks` times per proposal
  (default 3 for AB-MCTS-A, whose asks are cheap, and 0 for AB-MCTS-M, whose
  asks cost MCMC fits); after that the trial goes to the nearest expandable
  ancestor (usually the failed node's parent: a fresh attempt at the step
  that failed), created through treequest's trial store so both trees keep
  the same shape.  `n_virtual` counts virtual nodes (treequest's tree has
  ``len(tree) + n_virtual`` nodes) and `n_fallbacks` the redirected trials.
* A call to `observe` with no children (the driver dropped the request for
  budget) keeps the trial in flight and proposes it again.
* AB-MCTS-M runs treequest's "multiarm_bandit_ucb" strategy: with our single
  action it makes the same GEN/CONT choice as the default Thompson strategy
  but skips an MCMC fit whose only possible outcome is the one action.
  treequest's joblib pool (only used by `ask_batch` with a batch > 1) is
  limited to one worker; we never batch.

Seeding: AB-MCTS-A draws from NumPy's global RandomState (scipy `rvs`,
`np.random.normal`); AB-MCTS-M draws Thompson samples from it too, and seeds
its NUTS and predictive sampling from fresh OS entropy unless told otherwise.
Each search owns a private RandomState seeded from `seed`.

* AB-MCTS-A: treequest 0.3.3 draws only in `ProbabilisticDist.draw_sample`
  (`beta.rvs`, `invgamma.rvs`, `np.random.normal` of
  `treequest.algos.ab_mcts_a.prob_state`).  Wrappers installed once into that
  module hand those draws the search's RandomState during an `ask`/`tell`
  (a ContextVar switches them on; outside a seeded call they change
  nothing).  The draws are the very ones the global RandomState would give
  in the private state, and NumPy's global RandomState is never touched.
  (Copying a RandomState's state in and out costs about 35 us a copy, four
  copies a call: most of AB-MCTS-A's own time before.)
* AB-MCTS-M: during every `ask`/`tell` this module swaps the private state
  into NumPy's global RandomState (and restores the caller's state after),
  and treequest's PyMC calls take their `random_seed` from it (the wrappers
  are installed once into `treequest.algos.ab_mcts_m.pymc_interface` and
  change nothing outside a seeded call: a ContextVar switches them on).  It
  is not reproducible if another thread uses NumPy's global RandomState
  during a decision.

With the same seed, policy and scorer a search is reproducible.

Cost (measured on a 2-core AMD EPYC, CPU JAX, otherwise idle): AB-MCTS-A
decides in 1-4 ms a step, driver included, on trees of up to 2,400 nodes.
AB-MCTS-M fits its Bayesian model with NUTS (4 chains) at every internal node
on the selection path, each fit 3-5 s, almost all of it XLA compiling (every
fit builds a new model): a step took 3.5-13 s on trees of 5-15 nodes, 4-25 s
on random-score trees of up to 30 nodes, and one step 45 s of CPU on a deep
13-node sequential tree; the first fit in a process adds about 3 s of JAX
start-up.  Importing treequest loads JAX and PyMC when they are installed
(about 4 s), and PyMC compiles into ``~/.pytensor``.  AB-MCTS-M needs
``pip install 'treequest[abmcts-m]==0.3.3'``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from search.algorithms.base import Expansion, SearchAlgorithm
from search.budget import Budget
from search.config import ABMCTSConfig
from search.tree import ROOT_ID, Node, Tree

if TYPE_CHECKING:
    from treequest import ABMCTSA, ABMCTSM, Algorithm

ACTION = "gen"

_SEEDED: ContextVar[bool] = ContextVar("ab_mcts_seeded", default=False)
# AB-MCTS-A: the RandomState of the search whose ask/tell is running, else None.
_RNG: ContextVar[np.random.RandomState | None] = ContextVar("ab_mcts_a_rng", default=None)
_F = TypeVar("_F", bound=Callable[..., Any])


def _with_seed(fn: _F) -> _F:
    """`fn` with `random_seed` drawn from NumPy's global RandomState inside a seeded call."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _SEEDED.get() and kwargs.get("random_seed") is None:
            kwargs["random_seed"] = int(np.random.randint(2**30))
        return fn(*args, **kwargs)

    wrapper.ab_mcts_seeded = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class _SeededPyMC:
    """The `pymc` module as treequest's PyMC interface sees it, predictive sampling seeded."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.sample_prior_predictive = _with_seed(module.sample_prior_predictive)
        self.sample_posterior_predictive = _with_seed(module.sample_posterior_predictive)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _install_pymc_seeding() -> None:
    """Idempotent: let treequest's AB-MCTS-M sampling take seeds from a seeded call."""
    from treequest.algos.ab_mcts_m import pymc_interface

    module: Any = pymc_interface
    if not getattr(module.sample_numpyro_nuts, "ab_mcts_seeded", False):
        module.sample_numpyro_nuts = _with_seed(module.sample_numpyro_nuts)
    if not isinstance(module.pm, _SeededPyMC):
        module.pm = _SeededPyMC(module.pm)


class _SeededDistribution:
    """A scipy.stats distribution whose `rvs` draws from the running AB-MCTS-A search's RNG."""

    def __init__(self, distribution: Any) -> None:
        self._distribution = distribution

    def rvs(self, *args: Any, **kwargs: Any) -> Any:
        rng = _RNG.get()
        if rng is not None and kwargs.get("random_state") is None:
            kwargs["random_state"] = rng
        return self._distribution.rvs(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._distribution, name)


class _SeededNumpy:
    """`numpy` whose `random` is the running AB-MCTS-A search's RNG (else `numpy.random`)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    @property
    def random(self) -> Any:
        rng = _RNG.get()
        return self._module.random if rng is None else rng

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _install_prob_state_seeding() -> None:
    """Idempotent: route AB-MCTS-A's draws to the running search's RandomState (see above)."""
    from treequest.algos.ab_mcts_a import prob_state

    module: Any = prob_state
    for name in ("beta", "invgamma"):
        if not isinstance(getattr(module, name), _SeededDistribution):
            setattr(module, name, _SeededDistribution(getattr(module, name)))
    if not isinstance(module.np, _SeededNumpy):
        module.np = _SeededNumpy(module.np)


def _make_treequest(config: ABMCTSConfig) -> Algorithm[int, Any]:
    import treequest

    if config.algorithm == "ab_mcts_a":
        algo_a: ABMCTSA[int] = treequest.ABMCTSA(dist_type=config.dist_type)
        _install_prob_state_seeding()
        return algo_a
    try:
        algo: ABMCTSM[int] = treequest.ABMCTSM(
            enable_pruning=config.enable_pruning,
            model_selection_strategy="multiarm_bandit_ucb",
            max_process_workers=1,
        )
    except ImportError as exc:
        raise ImportError(
            "AB-MCTS-M needs jax, numpyro and pymc: pip install 'treequest[abmcts-m]==0.3.3'"
        ) from exc
    _install_pymc_seeding()
    return algo


@dataclass(frozen=True, slots=True)
class _Pending:
    trial_id: str
    node_id: int  # our id of the node to expand
    tq_index: int  # treequest's expand_idx of the same node


class ABMCTS(SearchAlgorithm):
    """AB-MCTS-M or AB-MCTS-A (by `config.algorithm`) deciding for our driver."""

    def __init__(self, config: ABMCTSConfig, seed: int = 0, *, max_reasks: int | None = None):
        if max_reasks is None:
            max_reasks = 3 if config.algorithm == "ab_mcts_a" else 0
        if max_reasks < 0:
            raise ValueError(f"max_reasks must be >= 0, got {max_reasks}")
        self.name = config.algorithm
        self.unit = config.node_unit
        self.max_reasks = max_reasks
        rng = np.random.RandomState(seed % 2**32)
        # AB-MCTS-A draws from `rng` itself; AB-MCTS-M swaps its state in and out.
        self._rng: np.random.RandomState | None = rng if config.algorithm == "ab_mcts_a" else None
        self._rng_state: Any = None if self._rng is not None else rng.get_state()
        self._algo = _make_treequest(config)
        self._state: Any = self._algo.init_tree()
        self._pending: _Pending | None = None
        self.n_virtual = 0
        self.n_fallbacks = 0  # trials redirected to an expandable ancestor

    @classmethod
    def from_config(cls, config: ABMCTSConfig, seed: int = 0) -> ABMCTS:
        return cls(config, seed=seed)

    # ------------------------------------------------------------ treequest
    @contextmanager
    def _seeded(self) -> Iterator[None]:
        if self._rng is not None:
            rng_token = _RNG.set(self._rng)
            try:
                yield
            finally:
                _RNG.reset(rng_token)
            return
        saved = np.random.get_state()
        np.random.set_state(self._rng_state)
        token = _SEEDED.set(True)
        try:
            yield
        finally:
            _SEEDED.reset(token)
            self._rng_state = np.random.get_state()
            np.random.set_state(saved)

    def _ask(self) -> Any:
        with self._seeded():
            self._state, trial = self._algo.ask(self._state, [ACTION])
        return trial

    def _tell(self, trial_id: str, state: int, score: float) -> None:
        with self._seeded():
            self._state = self._algo.tell(self._state, trial_id, (state, score))

    def _tq_node(self, index: int) -> Any:
        return self._state.tree.get_node(index)

    def _new_trial(self, tq_node: Any) -> Any:
        """A trial for a node treequest did not pick (fallbacks, extra children)."""
        return self._state.trial_store.create_trial(tq_node, ACTION)

    @staticmethod
    def _our_id(state: int | None) -> int:
        return ROOT_ID if state is None else state

    @property
    def treequest_size(self) -> int:
        """Nodes in treequest's tree, its root and virtual nodes included."""
        return len(self._state.tree)

    def treequest_parents(self) -> dict[int, int]:
        """Our id -> our parent id for every real node treequest holds (the mirror of `Tree`)."""
        parents: dict[int, int] = {}
        for tq_node in self._state.tree.get_nodes():
            if tq_node.parent is None or tq_node.state < 0:
                continue
            parents[tq_node.state] = self._our_id(tq_node.parent.state)
        return parents

    # ------------------------------------------------------------ decisions
    def _decide(self, tree: Tree) -> _Pending:
        for _ in range(self.max_reasks + 1):
            trial = self._ask()
            node_id = self._our_id(trial.parent_state)
            if node_id >= 0 and tree[node_id].expandable:
                return _Pending(trial.trial_id, node_id, trial.node_to_expand)
            # Never expand a failed (or virtual) node: tell treequest it fails again.
            self.n_virtual += 1
            self._tell(trial.trial_id, -self.n_virtual, 0.0)
        # Still a failed node: expand its nearest expandable ancestor instead.
        tq_node = self._tq_node(trial.node_to_expand)
        while tq_node.parent is not None:
            state = tq_node.state
            if state >= 0 and tree[state].expandable:
                break
            tq_node = tq_node.parent
        self.n_fallbacks += 1
        trial = self._new_trial(tq_node)
        return _Pending(trial.trial_id, self._our_id(tq_node.state), trial.node_to_expand)

    def propose(self, tree: Tree, budget: Budget) -> list[Expansion]:
        if self._pending is None:
            self._pending = self._decide(tree)
        return [Expansion(self._pending.node_id, 1, self.unit)]

    def observe(self, tree: Tree, expansion: Expansion, children: list[Node]) -> None:
        pending = self._pending
        if pending is None or expansion.node_id != pending.node_id or not children:
            return  # nothing generated: the same trial is proposed again
        self._pending = None
        trial_id = pending.trial_id
        for i, child in enumerate(children):
            if i:  # n is always 1 here; any extra child gets its own trial, same parent
                trial_id = self._new_trial(self._tq_node(pending.tq_index)).trial_id
            score = min(1.0, max(0.0, child.q)) if child.expandable else 0.0
            self._tell(trial_id, child.id, score)


__all__ = ["ABMCTS", "ACTION"]
