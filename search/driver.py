"""The async driver: one search of one problem under a fixed budget B.

The driver owns generation, scoring, the budget and the clock; the algorithm
only decides (see `search.algorithms.base`).  Loop (the paper's Algorithm 1):

    while budget left:  expansions = propose(tree, rho)
                        generate children (one request per expansion, n choices)
                        score them concurrently, add them (backprop), observe

Each request's per-choice `max_tokens` is clipped so that the request can never
push C_used past B, which makes `C_used <= B` an invariant rather than a hope.

With `max_inflight_expansions` above 1 (BG-MCTS and MCTS) the loop keeps up to that
many expansions of the tree in flight: each pending expansion reserves its largest
cost (max_tokens x choices, fixed charges and the score reserve) before it is sent, and
its path carries a virtual loss (`Tree.add_virtual_visits`) so the next selection goes
elsewhere; when a result lands the reservation is released part by part, each part
just before the real cost it stood for is charged, so C_used + reserved <= B at every
instant, whatever order the results arrive in.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import types
from collections.abc import Coroutine, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from search.algorithms import make_algorithm
from search.algorithms.base import Expansion, SearchAlgorithm
from search.answer_choice import AnswerTally, normalize_answer
from search.answers import answer_span, extract_answer, is_answered
from search.budget import Budget, BudgetViolation, Reservation
from search.config import NodeUnit, SearchConfig
from search.protocols import (
    FinishReason,
    Generation,
    GenerationRequest,
    Policy,
    Score,
    Scorer,
    ScoreRequest,
    TokenCounts,
)
from search.tree import Node, Tree

_UNSCORED = (FinishReason.ERROR, FinishReason.CONTEXT_OVERFLOW)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class TracePoint:
    """The search's state after one step; accuracy-vs-tokens curves read these."""

    iteration: int
    c_used: float
    rho: float
    n_nodes: int
    n_answered: int
    any_answer: bool
    best_answer: str | None
    best_q: float | None
    max_depth: int
    max_width: int
    generative: int  # expansions made through the virtual generative child this step


@dataclass(slots=True)
class SearchResult:
    problem: str
    algorithm: str
    seed: int
    budget: float
    c_used: float
    tree: Tree
    chosen_answer: str | None
    chosen_node_id: int | None
    tokens: TokenCounts
    trace: list[TracePoint]
    stop_reason: str
    iterations: int
    wall_time_s: float
    votes: dict[str, int] = field(default_factory=dict)

    @property
    def answered_nodes(self) -> list[Node]:
        return self.tree.answered_nodes()


@dataclass(slots=True)
class _Pending:
    """What one in-flight expansion holds: its reservation and the virtual loss on its path."""

    reservation: Reservation
    nodes: list[tuple[Node, int]]  # (parent, virtual visits) per plan
    spent: float = 0.0  # what its request and scores were charged

    def drop_virtual(self, tree: Tree) -> None:
        for node, visits in self.nodes:
            tree.add_virtual_visits(node, -visits)
        self.nodes = []


@dataclass(slots=True)
class _Plan:
    expansion: Expansion
    parent: Node
    inserted_text: str
    inserted_tokens: int
    input_tokens: int  # the prompt as charged: 0 while prompts are free (`_charged_prompt`)
    stop: tuple[str, ...]
    cap: int
    n: int
    max_tokens: int = 0


@dataclass(frozen=True, slots=True)
class _Draft:
    """One generated child before it is scored and added to the tree."""

    index: int  # its plan's index in the step
    generation: Generation
    answered: bool
    answer: str | None
    scored: bool  # False for a failed generation: it gets no score request
    answer_end: int | None = None  # where its text's answer statement ends (answered only)


