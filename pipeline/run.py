"""Wires one synthesis run: source -> Ray Data -> search actors -> Parquet (-> Hub).

    problems (resumed: already-written problem_ids skipped)
      -> ray.data.from_items -> map_batches(SearchActor, ActorPoolStrategy)
      -> each finished batch committed to the Parquet sink as it streams in

The policy and scorer are Serve deployments started here and shared by every
actor.  Actors restart on failure and their tasks are retried, so a dead
actor's problems are redone; the sink's resume logic keeps rows unique.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import RunConfig
from pipeline.hub import CardInfo, PublishResult, publish_run
from pipeline.records import error_row
from pipeline.sink import RECORD_TYPES, ParquetSink
from pipeline.sources import load_problems


@dataclass
class RunSummary:
    run_id: str
    run_dir: Path
    problems: int = 0
    skipped: int = 0
    searched: int = 0
    errors: int = 0
    answered_nodes: int = 0
    correct_nodes: int = 0
    correct_trees: int = 0
    tokens: int = 0
    wall_time_s: float = 0.0
    rows: dict[str, int] = field(default_factory=dict)

    def table(self) -> str:
        precision = self.correct_nodes / self.answered_nodes if self.answered_nodes else 0.0
        lines = [
            f"run {self.run_id}: {self.searched} problems searched, {self.skipped} already done, "
            f"{self.errors} errors, {self.wall_time_s:.0f}s",
            f"  answered nodes {self.answered_nodes}, correct {self.correct_nodes} "
            f"(precision {precision:.3f}); trees with a correct answer {self.correct_trees}",
            f"  policy tokens {self.tokens} ({self.tokens / max(self.wall_time_s, 1e-9):.1f}/s)",
            "  rows: " + ", ".join(f"{k} {v}" for k, v in self.rows.items()),
            f"  files: {self.run_dir}",
        ]
        return "\n".join(lines)


def _progress(summary: RunSummary, total: int, start: float) -> None:
    elapsed = time.perf_counter() - start
    done = summary.searched + summary.errors
    line = (
        f"\r{done}/{total} problems | {summary.tokens / max(elapsed, 1e-9):.1f} tok/s | "
        f"answered nodes {summary.answered_nodes} | correct {summary.correct_nodes}"
    )
    print(line, end="", file=sys.stderr, flush=True)


def start_ray(config: RunConfig) -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=config.ray_num_cpus, include_dashboard=False, log_to_driver=False)


def synthesize(
    config: RunConfig, *, progress: Callable[[RunSummary, int, float], None] | None = _progress
) -> RunSummary:
    """Run the whole synthesis job for `config`; returns the summary."""
    import ray

    from actors.search_actor import SearchActor  # imports Ray Serve: only when searching
    from actors.serve import deploy_policy, deploy_scorer

    start = time.perf_counter()
    run_id = config.resolved_run_id
    sink = ParquetSink(config.output_root, run_id)
    summary = RunSummary(run_id, sink.run_dir)
    loaded = load_problems(config.source)
    done = sink.done_problem_ids()
    todo = [p for p in loaded.problems if p["problem_id"] not in done]
    new_errors = [e for e in loaded.errors if e["problem_id"] not in done]
    summary.problems = len(loaded.problems) + len(loaded.errors)
    summary.skipped = summary.problems - len(todo) - len(new_errors)
    if new_errors:
        sink.write_batch(
            {
                "errors": [
                    error_row(e["problem_id"], e["stage"], e["message"], run_id=run_id)
                    for e in new_errors
                ]
            }
        )
        summary.errors += len(new_errors)
    if todo:
        start_ray(config)
        deploy_policy(config.policy)
        deploy_scorer(config.scorer)
        items = [
            {"problem_id": p["problem_id"], "problem": p["problem"], "reference": p["reference"]}
            for p in todo
        ]
        dataset = ray.data.from_items(items).map_batches(
            SearchActor,
            fn_constructor_kwargs={"run": config.model_dump(mode="json")},
            # One batch = trees_per_actor problems searched concurrently in one call; a
            # batch is committed when its last tree finishes.  (One problem per call with
            # concurrent calls ran the trees one at a time here: measured 4x slower.)
            compute=ray.data.ActorPoolStrategy(size=config.actors),
            batch_size=config.trees_per_actor,
            num_cpus=config.actor_num_cpus,
            max_restarts=config.max_actor_restarts,
            max_task_retries=-1,
        )
        for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            table: Any = batch
            for text in table.column("records").to_pylist():
                records: dict[str, list[dict[str, Any]]] = json.loads(text)
                sink.write_batch(records)
                _account(summary, records)
            if progress is not None:
                progress(summary, len(todo) + len(new_errors), start)
        if progress is not None:
            print(file=sys.stderr)
    summary.rows = {kind: sink.read(kind).num_rows for kind in RECORD_TYPES}
    summary.wall_time_s = time.perf_counter() - start
    return summary


def publish_configured(config: RunConfig, summary: RunSummary) -> PublishResult:
    """Push the run's sft and dpo Parquet to `config.publish.repo` with a dataset card.

    Raises `HubPublishError` (local files untouched, message carries the retry command).
    """
    publish = config.publish
    if publish.repo is None:
        raise ValueError("publish.repo is not set")
    precision = summary.correct_nodes / summary.answered_nodes if summary.answered_nodes else None
    card = CardInfo(
        config=config.model_dump(mode="json"),
        models=[config.policy.engine.model, config.scorer.engine.model],
        budget={"B": config.budget, "algorithm": config.search.algorithm},
        answered_precision=precision,
    )
    return publish_run(
        summary.run_dir,
        publish.repo,
        run_id=summary.run_id,
        token_env=publish.token_env,
        private=publish.private,
        endpoint=publish.endpoint,
        card_info=card,
    )


def _account(summary: RunSummary, records: dict[str, list[dict[str, Any]]]) -> None:
    if records.get("errors"):
        summary.errors += 1
        return
    summary.searched += 1
    nodes = records.get("nodes", [])
    summary.answered_nodes += len(nodes)
    summary.correct_nodes += sum(1 for n in nodes if n.get("label"))
    for tree in records.get("trees", []):
        summary.correct_trees += bool(tree.get("correct"))
        summary.tokens += int(tree.get("policy_output_tokens") or 0)
