"""The search actor Ray Data instantiates: many BG-MCTS trees at once per actor.

It lives in `pipeline/` (not `actors/`) because it builds records with `pipeline.records`
and reads the run config: the layers import one way, jobs -> pipeline -> actors -> search.

Ray Data calls it once per problem (a batch of one row) with up to `trees_per_actor`
calls running at once (`pipeline.run.synthesis`).  `pipeline.run.stream_rows.map_problems`
hands it `Problem`s only and passes any other stream row (a "tally" of source errors and
skipped problems) through to the driver.  Every call's search runs on the actor's one
event loop against the *shared* policy and scorer deployments, and returns that tree's
records the moment it is graded, so the driver commits it while the other trees go on.
A problem that fails becomes an `errors` record; it never fails the call.
Under the run's wall-time cap (`pipeline.run.wall`) a problem that reaches the actor after
the cap comes back unsearched (None: no record at all), and so does a tree still in flight
when the cap's grace ends (cancelled); the next run searches both.

Only a search that produced something counts as done: one whose every request
failed, whose problem cannot fit the context, whose every step is empty, or which
spent nothing becomes a (retryable) `errors` row (`actors.search_outcome`).  After
`engine_failure_limit` failed policy requests in a row the actor's circuit
breaker opens and it starts no new problem (each becomes a retryable error row
at no cost) until the run ends.
With a progress board (`actors.progress`) it pushes live counters while trees run.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from typing import Any

from actors.admission import (
    AdmissionController,
    AdmissionGate,
    LoadTracker,
    admitted_per_actor,
)
from actors.affinity import tree_affinity
from actors.progress import Counters, CountingPolicy, CountingScorer, Gauges, Reporter
from actors.replay import ReplayPolicy, ReplayScorer, service_salt, tree_journal
from actors.scorer_kinds import scorer_kind
from actors.search_outcome import (
    BREAKER_STAGE,
    SEARCH_STAGE,
    BreakerPolicy,
    EngineBreaker,
    failure_reason,
)
from actors.serve import POLICY_APP, SCORER_APP, ServePolicy, ServeScorer
from common.grading import warm_up
from common.redact import install_log_redaction, redact_text
from pipeline.config import RunConfig
from pipeline.problems.decontamination import build_decontaminator
from pipeline.records import RecordsSpec, error_row, records_for
from pipeline.records.allocated import probe_records, second_records
from pipeline.run.allocation import NightAllocator
from pipeline.run.stream_rows import Problem, Records, map_problems
from pipeline.run.wall import WallCap
from pipeline.store.request_log import TreeLog
from pipeline.store.run_folder import RunFolder
from search import SearchResult, TokenCounts, derive_seed, run_search

log = logging.getLogger(__name__)


class SearchActor:
    def __init__(
        self, run: dict[str, Any], board: str | None = None, wall: WallCap | None = None
    ) -> None:
        import ray
        from ray import serve

        install_log_redaction()
        # The grading pool starts in the background while the first trees are searched:
        # its start (seconds) would otherwise count against the first tree's grading limit.
        warm_up()
        self.run = RunConfig.model_validate(run)
        self.run_id = self.run.resolved_run_id
        self.wall = wall  # the run's wall-time cap (None: none)
        self.breaker = EngineBreaker(self.run.engine_failure_limit, on_open=self._breaker_opened)
        self.counters = Counters()
        cost = self.run.search.cost
        serve_policy = ServePolicy(serve.get_app_handle(POLICY_APP), self.run.policy)
        serve_scorer = ServeScorer(serve.get_app_handle(SCORER_APP), self.run.scorer)
        serve_policy.count_retries(self._retried("policy"))
        serve_scorer.count_retries(self._retried("prm"))
        # innermost: a replayed answer is counted and judged like one from the engine
        self.policy = BreakerPolicy(
            CountingPolicy(
                ReplayPolicy(
                    serve_policy,
                    self.counters,
                    service_salt(self.run.policy),
                ),
                self.counters,
                cost,
                self.run.search.answer_extraction,
            ),
            self.breaker,
        )
        self.scorer = CountingScorer(
            ReplayScorer(
                serve_scorer,
                self.counters,
                service_salt(self.run.scorer),
            ),
            self.counters,
            cost,
        )
        # the run folder, where each tree's request log lives (None: replay off)
        self.run_store = (
            RunFolder.open(self.run.output_root, self.run_id).store
            if self.run.replay.enabled
            else None
        )
        # The run's progress board, by name (a handle in the constructor arguments would
        # put them in the object store, which Ray warns about for restartable actors).
        # Admitted trees and the most in flight at once: what the run summary reports.
        self.gauges = Gauges(admitted=self.run.trees_per_actor)
        self.reporter = (
            None
            if board is None
            else Reporter(
                ray.get_actor(board),
                self.counters,
                actor=ray.get_runtime_context().get_actor_id() or "",
                gauges=self.gauges,
            )
        )
        self.gate = AdmissionGate(self.run.trees_per_actor)
        self._admitted: asyncio.Lock | None = asyncio.Lock() if self.run.admission else None
        self._steering: asyncio.Task[None] | None = None  # held: the loop keeps weak refs
        # one index per actor (MATH500 + GSM8K test: well under a second to build)
        self.decontaminator = build_decontaminator(self.run.records.decontamination)
        engine = self.run.policy.engine
        self.context_length: int | None = getattr(
            engine, "context_length", getattr(engine, "max_model_len", None)
        )

    def _retried(self, engine: str) -> Callable[[], None]:
        """What counts one retried request of `engine` (the board's prefix: policy, prm)."""
        name = f"{engine}_retried_requests"

        def count() -> None:
            setattr(self.counters, name, getattr(self.counters, name) + 1)

        return count

    def _breaker_opened(self, failures: int) -> None:
        log.error(
            "circuit breaker open: %d policy requests failed in a row; starting no new problems",
            failures,
        )

    async def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        return await map_problems(batch, self.solve_all)

    async def solve_all(self, problems: list[Problem]) -> list[Records | None]:
        """Search every problem at once on this actor's event loop; records in order (None:
        left unsearched at the wall-time cap)."""
        if self.reporter is not None:
            self.reporter.start()
        outputs = await asyncio.gather(*(self.solve(p) for p in problems))
        if self.reporter is not None:
            self.reporter.flush()
        return list(outputs)

    def _error(self, problem_id: str, stage: str, error: BaseException | str) -> Records:
        return {"errors": [error_row(problem_id, stage, error, run_id=self.run_id)]}

    async def _admit(self, problem: str) -> None:
        """Admission on: start the gate at what the engines' capacity calls for (the first
        problem stands for the prompt length), then steer it while the run goes on.
        Trees already running keep going; new ones wait at the gate, so continuing
        trees, whose contexts are cached, come first."""
        lock = self._admitted
        if lock is None:
            return
        async with lock:
            if self._admitted is None:
                return
            from ray import serve

            handles = {
                role: serve.get_app_handle(app)
                for role, app in (("policy", POLICY_APP), ("scorer", SCORER_APP))
            }
            run = self.run
            try:
                capacities = {role: await h.capacity.remote() for role, h in handles.items()}
                prompt = await self.policy.prompt_tokens(problem, "")
            except Exception as exc:  # admission is an optimisation: never fail the trees
                log.warning(
                    "admission off, %d trees per actor: capacity unknown: %s",
                    run.trees_per_actor,
                    redact_text(exc),
                )
                self.gauges.admitted = run.trees_per_actor
                self._admitted = None  # the gate stays at trees_per_actor
                return
            trees = admitted_per_actor(
                capacities=capacities,
                replicas=self._replicas(),
                search=run.search,
                budget=run.budget,
                # what a score writes after the path (a one-pass PRM: nothing)
                analysis_tokens=scorer_kind(run.scorer).analysis_tokens(run.scorer),
                prompt_tokens=prompt,
                actors=run.actors,
                cap=run.trees_per_actor,
            )
            log.info("admission: %d trees in flight per actor (cap %d)", trees, run.trees_per_actor)
            await self.gate.set_target(trees)
            self.gauges.admitted = trees
            controller = AdmissionController(trees, run.trees_per_actor)
            self._steering = asyncio.ensure_future(self._steer(controller, handles))
            self._admitted = None

    def _replicas(self) -> dict[str, int]:
        return {"policy": self.run.policy.num_replicas, "scorer": self.run.scorer.num_replicas}

    async def _steer(self, controller: AdmissionController, handles: dict[str, Any]) -> None:
        """Every `admission_interval_s`: the deployments' `load()` into the controller,
        its target into the gate (the decisions are `actors.admission`'s).  A deployment
        that does not answer stops the steering: the target stays where it is."""
        tracker = LoadTracker()
        first = True  # the first reading only sets the counters' baseline
        try:
            while True:
                loads = {role: await h.load.remote() for role, h in handles.items()}
                reading = tracker.reading(loads, self._replicas())
                if not first:
                    target = controller.observe(reading)
                    if target != self.gate.target:
                        log.info("admission: %d trees in flight per actor (%s)", target, reading)
                        await self.gate.set_target(target)
                        self.gauges.admitted = max(self.gauges.admitted, target)
                first = False
                await asyncio.sleep(self.run.admission_interval_s)
        except Exception as exc:  # steering is an optimisation: never fail the trees
            log.warning("admission steering stopped, target stays %d: %s", self.gate.target, exc)

    async def solve(self, problem: Problem) -> Records | None:
        """The problem's records; None when the wall-time cap left it unsearched (not
        started, or abandoned in flight): nothing of it is committed."""
        await self._admit(problem.problem)
        await self.gate.enter()
        try:
            if self.wall is not None and self.wall.up():  # no new tree after the cap
                return None
            self.counters.trees_started += 1
            self.counters.second_started += int(problem.tree == "second")
            self.gauges.peak_in_flight = self.gate.peak
            search = self._solve(problem)
            records = await (search if self.wall is None else self.wall.finish(search))
        finally:
            await self.gate.leave()
        if records is None:  # still in flight when the cap's grace ended: given up
            log.warning("problem %s: abandoned at the wall-time cap", problem.problem_id)
            return None
        self.counters.trees_done += 1
        self.counters.second_done += int(problem.tree == "second")
        self.counters.tree_errors += bool(records.get("errors"))
        self.counters.correct += sum(bool(n["label"]) for n in records.get("nodes", []))
        for tree in records.get("trees", []):  # continuation prompts, known at the end
            inserted = TokenCounts(inserted_prompt_tokens=int(tree["inserted_prompt_tokens"]))
            self.counters.count(inserted, self.run.search.cost)
        return records

    def _budget(self, task: Problem) -> int:
        """The tree's B: the run's, or with the night allocator the probe's or the one the
        allocator gave the second tree."""
        if task.tree == "probe":
            return NightAllocator(self.run.allocation, self.run.budget).probe_budget
        if task.tree == "second" and task.budget is not None:
            return task.budget
        return self.run.budget

    async def _solve(self, task: Problem) -> Records:
        problem_id, problem, reference = task.problem_id, task.problem, task.reference
        if self.breaker.open:
            return self._error(problem_id, BREAKER_STAGE, self.breaker.message)
        try:
            index = self.decontaminator
            contamination = None if index is None else index.match(problem)
            second = task.tree == "second"
            # a second tree is searched anew with a seed of its own, and is not logged:
            # the request log is the problem's probe's
            seed = derive_seed(self.run.seed, problem_id, "second") if second else None
            if seed is None:
                seed = derive_seed(self.run.seed, problem_id)
            journal = None if second else await self._journal(problem_id)
            try:
                # every request of this tree: one replica, and the tree's request log
                with tree_affinity(problem_id), tree_journal(journal):
                    result = await run_search(
                        problem,
                        self.run.search,
                        self.policy,
                        self.scorer,
                        self._budget(task),
                        seed,
                    )
            finally:
                if journal is not None:
                    await journal.close()
            reason = failure_reason(result, context_length=self.context_length)
            if reason is not None:
                if reason.startswith("problem does not fit"):
                    reason = failure_reason(
                        result,
                        context_length=self.context_length,
                        problem_tokens=await self._problem_tokens(problem),
                    )
                return self._error(problem_id, SEARCH_STAGE, str(reason))
            spec = self._spec(problem_id, contamination)
            if task.tree is not None and task.index is not None:
                return await self._allocated(task, result, spec)
            return await records_for(result, reference, spec)
        except Exception as exc:  # one bad problem must not kill the run
            log.warning(
                "problem %s failed: %s",
                problem_id,
                redact_text(traceback.format_exc(limit=5)),
            )
            return self._error(problem_id, SEARCH_STAGE, exc)

    def _spec(self, problem_id: str, contamination: str | None) -> RecordsSpec:
        """How this problem's tree becomes rows: the run's records config, models, prompt
        and answer extraction, and the benchmark the problem overlaps."""
        return RecordsSpec(
            problem_id=problem_id,
            run_id=self.run_id,
            config=self.run.records,
            policy_model=self.run.policy.engine.model,
            prm_model=self.run.scorer.engine.model,
            contamination=contamination,
            instruction=self.run.policy.prompts.policy_instruction,
            extraction=self.run.search.answer_extraction,
        )

    async def _allocated(self, task: Problem, result: SearchResult, spec: RecordsSpec) -> Records:
        """A probe's or a second tree's records (`pipeline.records.allocated`)."""
        assert task.index is not None
        if task.tree == "second":
            probe = (task.carry or {}).get("probe") or {}
            return await second_records(result, probe, task.reference, spec, index=task.index)
        return await probe_records(result, task.reference, spec, index=task.index)

    async def _journal(self, problem_id: str) -> TreeLog | None:
        """The tree's request log: what an earlier attempt recorded, for replay."""
        if self.run_store is None:
            return None
        try:
            journal = await TreeLog.open(self.run_store, problem_id, self.run.replay)
        except Exception:  # storage trouble: search without replay, never fail the tree
            log.warning(
                "request log of %s unreadable: %s",
                problem_id,
                redact_text(traceback.format_exc(limit=3)),
            )
            return None
        if journal.replayable:
            log.info("problem %s: %d logged requests to replay", problem_id, journal.replayable)
        return journal

    async def _problem_tokens(self, problem: str) -> int | None:
        try:
            return int(await self.policy.prompt_tokens(problem, self.run.search.response_prefix))
        except Exception:  # only for the message; the search already failed
            return None