def derive_seed(seed: int, *parts: object) -> int:
    """A stable 31-bit seed from a base seed and any labels (no Python hash salt)."""
    digest = hashlib.blake2b(repr((seed, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class _Search:
    def __init__(
        self,
        problem: str,
        config: SearchConfig,
        policy: Policy,
        scorer: Scorer,
        budget: float,
        seed: int,
        algorithm: SearchAlgorithm | None,
    ) -> None:
        self.config = config
        self.policy = policy
        self.scorer = scorer
        self.seed = seed
        self.tree = Tree(problem, config.response_prefix)
        cost = config.cost
        self.budget = Budget(
            total=budget,
            cost=cost,
            max_score_tokens=(cost.prm_reserve_input_tokens, cost.prm_reserve_output_tokens),
        )
        self.algorithm = algorithm or make_algorithm(config, seed=seed)
        self.tally = AnswerTally(config.answer_rule)
        self.trace: list[TracePoint] = []
        self._token_cache: dict[str, int] = {}
        self._policy_calls = _Calls()
        self._scorer_calls = _Calls()

    # -------------------------------------------------------------- planning
    async def _count(self, text: str) -> int:
        if text not in self._token_cache:
            self._token_cache[text] = await self.policy.count_tokens(text)
        return self._token_cache[text]

    async def _plan(self, expansion: Expansion) -> _Plan:
        config = self.config
        parent = self.tree[expansion.node_id]
        if expansion.unit is NodeUnit.SEQUENTIAL:
            stop: tuple[str, ...] = (config.step_boundary,)
            cap = config.step_max_tokens
        else:
            stop, cap = (), config.full_max_tokens
        inserted, charged = "", 0
        if parent.answered:
            # Sec. 4.1: continue an answered node with the continuation prompt; the
            # search wrote these tokens, so they are charged like output.
            tail = config.step_boundary if expansion.unit is NodeUnit.SEQUENTIAL else "\n"
            inserted = f"\n{config.continuation_prompt}{tail}"
            charged = (
                await self._count(inserted)
                if config.continuation_charge is None
                else config.continuation_charge
            )
        elif parent.finish is FinishReason.STOP_STRING:
            # The model generated (and paid for) the boundary; put it back verbatim.
            inserted = config.step_boundary
        if parent.parent_id is None:
            # The prefilled "Step 1:" is free under `paper`; the released code charges it.
            charged += config.root_child_charge
        input_tokens = 0
        if self.budget.cost.policy_input > 0:
            prefix = self.tree.assistant_text(parent) + inserted
            input_tokens = await self._count_prompt(prefix)
        return _Plan(expansion, parent, inserted, charged, input_tokens, stop, cap, expansion.n)

    async def _count_prompt(self, assistant_prefix: str) -> int:
        counter = getattr(self.policy, "prompt_tokens", None)
        if counter is not None:
            return int(await counter(self.tree.problem, assistant_prefix))
        return await self._count(self.tree.problem) + await self._count(assistant_prefix)

    def _size(self, plans: list[_Plan]) -> list[_Plan]:
        """Give every choice the same token share of what is left; drop choices that cannot fit."""
        plans = [p for p in plans if p.n > 0]
        while plans:
            choices = sum(p.n for p in plans)
            share = self.budget.max_tokens_per_choice(
                n=choices,
                cap=max(p.cap for p in plans),
                inserted_tokens=sum(p.inserted_tokens * p.n for p in plans),
                input_tokens=sum(p.input_tokens for p in plans),
            )
            if share >= 1:
                for p in plans:
                    p.max_tokens = min(p.cap, share)
                return plans
            plans[-1].n -= 1
            if plans[-1].n == 0:
                plans.pop()
        return []

    # -------------------------------------------------------------- execution
    async def _generate(self, plan: _Plan) -> list[Generation]:
        config = self.config
        temperature = plan.expansion.temperature
        request = GenerationRequest(
            problem=self.tree.problem,
            assistant_prefix=self.tree.assistant_text(plan.parent) + plan.inserted_text,
            n=plan.n,
            max_tokens=plan.max_tokens,
            stop=plan.stop,
            temperature=config.temperature if temperature is None else temperature,
            seed=derive_seed(self.seed, "request", self.budget.count_policy_request()),
        )
        try:
            generations = list(await self.policy.generate(request))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed request fails its nodes, not the search
            message = f"policy request failed: {type(exc).__name__}: {exc}"
            return [Generation("", 0, FinishReason.ERROR, error=message)] * plan.n
        if len(generations) != plan.n:
            message = f"policy returned {len(generations)} choices for n={plan.n}"
            generations = (
                generations + [Generation("", 0, FinishReason.ERROR, error=message)] * plan.n
            )[: plan.n]
        for g in generations:
            if g.output_tokens > plan.max_tokens or g.output_tokens < 0:
                raise BudgetViolation(
                    f"policy {self.policy.name!r} reported {g.output_tokens} output tokens "
                    f"for max_tokens={plan.max_tokens}"
                )
        return generations

    async def _score(
        self,
        parent: Node,
        segment: str,
        answered: bool,
        answer: str | None,
        full: bool,
        answer_end: int | None = None,
    ) -> Score:
        reserve = self.budget.score_reserve()
        request = ScoreRequest(
            problem=self.tree.problem,
            path=(*self.tree.path_segments(parent), segment),
            parent_context=parent.score_context,
            answered=answered,
            answer=answer,
            full_generation=full,
            max_cost=reserve,
            parent_answered=parent.answered,
            answer_end=answer_end,
        )
        self.budget.count_score_request()
        try:
            score = await self.scorer.score(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return Score(0.0, error=f"scorer failed: {type(exc).__name__}: {exc}")
        if not 0.0 <= score.value <= 1.0:  # also catches NaN
            return Score(0.0, error=f"scorer returned Q={score.value!r}, outside [0, 1]")
        cost = self.budget.score_cost(score.input_tokens, score.output_tokens)
        if cost > reserve + 1e-9:
            raise BudgetViolation(
                f"scorer {self.scorer.name!r} spent {cost:g} cost units, more than its {reserve:g}"
            )
        return score

    def _charged_prompt(self, plan: _Plan, generations: list[Generation]) -> int | None:
        """The request's prompt tokens as the budget charges them (counted once per
        request: its n choices share one prompt), or None for the engine's own count.

        Charged (`cost.policy_input` > 0): the count the request was sized by before it
        was sent (`_plan`), so C_used is always the weighted sum of the counters.  Not
        charged (the paper's budget): None, what the engine reported with its answer,
        which costs nothing to read; the weight 0 keeps it out of C_used.  An engine that
        reports none (an OpenAI-compatible server without `usage`) leaves it 0: a
        tokenizer call per request for a figure that nothing charges would slow every
        search.
        """
        if self.budget.cost.policy_input > 0:
            return plan.input_tokens if generations else 0
        return None

    def _max_generation_cost(self, plan: _Plan) -> float:
        """The most a plan's request can be charged (what `_size` sized it against)."""
        cost = self.budget.cost
        return (
            plan.max_tokens + plan.inserted_tokens
        ) * plan.n * cost.policy_output + plan.input_tokens * cost.policy_input

    async def _step(
        self,
        iteration: int,
        plans: list[_Plan],
        observe: bool = True,
        pending: _Pending | None = None,
    ) -> tuple[list[Node], int]:
        """One expansion step: generate every plan's children, charge them, score them,
        charge the scores, then add the children to the tree (in plan order)."""
        c_before = self.budget.used
        results = await self._policy_calls.gather([self._generate(p) for p in plans])
        self._charge_generations(plans, results, pending)
        drafts = self._drafts(results)
        full = [plan.expansion.unit is NodeUnit.FULL for plan in plans]
        scores = await self._scorer_calls.gather(
            [
                self._score(
                    plans[d.index].parent,
                    plans[d.index].inserted_text + d.generation.text,
                    d.answered,
                    d.answer,
                    full[d.index],
                    None
                    if d.answer_end is None
                    else len(plans[d.index].inserted_text) + d.answer_end,
                )
                if d.scored
                else _no_score()
                for d in drafts
            ]
        )
        self._charge_scores(scores, pending)
        added, children = self._add_children(iteration, plans, drafts, scores, full, c_before)
        if observe:
            for plan, nodes in zip(plans, children, strict=True):
                self.algorithm.observe(self.tree, plan.expansion, nodes)
        generative = sum(p.expansion.from_generative for p in plans)
        return added, generative

    def _charge_generations(
        self, plans: list[_Plan], results: list[list[Generation]], pending: _Pending | None
    ) -> None:
        """Charge each request's real cost.  In flight, the request's share of the
        reservation is released just before its charge, so C_used + reserved never
        passes B, and what the charge added is booked as the expansion's spend."""
        budget = self.budget
        for plan, generations in zip(plans, results, strict=True):
            if pending is not None:  # release what this request held, then charge it
                pending.reservation.release(self._max_generation_cost(plan))
                pending.spent -= budget.used
            counts = TokenCounts.of_request(
                generations,
                input_tokens=self._charged_prompt(plan, generations),
                inserted_tokens=plan.inserted_tokens * len(generations),
            )
            budget.charge(counts, "policy request")
            if pending is not None:
                pending.spent += budget.used

    def _drafts(self, results: list[list[Generation]]) -> list[_Draft]:
        """One draft per generated child, in plan order: whether it is answered (and what
        the answer is) and whether it gets scored at all (failed generations do not)."""
        extraction = self.config.answer_extraction
        drafts: list[_Draft] = []
        for index, generations in enumerate(results):
            for g in generations:
                scored = g.finish not in _UNSCORED
                answered = scored and is_answered(g.text, g.finish, extraction)
                answer = extract_answer(g.text, extraction) if answered else None
                span = answer_span(g.text, extraction) if answered else None
                end = None if span is None else span.end
                drafts.append(_Draft(index, g, answered, answer, scored, end))
        return drafts

    def _charge_scores(self, scores: list[Score], pending: _Pending | None) -> None:
        """Charge the real score costs.  In flight, the rest of the reservation (the score
        reserve) is closed first and the virtual loss dropped, since the real children
        are about to replace the virtual visits."""
        budget = self.budget
        if pending is not None:  # the score reserve, then the real score costs
            pending.reservation.close()
            pending.drop_virtual(self.tree)  # the real children replace the virtual visits
            pending.spent -= budget.used
        for score in scores:
            budget.charge(TokenCounts.of_score(score), "scoring")
        if pending is not None:
            pending.spent += budget.used

    def _add_children(
        self,
        iteration: int,
        plans: list[_Plan],
        drafts: list[_Draft],
        scores: list[Score],
        full: list[bool],
        c_before: float,
    ) -> tuple[list[Node], list[list[Node]]]:
        """Add the scored children to the tree (backprop) and the answer tally; a child
        whose generation or score failed is kept, marked with its error and unanswered.
        Returns the added nodes, all together and per plan."""
        tree, budget = self.tree, self.budget
        added: list[Node] = []
        children: list[list[Node]] = [[] for _ in plans]
        for draft, score in zip(drafts, scores, strict=True):
            plan, g = plans[draft.index], draft.generation
            error = g.error or score.error
            if g.finish is FinishReason.ERROR or error:
                budget.count_failures(
                    generation=g.finish is FinishReason.ERROR, score=score.error is not None
                )
            node = tree.add_child(
                plan.parent,
                text=g.text,
                q=score.value,
                answered=draft.answered and error is None,
                answer=draft.answer if error is None else None,
                finish=g.finish,
                output_tokens=g.output_tokens,
                inserted_text=plan.inserted_text,
                inserted_tokens=plan.inserted_tokens,
                full_generation=full[draft.index],
                from_generative=plan.expansion.from_generative,
                iteration=iteration,
                c_used=c_before,
                error=error,
                score_context=score.context,
            )
            self.tally.add(node)
            added.append(node)
            children[draft.index].append(node)
        return added, children

    async def run(self) -> SearchResult:
        start = time.perf_counter()
        if getattr(self.config, "max_inflight_expansions", 1) > 1:
            stop_reason, iteration = await self._run_in_flight()
        else:
            stop_reason, iteration = await self._run_one_at_a_time()
        chosen = self.tally.chosen_node
        return SearchResult(
            problem=self.tree.problem,
            algorithm=self.algorithm.name,
            seed=self.seed,
            budget=self.budget.total,
            c_used=self.budget.used,
            tree=self.tree,
            chosen_answer=self.tally.answer,
            chosen_node_id=None if chosen is None else chosen.id,
            tokens=self.budget.tokens,
            trace=self.trace,
            stop_reason=stop_reason,
            iterations=iteration,
            wall_time_s=time.perf_counter() - start,
            votes=self.tally.votes(),
        )

    async def _run_one_at_a_time(self) -> tuple[str, int]:
        """The paper's loop (Algorithm 1): one expansion at a time."""
        stalled, iteration = 0, 0
        stop_reason = "budget_exhausted"
        while True:
            if self.budget.exhausted:
                stop_reason = "budget_exhausted"
                break
            if self.algorithm.should_stop(self.tree, self.budget):
                stop_reason = "early_stop"
                break
            expansions = self.algorithm.propose(self.tree, self.budget)
            if not expansions:
                stop_reason = "algorithm_done"
                break
            used_before = self.budget.used
            if self.config.reference:
                steps = await self._expand_one_child_per_request(iteration, expansions)
                if not steps:
                    stop_reason = "budget_exhausted"
                    break
                iteration += steps
            else:
                plans = self._size([await self._plan(e) for e in expansions])
                if not plans:
                    stop_reason = "budget_exhausted"
                    break
                iteration += 1
                _, generative = await self._step(iteration, plans)
                self._record(iteration, generative)
            stalled = stalled + 1 if self.budget.used == used_before else 0
            if stalled >= self.config.max_stalled_expansions:
                stop_reason = "stalled"
                break
        return stop_reason, iteration

    async def _run_in_flight(self) -> tuple[str, int]:
        """Up to `max_inflight_expansions` expansions pending at once (see the module doc).

        New expansions are proposed while fewer than the limit are pending and the free
        budget (B - C_used - reserved) still fits one at its full `max_tokens` cap (a
        request cut short by the others' reservations would write truncated steps);
        otherwise the loop waits for the next result.  Results are applied in the order
        they land (several landing together: in the order they were sent).  On any exit,
        the pending expansions are cancelled and every reservation is closed.
        """
        limit = getattr(self.config, "max_inflight_expansions", 1)
        budget = self.budget
        pending: dict[asyncio.Task[float], _Pending] = {}  # in the order sent
        stop_reason, iteration, stalled = "budget_exhausted", 0, 0
        closing = False
        try:
            while True:
                while not closing and len(pending) < limit:
                    if budget.exhausted:  # maybe only for now: reservations come back
                        closing = not pending
                        stop_reason = "budget_exhausted"
                        break
                    if self.algorithm.should_stop(self.tree, budget):
                        closing, stop_reason = True, "early_stop"
                        break
                    expansions = self.algorithm.propose(self.tree, budget)
                    if not expansions:
                        closing = not pending
                        stop_reason = "algorithm_done"
                        break
                    plans = self._size([await self._plan(e) for e in expansions])
                    if not plans:
                        closing = not pending
                        stop_reason = "budget_exhausted"
                        break
                    if pending and any(p.max_tokens < p.cap for p in plans):
                        # What the pending ones hold would cut this request short: wait for
                        # them instead (near the end of B, one at a time again).
                        break
                    iteration += 1
                    hold = self._hold(plans)  # before the next plan is sized
                    task = asyncio.ensure_future(self._pending_step(iteration, plans, hold))
                    pending[task] = hold
                if not pending:
                    break
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in [t for t in pending if t in done]:  # in the order sent
                    del pending[task]
                    spent = task.result()  # a BudgetViolation ends the search here
                    stalled = 0 if spent > 0 else stalled + 1
                    if stalled >= self.config.max_stalled_expansions:
                        closing, stop_reason = True, "stalled"
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            for hold in pending.values():  # a task cancelled before it started runs no finally
                hold.reservation.close()
                hold.drop_virtual(self.tree)
        return stop_reason, iteration

    def _hold(self, plans: list[_Plan]) -> _Pending:
        """Reserve the plans' largest cost and put a virtual loss on their paths."""
        most = sum(self._max_generation_cost(p) + self.budget.score_reserve(p.n) for p in plans)
        pending = _Pending(self.budget.reserve(most), [(p.parent, p.n) for p in plans])
        for node, visits in pending.nodes:
            self.tree.add_virtual_visits(node, visits)
        return pending

    async def _pending_step(self, iteration: int, plans: list[_Plan], pending: _Pending) -> float:
        """One in-flight expansion; whatever happens, nothing stays reserved or virtual
        (`_run_in_flight` also closes the holds of tasks cancelled before they started).
        Returns what it spent."""
        tree = self.tree
        try:
            _, generative = await self._step(iteration, plans, pending=pending)
        finally:
            pending.reservation.close()
            pending.drop_virtual(tree)
        self._record(iteration, generative)
        return pending.spent

    async def _expand_one_child_per_request(
        self, iteration: int, expansions: list[Expansion]
    ) -> int:
        """The released code's budget rule (`conventions: reference`): every child is its
        own request and its own step, capped at what is left of B after its fixed charge
        (experiments/math/run_vllm.py, generate_fn).  The algorithm decides once per
        expansion and observes all its children at the end, as the released algorithms
        queue a selected node's children and generate them without selecting again.
        Returns the number of steps taken (0: not even one child fitted).
        """
        steps = 0
        for expansion in expansions:
            children: list[Node] = []
            for _ in range(expansion.n):
                plans = self._size([await self._plan(replace(expansion, n=1))])
                if not plans:
                    break
                steps += 1
                added, generative = await self._step(iteration + steps, plans, observe=False)
                self._record(iteration + steps, generative)
                children.extend(added)
            if children:
                self.algorithm.observe(self.tree, expansion, children)
        return steps

    def _record(self, iteration: int, generative: int) -> None:
        best = self.tally.chosen_node  # the node of `self.tally.answer`, found once
        tree = self.tree
        self.trace.append(
            TracePoint(
                iteration=iteration,
                c_used=self.budget.used,
                rho=self.budget.rho,
                n_nodes=len(tree),
                n_answered=len(tree.answered_ids),
                any_answer=bool(tree.answered_ids),
                best_answer=None if best is None else normalize_answer(best.answer or ""),
                best_q=None if best is None else best.q,
                max_depth=tree.max_depth,
                max_width=tree.max_width,
                generative=generative,
            )
        )


async def _no_score() -> Score:
    return Score(0.0)


class _Calls:
    """Awaits the batches of calls to one service, results in order.

    While the service has never suspended (a local or simulated one, whose
    calls finish at once), a batch runs one call after another right here:
    no task, no trip through the event loop.  The first call that suspends
    marks the service as a real one: it is finished here, in the awaiting
    task (as a plain ``await`` would), while the rest of its batch already
    runs in tasks, and every later batch goes through `asyncio.gather`, so
    the requests to a real service still overlap.  Every call runs start to
    end in one task, as code that ties state to the current task (cancel
    scopes, `asyncio.timeout`) needs.  Calls start in the order given either
    way, so what a search decides does not depend on which path ran.

    Still pays after coalescing (which only changes the Serve clients, whose
    calls always suspend, so they take the `asyncio.gather` path here): on the
    simulated environment `asyncio.gather` for every batch costs 1.30x the CPU
    per node (155 vs 120 us, median of 7 interleaved runs, 40 problems, B=30000,
    BG-MCTS; shared 2-core machine, load average 15-19; `benchmarks/driver_calls.py`,
    since retired: docs/benchmarks.md says how to rerun it).
    """

    __slots__ = ("synchronous",)

    def __init__(self) -> None:
        self.synchronous = True

    async def gather(self, coros: list[Coroutine[Any, Any, _T]]) -> list[_T]:
        if not self.synchronous:
            if len(coros) == 1:
                return [await coros[0]]
            return list(await asyncio.gather(*coros))
        results: list[_T] = []
        for i, coro in enumerate(coros):
            try:
                signal = coro.send(None)
            except StopIteration as stop:
                results.append(stop.value)
                continue
            except BaseException:
                _close(coros[i + 1 :])
                raise
            self.synchronous = False
            rest = [asyncio.ensure_future(c) for c in coros[i + 1 :]]
            try:
                results.append(await _drive(coro, signal))
            except asyncio.CancelledError:
                for task in rest:  # as `gather` cancels its children when cancelled
                    task.cancel()
                raise
            except BaseException:
                for task in rest:  # as `gather` leaves its other children running
                    task.add_done_callback(_retrieve)
                raise
            if rest:
                results.extend(await asyncio.gather(*rest))
            break
        return results


def _close(coros: Sequence[Coroutine[Any, Any, Any]]) -> None:
    """Close coroutines that will never run (no "never awaited" warning)."""
    for coro in coros:
        coro.close()


@types.coroutine
def _drive(coro: Coroutine[Any, Any, _T], signal: Any) -> Generator[Any, Any, _T]:
    """Finish `coro`, whose first step yielded `signal`, in the awaiting task (a plain await)."""
    while True:
        try:
            sent = yield signal
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # thrown in by the task (cancellation)
            try:
                signal = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            try:
                signal = coro.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a task's error as seen (as `gather` does for children it no longer waits on)."""
    if not task.cancelled():
        task.exception()


async def run_search(
    problem: str,
    config: SearchConfig,
    policy: Policy,
    scorer: Scorer,
    budget: float,
    seed: int = 0,
    *,
    algorithm: SearchAlgorithm | None = None,
) -> SearchResult:
    """Search one problem with `config` until the budget B (in cost units) is spent.

    Many calls can run concurrently on one event loop; they share nothing but
    the `policy` and `scorer` objects.
    """
    search = _Search(problem, config, policy, scorer, budget, seed, algorithm)
    return await search.run()


def trace_rows(result: SearchResult) -> list[dict[str, Any]]:
    """The anytime trace as flat rows (for Parquet)."""
    return [{f: getattr(p, f) for f in TracePoint.__dataclass_fields__} for p in result.trace]


__all__: Sequence[str] = ("SearchResult", "TracePoint", "derive_seed", "run_search", "trace_rows")
