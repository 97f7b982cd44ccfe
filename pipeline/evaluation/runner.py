"""Run an evaluation grid: every method x budget x seed x problem, graded, to Parquet.

Two environments share everything after the search:

* `simulated`: the stochastic reasoning environment of `search.simulated`, no model;
  the grid is split over worker processes (pure CPU, no Ray), answers graded by
  exact match against the ground truth;
* `services`: real models behind the same Serve deployments as the synthesis
  pipeline, searches run concurrently from the driver, graded with math-verify.

Output (in `config.run_dir`): eval_trees.parquet, eval_nodes.parquet, meta.json,
then the report (tables, plots, report.md) written from those files alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from common.grading import Verdict, compare_all, warm_up
from common.redact import redact_text
from pipeline.evaluation.config import (
    EvalConfig,
    Method,
    ServicesEnvironment,
    SimulatedEnvironment,
)
from pipeline.evaluation.parts import Key, PartStore
from pipeline.evaluation.rows import tree_rows
from pipeline.evaluation.schema import EVAL_NODES_SCHEMA, EVAL_TREES_SCHEMA
from pipeline.records import NO_YIELD, RecordsConfig, answer_key, grade_result, yield_counts
from pipeline.run.cluster import start_ray
from search import SearchResult, derive_seed, run_search
from search.protocols import Policy, Scorer

ProgressFn = Callable[[int, int], None]  # (searches done, total)


@dataclass(frozen=True)
class Task:
    method: Method
    budget: int
    seed: int
    problem_id: str
    problem: str
    reference: str | None

    @property
    def key(self) -> Key:
        return (self.method.label, self.budget, self.seed, self.problem_id)


def grid(config: EvalConfig, problems: Sequence[dict[str, Any]]) -> list[Task]:
    return [
        Task(m, b, s, str(p["problem_id"]), str(p["problem"]), p.get("reference"))
        for m in config.methods
        for b in config.budgets
        for s in config.seeds
        for p in problems
    ]


def _exact(reference: str | None) -> Callable[[str | None], bool]:
    wanted = None if reference is None else reference.strip()
    return lambda answer: answer is not None and wanted is not None and answer.strip() == wanted


async def _exact_compare(
    pairs: Sequence[tuple[str | None, str]], timeout_s: float
) -> list[Verdict]:
    """The simulated environment's ground truth as `grade_result`'s comparison."""
    return [
        Verdict.MATCH if a is not None and a.strip() == b.strip() else Verdict.NO_MATCH
        for a, b in pairs
    ]


async def _search_rows(
    task: Task, result: SearchResult, records: RecordsConfig, *, exact: bool, timeout_s: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One search's `eval_trees` row (graded, with its data yield) and `eval_nodes` rows.

    `exact`: the simulated environment's answers are graded by exact match (its ground
    truth); else math-verify within `timeout_s`.  Without a reference nothing is graded:
    no answer is correct and the yield is zero.  An answer whose comparison was cut off is
    unknown (`correct` null), not incorrect: the report counts it and says how many.
    """
    yields: dict[str, int] = NO_YIELD
    verified: dict[str, bool] = {}
    unknown: frozenset[str] = frozenset()
    if task.reference is not None:
        graded = await grade_result(
            result,
            task.reference,
            problem_id=task.problem_id,
            timeout_s=timeout_s,
            extraction=task.method.search.answer_extraction,
            fold_blank_lines=records.fold_blank_lines,
            compare=_exact_compare if exact else compare_all,
        )
        yields, verified = yield_counts(graded, records), dict(graded.verified)
        unknown = graded.ungraded_answers

    def by_math_verify(answer: str | None) -> bool | None:
        key = answer_key(answer)
        if key in unknown:
            return None
        return key is not None and verified.get(key, False)

    return tree_rows(
        result,
        _exact(task.reference) if exact else by_math_verify,
        method=task.method.label,
        budget=task.budget,
        seed=task.seed,
        problem_id=task.problem_id,
        reference=task.reference,
        yields=yields,
    )


# ------------------------------------------------------------------ simulated environment
def _simulated_chunk(
    env: dict[str, Any], records: dict[str, Any], tasks: list[Task]
) -> tuple[pa.Table, pa.Table]:
    """Worker process: run `tasks` one after another against the simulated env."""
    from search.simulated import SimParams, SimPolicy, SimScorer

    params = SimParams(**env["params"])
    records_config = RecordsConfig.model_validate(records)

    async def run_all() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        trees: list[dict[str, Any]] = []
        nodes: list[dict[str, Any]] = []
        for task in tasks:
            seed = derive_seed(task.seed, task.problem_id)
            result = await run_search(
                task.problem,
                task.method.search,
                SimPolicy(params, seed=seed),
                SimScorer(params, seed=seed),
                task.budget,
                seed,
            )
            tree, node_list = await _search_rows(
                task, result, records_config, exact=True, timeout_s=5.0
            )
            trees.append(tree)
            nodes.extend(node_list)
        return trees, nodes

    trees, nodes = asyncio.run(run_all())
    # Rows built by tree_rows from our own search results: the field-by-field checks of
    # to_table (15% of a worker's CPU on the full grid) cannot find anything here.
    return (
        pa.Table.from_pylist(trees, schema=EVAL_TREES_SCHEMA),
        pa.Table.from_pylist(nodes, schema=EVAL_NODES_SCHEMA),
    )


