"""The dry run's scorer estimate against what searches really spent: the model of path
depth (`pipeline.run.scorer_model`) on the simulated grid and on real runs, two budgets.

    python -m benchmarks.scorer_estimate [--quick] [--work-dir DIR] [--prm DIR] [--grid-only]

1. **The simulated grid** (`benchmarks.scorer_value.grid`, the grid that gave "12.6 one-pass
   scorer tokens per policy token at 30K"): BG-MCTS on `search.simulated` at B = 3k, 10k,
   20k and 30k (200 problems x 3 seeds; `--quick` 40 x 1), under both PRM cost models.  The
   model is given the simulated environment's own shape (`SimParams`: steps of 180 tokens
   on average, the PRM's prompt and critique lengths, its 4,096-token input cap, one read
   per score), so this checks the depth law and the token accounting.
2. **The depth law refitted**: BG-MCTS on the simulated environment over k = 2, 3, 5,
   1-8 expansions in flight, B = 1k-30k and steps of 60 and 180 tokens (30 problems each;
   `--quick` 10), the dive's numbers fitted by least squares on log(depth - 1); printed
   beside the shipped ones (`BG_MCTS_DEPTH`), with the largest error of each; then the
   shipped law's largest error where answers come after 1-3 steps (25-token steps, k = 2,
   B = 300-10k), where the balanced tree takes over.
3. **Real runs of the embedded default** (SmolLM2-135M on llama.cpp, one-step arithmetic),
   each a ``python -m jobs.synthesize`` child: configs/local.yaml (GenPRM) and
   configs/local-prm.yaml (the one-pass PRM) at their B = 300 (16 problems, as shipped)
   and at B = 1000 (6 problems); `--quick`: 4 at B = 300 and 2 at B = 1000 in a work
   folder of its own, a smoke test.  Only the trees of the config's problems are read.
   The one-pass PRM is `--prm DIR` if given, else trained by ``bgmcts train-prm`` on the
   GenPRM B = 300 run's rows (as `make prm` does).  The model is given what the dry run
   would see: the config and the problems' text
   (`pipeline.run.scorer_model.model_estimate`).  Each run is skipped when its
   ``<work>/<name>.done`` marker says it finished, so a rerun takes the grid's minutes.

Runtime on the project's 2-core box: about 26 min from nothing (the runs 5, 4, 9.5 and 6
min: llama.cpp GenPRM at B = 1000 is the slow one; the grid and the fits 2 min).

Measured = (PRM input + PRM output tokens) / policy output tokens, over every tree of a
run or every search of a grid cell (the trees columns `prm_input_tokens`,
`prm_output_tokens`, `policy_output_tokens`).  Relative error = predicted / measured - 1.

Last line: ``worst_relative_error=<float>``, the largest |relative error| over the grid's
cells and the real runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.scorer_value import grid
from benchmarks.support.commands import REPO, run_module
from benchmarks.support.synthesis import (
    LOCAL,
    LOCAL_PRM,
    base_config,
    edited,
    open_run,
    synthesize_once,
)
from pipeline.config import RunConfig
from pipeline.problems.sources import load_problems
from pipeline.run.scorer_model import (
    BG_MCTS_DEPTH,
    DepthLaw,
    ScorerShape,
    SearchShape,
    model_estimate,
    scorer_tokens,
)
from search import derive_seed, parse_search_config, run_search
from search.scorer_kinds import GENPRM, ONE_PASS, ScorerKindName
from search.simulated import SimParams, SimPolicy, SimScorer, simulated_problems

GRID_BUDGETS = (3_000, 10_000, 20_000, 30_000)


@dataclass(frozen=True)
class Row:
    """One comparison: where, which scorer, B, predicted and measured ratio."""

    where: str
    scorer: ScorerKindName
    budget: int
    predicted: float
    measured: float
    depth_predicted: float
    depth_measured: float | None = None

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0 if self.measured else math.inf


# --------------------------------------------------------------------------- the grid
def sim_shapes(
    params: SimParams, budget: int, kind: ScorerKindName
) -> tuple[SearchShape, ScorerShape]:
    """The simulated environment as the model sees it: its mean step (a lognormal's mean,
    one boundary token added, as `SimPolicy` counts it), its PRM's prompt, critique and
    input cap, and one read per score (`SimScorer` charges each input once)."""
    step = params.step_tokens_median * math.exp(params.step_tokens_sigma**2 / 2) + 1
    search = SearchShape(
        budget=budget,
        step_tokens=step,
        inserted_tokens=0.0,
        k=2,
        in_flight=1,
        answer_steps=params.mean_answer_steps,
    )
    if kind == ONE_PASS:
        scorer = ScorerShape(
            kind, prompt_tokens=params.prm_one_pass_prompt_tokens, input_cap=4096.0
        )
    else:
        scorer = ScorerShape(
            kind,
            prompt_tokens=params.prm_prompt_tokens,
            analysis_tokens=params.prm_critique_tokens,
            input_cap=float(params.prm_max_input_tokens),
        )
    return search, scorer


def grid_rows(spec: grid.GridSpec) -> list[Row]:
    frame = grid.run_grid(spec)
    rows = []
    params = SimParams(**spec.params)
    for (cost, budget), cell in frame.groupby(["cost", "budget"], sort=True):
        measured = (cell["prm_input"].sum() + cell["prm_output"].sum()) / cell[
            "policy_output"
        ].sum()
        search, scorer = sim_shapes(params, int(budget), cost)
        model = scorer_tokens(search, scorer)
        rows.append(
            Row("grid", cost, int(budget), model.per_policy_token, measured, model.mean_depth)
        )
    return rows


# --------------------------------------------------------------------------- the law
SETTINGS = tuple(
    itertools.product((1_000, 3_000, 10_000, 30_000), (2, 3, 5), (1, 2, 4, 8), (150.0, 50.0))
)


# answers after 1-3 steps (from the first step on), short steps, k = 2, one in flight
ANSWER_SETTINGS = tuple(itertools.product((300, 1_000, 3_000, 10_000), (1.0, 1.5, 2.0, 3.0)))


async def _depth(
    budget: int,
    k: int,
    in_flight: int,
    median: float,
    problems: int,
    answer_steps: float | None = None,
) -> dict[str, float]:
    params = SimParams(prm_cost=ONE_PASS, step_tokens_median=median)
    if answer_steps is not None:  # answers from the first step on, after `answer_steps`
        params = dataclasses.replace(params, mean_answer_steps=answer_steps, min_answer_steps=1)
    config = parse_search_config(
        {"algorithm": "bg_mcts", "k": k, "max_inflight_expansions": in_flight}
    )
    nodes = depth = output = 0
    for problem in simulated_problems(problems, seed=0):
        seed = derive_seed(0, problem.problem_id)
        policy, scorer = SimPolicy(params, seed=seed), SimScorer(params, seed=seed)
        result = await run_search(problem.problem, config, policy, scorer, budget, seed)
        output += result.tokens.policy_output
        for node in result.tree.nodes:
            if node.id:
                nodes, depth = nodes + 1, depth + node.depth
    # what flies together: each pending expansion reserves k x step_max_tokens (1,024)
    flying = max(1, min(in_flight, budget // (k * config.step_max_tokens)))
    return {
        "nodes": nodes / problems,
        "depth": depth / nodes,
        "k": k,
        "in_flight": flying,
        "step": output / nodes,
        "answer_steps": params.mean_answer_steps,
    }


def answer_depth_error(problems: int) -> float:
    """The shipped law's largest mean-depth error where answers come after 1-3 steps."""

    async def collect() -> list[dict[str, float]]:
        return [await _depth(b, 2, 1, 25.0, problems, a) for b, a in ANSWER_SETTINGS]

    return max(
        abs(BG_MCTS_DEPTH.mean_depth(p["nodes"], 2, 1, p["answer_steps"]) / p["depth"] - 1)
        for p in asyncio.run(collect())
    )


