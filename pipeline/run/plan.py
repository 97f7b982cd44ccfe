"""What a run would do, without running it: `bgmcts synth --dry-run`.

Validates the source (a missing file or unknown column fails here, naming the field),
looks for the engines' packages and model files, and counts the problems left after
resume from the committed Parquet (read-only: safe beside a running job).  Nothing here
imports or starts Ray.

The machine that plans a run is often not the one that runs its engines: a laptop writes
the GPU cluster's config.  So the dry run lists the engine packages missing here as what
the cluster's nodes need (a real run refuses to start without them: `check_engines`), and
a model folder named by a path that is not here is a warning; a GGUF file for llama.cpp,
the CPU engine that runs where the config is, must exist.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from actors.engines.configs import EngineConfig
from actors.engines.factory import check_engine, missing_packages
from actors.errors import EngineError
from actors.scorer_kinds import scorer_kind
from pipeline.config import RunConfig
from pipeline.errors import InputError
from pipeline.problems.sources import ProblemRow, load_problems
from pipeline.run.allocation import AllocationConfig, plan_lines
from pipeline.run.gpu_hours import GPU_HOURS_KEY, GpuShape, gpu_shape
from pipeline.run.token_estimate import Committed, TokenEstimate, estimate_tokens, token_rows
from pipeline.store.filesystem import check_reachable
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
    cluster_needs: tuple[str, ...] = ()  # engine packages missing here, with their pip hint
    warnings: tuple[str, ...] = ()  # model folders not here, each naming its field
    tokens: TokenEstimate | None = None  # policy and scorer tokens of the problems to do
    gpus: GpuShape | None = None  # the GPUs the services hold (None: no GPU shape)
    # rows per GPU-hour the run's last invocation measured (run.json), if it had GPUs
    measured_gpu_hours: dict[str, Any] | None = None
    problems: int = 0  # problems in the selection (bad rows not counted)
    allocation: AllocationConfig | None = None  # the night allocator, when enabled

    @property
    def budget_total(self) -> int:
        """Worst-case cost units of this invocation: problems x B (a search spends at most B;
        the scorer's tokens are outside it unless search.cost charges them: `tokens`)."""
        return self.todo * self.budget


def _engine(engine: EngineConfig) -> str:
    return f"{engine.kind}:{engine.model}"


def _engines(config: RunConfig) -> dict[str, EngineConfig]:
    return {"policy": config.policy.engine, "scorer": config.scorer.engine}


def _named(role: str, exc: EngineError) -> InputError:
    """The engine's one-line error under its service: an error about one config field
    (`EngineError.field`, which its message opens with: "engine.model: ...",
    "one_pass.step_separator=...") names that field in full ("scorer.engine.model: ..."),
    as the dry run's warnings do; any other (a missing package) reads "policy: ..."."""
    if exc.field is not None:
        return InputError(f"{role}.{exc}")
    return InputError(f"{role}: {exc}")


def _check_scorer_kind(config: RunConfig) -> None:
    """What the scorer's kind checks beyond its engine (a one-pass PRM's step separator and
    trained layout), under the scorer's name."""
    try:
        scorer_kind(config.scorer).check(config.scorer)
    except EngineError as exc:
        raise _named("scorer", exc) from None


# What a one-pass PRM's sequence holds beyond a path bounded by B: its own prompt (its
# system turn and the problem) and one separator per step.  A MATH problem is 50-400
# tokens; a path whose prompt is longer still comes back as a context-overflow node at run
# time, never a crash.
ONE_PASS_PROMPT_ALLOWANCE = 512


def scorer_context_needed(config: RunConfig) -> tuple[int, str] | None:
    """The context a one-pass scorer needs to read the longest path the policy may write
    whole, and why; None: nothing bounds the path.

    Two bounds, the tighter one counts: B in policy output tokens (every step of a path is
    charged to B) plus the PRM's own prompt (`ONE_PASS_PROMPT_ALLOWANCE`), or the policy's
    own context, which already holds its prompt with the path (the PRM's prompt, the same
    problem under another template, stands in for it)."""
    bounds = []
    if (weight := config.search.cost.policy_output) > 0:
        path = int(config.budget / weight)
        bounds.append((path + ONE_PASS_PROMPT_ALLOWANCE, f"B={config.budget:,} and the prompt"))
    field, tokens = config.policy.engine.context()
    if tokens is not None:
        bounds.append((tokens, f"policy.engine.{field}"))
    return min(bounds) if bounds else None


def check_scorer_context(config: RunConfig) -> None:
    """Refuse a one-pass scorer whose context cannot hold the longest path the policy may
    write: every longer path would come back as an error node, never expanded, deep into a
    paid-for run.  (GenPRM trims a long conversation to fit, oldest critiques and steps
    first, `actors.genprm`, so its context is not checked here.)"""
    engine = config.scorer.engine
    needed = scorer_context_needed(config)
    field, context = engine.context()
    if not engine.scores_steps or needed is None or context is None:
        return
    tokens, bound = needed
    if context < tokens:
        policy_field = config.policy.engine.context()[0]
        if getattr(engine, field, context) is None:  # the checkpoint's own positions
            what, fix = f"null (the checkpoint's {context:,} positions)", ""
        else:
            what, fix = (
                f"{context:,} tokens",
                f"raise it to {tokens:,} if the model reads that far, or ",
            )
        raise InputError(
            f"scorer.engine.{field}: {what} cannot hold the longest path the policy may "
            f"write ({tokens:,} tokens, from {bound}); {fix}bound the policy's paths to what "
            f"it reads (policy.engine.{policy_field}: {context:,})"
        )


def check_engines(config: RunConfig) -> None:
    """A real run: refuse to start, naming the service, when this machine cannot build one
    of its engines (a missing package or model file, a model that is not what its engine
    loads, a one-pass scorer's step separator that is not one token), before Ray starts."""
    for role, engine in _engines(config).items():
        try:
            check_engine(engine)
        except EngineError as exc:
            raise _named(role, exc) from None
    _check_scorer_kind(config)
    check_scorer_context(config)


def _look_for_engines(config: RunConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the cluster's nodes need that is not here (packages), and the warnings about
    model folders; a model file that must be here raises an InputError naming the service."""
    needs: dict[str, None] = {}  # ordered and without repeats (policy and scorer share most)
    warnings = []
    for role, engine in _engines(config).items():
        needs.update(dict.fromkeys(str(p) for p in missing_packages(engine)))
        try:
            warning = engine.check_model()
        except EngineError as exc:
            raise _named(role, exc) from None
        if warning is not None:
            warnings.append(f"{role}.{warning}")
    _check_scorer_kind(config)
    check_scorer_context(config)
    return tuple(needs), tuple(warnings)


def plan_run(config: RunConfig, sample: int = 5) -> RunPlan:
    """Everything `--dry-run` prints; raises the source's or engine's own clear errors."""
    loaded = load_problems(config.source)
    cluster_needs, warnings = _look_for_engines(config)
    run_id = config.resolved_run_id
    folder = RunFolder.open(config.output_root, run_id)
    check_reachable(folder.store, config.output_root)  # as the run does: one line, exit 2
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
        cluster_needs=cluster_needs,
        warnings=warnings,
        tokens=estimate_tokens(
            config, len(todo), Committed.read(folder), problem_chars=_mean_chars(todo)
        ),
        gpus=gpu_shape(config),
        measured_gpu_hours=_measured_gpu_hours(folder),
        problems=len(loaded.problems),
        allocation=config.allocation if config.allocation.enabled else None,
    )


def _measured_gpu_hours(folder: RunFolder) -> dict[str, Any] | None:
    """run.json's rows per GPU-hour from the run's last invocation; None for a new run, or
    a run.json without them (a dry run reads, so one that cannot be read says nothing)."""
    try:
        summary = folder.read_manifest().get("summary")
    except InputError:
        return None
    block = summary.get(GPU_HOURS_KEY) if isinstance(summary, dict) else None
    return block if isinstance(block, dict) and block.get("gpu_hours") else None


def gpu_rows(plan: RunPlan) -> list[tuple[str, str]]:
    """The dry run's rows about GPUs: what it holds, and why it gives no rows per GPU-hour
    before the run (`pipeline.run.gpu_hours`); none for a config without a GPU shape."""
    if plan.gpus is None:
        return []
    gpus = plan.gpus.gpus
    held = "autoscaled" if gpus is None else f"{gpus:g}"
    rows = [("GPUs held", f"{held} ({plan.gpus.describe()})")]
    measured = plan.measured_gpu_hours
    if measured:
        per_hour = measured.get("rows_per_gpu_hour") or {}
        said = ", ".join(f"{t} {v:,.1f}" for t, v in per_hour.items() if v)
        rows.append(
            (
                "kept rows per GPU-hour",
                f"{said or 'none'} (measured by this run's last invocation, run.json)",
            )
        )
    else:
        rows.append(
            (
                "kept rows per GPU-hour",
                "not estimated before a run: rows per tree depend on how often the policy "
                "solves these problems; run.json and the report measure it at the end",
            )
        )
    return rows


def _mean_chars(problems: list[ProblemRow]) -> float | None:
    """The problems' mean length in characters: the scorer's prompt holds the problem."""
    if not problems:
        return None
    return sum(len(p["problem"]) for p in problems) / len(problems)


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


# What the allocator's benchmark measured (docs/search.md, "the night allocator"): the rows a
# night can expect are not known before its probes; the simulated world's ratios are.
ALLOCATION_EXPECTED = (
    "not known before the probes; on the simulated world (benchmarks.night_allocation, "
    "docs/search.md) about 1.3x the DPO + step-DPO pairs per policy token of uniform B and "
    "as many SFT rows (1.02x) at B = 10,000"
)


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
    if plan.tokens is not None:
        for what, value in token_rows(plan.tokens, plan.todo, plan.budget):
            table.add_row(what, value)
    for what, value in gpu_rows(plan):
        table.add_row(what, value)
    if plan.allocation is not None:
        for what, value in plan_lines(plan.allocation, plan.budget, plan.problems):
            table.add_row(what, value)
        table.add_row("expected rows", ALLOCATION_EXPECTED)
    table.add_row("search", plan.algorithm)
    table.add_row("policy engine", plan.policy)
    table.add_row("scorer engine", plan.scorer)
    table.add_row("output", str(plan.run_dir))
    table.add_row("publish to", plan.publish_repo or "(not configured)")
    for i, text in enumerate(plan.sample, start=1):
        # as Text, not markup: a problem's LaTeX ("\[x\]") is shown as written
        table.add_row(f"problem {i}" if i > 1 else "first problems", Text(text))
    out = file or sys.stdout
    Console(file=out, width=130).print(table)
    for warning in plan.warnings:
        print(f"warning: {warning}", file=out)
    if plan.cluster_needs:
        print(f"the cluster's nodes need: {', '.join(plan.cluster_needs)}", file=out)