def _chunks(tasks: list[Task], size: int) -> list[list[Task]]:
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def run_simulated(
    config: EvalConfig, env: SimulatedEnvironment, progress: ProgressFn
) -> tuple[pa.Table, pa.Table]:
    from search.simulated import SimParams, simulated_problems

    params = SimParams(**env.params)
    problems = [
        {"problem_id": p.problem_id, "problem": p.problem, "reference": p.reference}
        for p in simulated_problems(env.problems, seed=env.seed, params=params)
    ]
    tasks = grid(config, problems)
    payload = env.model_dump(mode="json")
    records = config.records.model_dump(mode="json")
    # Small chunks keep both workers busy to the end (methods differ 100x in cost).
    chunks = _chunks(tasks, max(1, min(50, len(tasks) // (env.workers * 8) or 1)))
    parts: list[tuple[pa.Table, pa.Table]] = []
    done = 0
    if env.workers == 1:
        for chunk in chunks:
            parts.append(_simulated_chunk(payload, records, chunk))
            done += len(chunk)
            progress(done, len(tasks))
    else:
        with concurrent.futures.ProcessPoolExecutor(env.workers) as pool:
            futures = {pool.submit(_simulated_chunk, payload, records, c): len(c) for c in chunks}
            for future in concurrent.futures.as_completed(futures):
                parts.append(future.result())
                done += futures[future]
                progress(done, len(tasks))
    return _concat(parts)


def _concat(parts: list[tuple[pa.Table, pa.Table]]) -> tuple[pa.Table, pa.Table]:
    trees = [p[0] for p in parts] or [EVAL_TREES_SCHEMA.empty_table()]
    nodes = [p[1] for p in parts] or [EVAL_NODES_SCHEMA.empty_table()]
    return pa.concat_tables(trees), pa.concat_tables(nodes)


# ------------------------------------------------------------------ real services
async def _run_services_tasks(
    tasks: list[Task],
    policy: Policy,
    scorer: Scorer,
    env: ServicesEnvironment,
    progress: ProgressFn,
    store: PartStore,
    records: RecordsConfig,
) -> list[dict[str, Any]]:
    from actors.affinity import tree_affinity

    warm_up()  # the grading pool starts while the first searches run, not in their limit
    gate = asyncio.Semaphore(env.concurrency)
    failures: list[dict[str, Any]] = []
    done = 0

    async def one(task: Task) -> None:
        nonlocal done
        async with gate:
            try:
                seed = derive_seed(task.seed, task.problem_id)
                # every request of this search on one replica (with several), as in the
                # search actor; keyed by problem, so the problem's other searches (methods,
                # budgets, seeds) find its prompt prefix in that replica's cache too
                with tree_affinity(task.problem_id):
                    result = await run_search(
                        task.problem, task.method.search, policy, scorer, task.budget, seed
                    )
                tree, node_list = await _search_rows(
                    task, result, records, exact=False, timeout_s=env.grade_timeout_s
                )
                store.add(tree, node_list)
                if len(store.trees) >= env.concurrency:
                    store.flush()
            except Exception as exc:  # one failed search must not lose the grid
                failures.append(
                    {
                        "method": task.method.label,
                        "budget": task.budget,
                        "seed": task.seed,
                        "problem_id": task.problem_id,
                        "error": redact_text(f"{type(exc).__name__}: {exc}"),
                    }
                )
            done += 1
            progress(done, len(tasks))

    await asyncio.gather(*(one(t) for t in tasks))
    store.flush()
    return failures


def run_services(
    config: EvalConfig, env: ServicesEnvironment, progress: ProgressFn
) -> tuple[pa.Table, pa.Table, list[dict[str, Any]], list[dict[str, Any]]]:
    import ray
    from ray import serve

    from actors.serve import deploy_services
    from pipeline.problems.sources import load_problems

    loaded = load_problems(env.source)
    problems = [dict(p) for p in loaded.problems]
    source_errors = [dict(e) for e in loaded.errors]
    store = PartStore(config.run_dir)
    saved = store.done()  # a rerun of the same evaluation resumes
    tasks = [t for t in grid(config, problems) if t.key not in saved]
    progress(0, len(tasks))
    if not tasks:
        trees, nodes = store.tables()
        return trees, nodes, [], source_errors
    started_here = start_ray(env.ray_num_cpus)
    try:
        policy, scorer = deploy_services(env.policy, env.scorer)
        failures = asyncio.run(
            _run_services_tasks(tasks, policy, scorer, env, progress, store, config.records)
        )
    finally:
        if started_here:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()
    trees, nodes = store.tables()
    return trees, nodes, failures, source_errors


# ------------------------------------------------------------------ entry point
def run_evaluation(config: EvalConfig, progress: ProgressFn | None = None) -> Path:
    """Run the grid, write the Parquet and meta.json, then the report; returns the folder."""
    from pipeline.report import write_report

    report = progress or (lambda done, total: None)
    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    failures: list[dict[str, Any]] = []
    source_errors: list[dict[str, Any]] = []
    env = config.environment
    if isinstance(env, SimulatedEnvironment):
        trees, nodes = run_simulated(config, env, report)
        models = {"policy": "simulated", "scorer": "simulated"}
    else:
        trees, nodes, failures, source_errors = run_services(config, env, report)
        models = {"policy": env.policy.engine.model, "scorer": env.scorer.engine.model}
    wall = time.perf_counter() - start
    pq.write_table(trees, run_dir / "eval_trees.parquet")
    pq.write_table(nodes, run_dir / "eval_nodes.parquet")
    meta = {
        "name": config.name,
        "environment": env.kind,
        "models": models,
        "methods": [m.label for m in config.methods],
        "budgets": config.budgets,
        "seeds": config.seeds,
        "searches": trees.num_rows,
        "failed_searches": failures,
        "source_errors": source_errors,
        "wall_time_s": round(wall, 2),
        "cpu_count": os.cpu_count(),
        "config": config.model_dump(mode="json"),
    }
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    write_report(run_dir, tree_pictures=config.tree_pictures)
    return run_dir