def fit_law(problems: int) -> tuple[DepthLaw, float, float]:
    """The dive refitted on SETTINGS (solutions of 7 steps, where the completion bias acts
    fully); its largest error, and the shipped law's, on them."""

    async def collect() -> list[dict[str, float]]:
        return [await _depth(b, k, f, m, problems) for b, k, f, m in SETTINGS]

    points = asyncio.run(collect())
    design = np.array(
        [[1.0, math.log(p["nodes"]), -math.log(p["k"]), -math.log(p["in_flight"])] for p in points]
    )
    target = np.array([math.log(max(p["depth"] - 1.0, 1e-3)) for p in points])
    coef = np.linalg.lstsq(design, target, rcond=None)[0]
    law = DepthLaw(
        scale=float(math.exp(coef[0])),
        nodes_power=float(coef[1]),
        children_power=float(coef[2]),
        inflight_power=float(coef[3]),
        calibrated_on="refitted",
    )

    def worst(candidate: DepthLaw) -> float:
        return max(
            abs(candidate.dive_depth(p["nodes"], int(p["k"]), p["in_flight"]) / p["depth"] - 1)
            for p in points
        )

    return law, worst(law), worst(BG_MCTS_DEPTH)


# --------------------------------------------------------------------------- real runs
@dataclass(frozen=True)
class RealRun:
    name: str
    scorer: ScorerKindName
    budget: int
    problems: int


