"""What a run would do, without running it: `bgmcts synth --dry-run`.

Validates the source (a missing file or unknown column fails here, naming the field),
checks that the engines' packages and model files exist, and counts the problems left
after resume from the committed Parquet (read-only: safe beside a running job).  Nothing
here imports or starts Ray.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.table import Table

from actors.config import EngineConfig
from actors.engines.factory import check_engine
from pipeline.config import RunConfig
from pipeline.problems.sources import load_problems
from pipeline.store.resume import pending
from pipeline.store.run_folder import RunFolder


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    run_dir: Path | str  # a local folder, or the URI of a bucket's run
    source_rows: int  # problems + bad rows in the selected slice
    bad_rows: int  # rows that will become errors rows (not yet written)
    done: int  # problems (or bad rows) already committed by an earlier invocation
    todo: int  # problems that will be searched
    budget: int
    algorithm: str
    policy: str
    scorer: str
    publish_repo: str | None
    sample: tuple[str, ...]  # the first problems to do, shortened

    @property
    def budget_total(self) -> int:
        """Worst-case cost units of this invocation: problems x B (searches never exceed B)."""
        return self.todo * self.budget


def _engine(engine: EngineConfig) -> str:
    return f"{engine.kind}:{engine.model}"


def plan_run(config: RunConfig, sample: int = 5) -> RunPlan:
    """Everything `--dry-run` prints; raises the source's or engine's own clear errors."""
    loaded = load_problems(config.source)
    check_engine(config.policy.engine)
    check_engine(config.scorer.engine)
    run_id = config.resolved_run_id
    folder = RunFolder.open(config.output_root, run_id)
    run_dir = folder.location
    todo, bad = pending(loaded, folder)
    return RunPlan(
        run_id=run_id,
        run_dir=run_dir,
        source_rows=len(loaded.problems) + len(loaded.errors),
        bad_rows=len(bad),
        done=len(loaded.problems) + len(loaded.errors) - len(todo) - len(bad),
        todo=len(todo),
        budget=config.budget,
        algorithm=config.search.algorithm,
        policy=_engine(config.policy.engine),
        scorer=_engine(config.scorer.engine),
        publish_repo=config.publish.repo,
        sample=tuple(_short(p["problem"]) for p in todo[:sample]),
    )


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def render_plan(plan: RunPlan, file: TextIO | None = None) -> None:
    table = Table(title=f"dry run: run {plan.run_id} (nothing started)", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("source rows in the slice", str(plan.source_rows))
    table.add_row("already done (resume skips them)", str(plan.done))
    table.add_row("problems to search", str(plan.todo))
    table.add_row("bad source rows (become errors rows)", str(plan.bad_rows))
    table.add_row(
        "budget total",
        f"{plan.budget_total:,} cost units at most ({plan.todo} problems x B={plan.budget:,})",
    )
    table.add_row("search", plan.algorithm)
    table.add_row("policy engine", plan.policy)
    table.add_row("scorer engine", plan.scorer)
    table.add_row("output", str(plan.run_dir))
    table.add_row("publish to", plan.publish_repo or "(not configured)")
    for i, text in enumerate(plan.sample, start=1):
        table.add_row(f"problem {i}" if i > 1 else "first problems", text)
    Console(file=file or sys.stdout, width=130).print(table)