REAL = (
    RealRun("genprm-300", GENPRM, 300, 16),
    RealRun("one_pass-300", ONE_PASS, 300, 16),
    RealRun("genprm-1000", GENPRM, 1_000, 6),
    RealRun("one_pass-1000", ONE_PASS, 1_000, 6),
)
# a smoke test: a quarter of the problems, at least 2
REAL_QUICK = tuple(dataclasses.replace(r, problems=max(2, r.problems // 4)) for r in REAL)


def real_config(run: RealRun, work: Path, checkpoint: Path | None) -> RunConfig:
    """The shipped config of `run`'s scorer with its B and problem count, under `work`."""
    config = base_config(LOCAL if run.scorer == GENPRM else LOCAL_PRM)
    source = {**config.source.model_dump(exclude_unset=True), "count": run.problems}
    config = edited(
        config,
        run_id=run.name,
        output_root=work,
        budget=run.budget,
        source=source,
        trees_per_actor=min(config.trees_per_actor, run.problems),
    )
    if checkpoint is not None and run.scorer == ONE_PASS:
        engine = edited(config.scorer.engine, model=str(checkpoint))
        config = edited(config, scorer=edited(config.scorer, engine=engine))
    return config


def measured(config: RunConfig) -> tuple[float, float]:
    """(PRM in + out) / policy output over the trees of the config's problems (a run folder
    an earlier, larger run left may hold more), and their nodes' mean depth."""
    ids = {p["problem_id"] for p in load_problems(config.source).problems}
    folder = open_run(config)
    columns = ["problem_id", "policy_output_tokens", "prm_input_tokens", "prm_output_tokens"]
    trees = [t for t in folder.read("trees").select(columns).to_pylist() if t["problem_id"] in ids]
    assert len(trees) == len(ids), f"{config.resolved_run_id}: {len(trees)} of {len(ids)} trees"
    total = {c: sum(t[c] or 0 for t in trees) for c in columns[1:]}
    ratio = (total["prm_input_tokens"] + total["prm_output_tokens"]) / total["policy_output_tokens"]
    nodes = folder.read("tree_nodes").select(["problem_id", "depth"]).to_pylist()
    depths = [n["depth"] for n in nodes if n["problem_id"] in ids and n["depth"]]
    return ratio, sum(depths) / len(depths)


def real_rows(runs: tuple[RealRun, ...], work: Path, prm: Path | None) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    checkpoint = prm
    for run in runs:
        if run.scorer == ONE_PASS and checkpoint is None:
            checkpoint = work / "prm"
            if not (work / "prm.done").is_file():
                genprm = real_config(runs[0], work, None)
                seconds = run_module(
                    "jobs.train_prm",
                    [str(open_run(genprm).location), "--output", str(checkpoint), "--overwrite"],
                    work / "prm.log",
                )
                (work / "prm.done").write_text(f"{seconds:.0f}\n")
        config = real_config(run, work, checkpoint)
        synthesize_once(config, work)
        ratio, depth = measured(config)
        chars = [len(p["problem"]) for p in load_problems(config.source).problems]
        model = model_estimate(config, sum(chars) / len(chars))
        assert model is not None  # BG-MCTS: the law covers it
        rows.append(
            Row(
                "real",
                run.scorer,
                run.budget,
                model.tokens.per_policy_token,
                ratio,
                model.tokens.mean_depth,
                depth,
            )
        )
    return rows


# --------------------------------------------------------------------------- output
def table(rows: list[Row]) -> str:
    lines = [
        "| where | scorer | B | predicted | measured | error | depth predicted / measured |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        depth = f"{r.depth_predicted:.2f}"
        if r.depth_measured is not None:
            depth += f" / {r.depth_measured:.2f}"
        lines.append(
            f"| {r.where} | {r.scorer} | {r.budget:,} | {r.predicted:.2f} | {r.measured:.2f} "
            f"| {r.error:+.1%} | {depth} |"
        )
    return "\n".join(lines)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scorer_estimate", description=__doc__
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="runs and markers (default out/bench-scorer-estimate, -quick with --quick)",
    )
    parser.add_argument("--quick", action="store_true", help="smaller grid and runs")
    parser.add_argument("--prm", type=Path, default=None, help="a one-pass PRM checkpoint")
    parser.add_argument("--grid-only", action="store_true", help="no real runs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    spec = grid.QUICK if args.quick else grid.FULL
    spec = grid.GridSpec(
        budgets=GRID_BUDGETS,
        seeds=spec.seeds,
        problems=spec.problems,
        workers=spec.workers,
        methods=("bg_mcts",),
    )
    rows = grid_rows(spec)
    problems = 10 if args.quick else 30
    law, worst_fit, worst_shipped = fit_law(problems)
    print(
        f"dive refitted: a={law.scale:.3f} beta={law.nodes_power:.3f} "
        f"gamma={law.children_power:.3f} delta={law.inflight_power:.3f} "
        f"(largest depth error {worst_fit:.1%}); shipped: a={BG_MCTS_DEPTH.scale} "
        f"beta={BG_MCTS_DEPTH.nodes_power} gamma={BG_MCTS_DEPTH.children_power} "
        f"delta={BG_MCTS_DEPTH.inflight_power} (largest depth error {worst_shipped:.1%})"
    )
    print(
        "answers after 1-3 steps: the shipped law's largest depth error "
        f"{answer_depth_error(problems):.1%}"
    )
    if not args.grid_only:
        work = args.work_dir or REPO / "out" / (
            "bench-scorer-estimate-quick" if args.quick else "bench-scorer-estimate"
        )
        rows += real_rows(REAL_QUICK if args.quick else REAL, work, args.prm)
    print(table(rows))
    worst = max(abs(r.error) for r in rows)
    print(f"worst_relative_error={worst:.4f}", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
