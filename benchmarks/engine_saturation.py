"""How close the real pipeline keeps an engine to its own ceiling (the load model).

The policy and the GenPRM scorer are Serve deployments of the model-free
`load_model` engine (`actors/engines/load_model.py`): a continuous-batching engine's
timing (decode steps slowing as the batch grows, prefill of uncached tokens, an LRU
prefix cache, at most `max_seqs` sequences).  Everything else is the real pipeline
(`pipeline.run.synthesis.synthesize`): a JSONL source, Ray Data, search actors, Serve handles,
GenPRM, grading, records, the Parquet sink.

Trees have varied length: every `--slow-every`-th problem carries a marker that makes
its requests stay `--slow-factor` times as many steps in the batch (a long tree).

Per setting (actors x trees_per_actor) the engines report, over the window from the
first request they saw to the last they finished:

* problems/s: problems / window;
* each engine's utilisation: its work at the ceiling's operating point (a full batch;
  `EngineCurve.work_s`) / (window / time_scale);
* ratio_to_ceiling: the busier engine's utilisation, i.e. problems/s divided by the
  problems/s the bottleneck engine could give if it always ran a full batch.

Where our CPU is the limit: each setting runs in its own process (its own Ray
cluster) under `--cell-timeout-s`; the parent reads /proc for the CPU time of that
process and everything it started (Ray's processes, actors, replicas) and prints it
as cores used, next to the whole machine's busy share.  A setting that uses about all
the cores (`our cores` near the core count) is CPU-limited on this machine, whatever
its ratio; one that runs past the timeout is reported as such (with its CPU use)
instead of holding up the grid.  A setting's problems (2 waves of trees) pass
through an engine that at best serves about 2.5 problems/s at the defaults, so a
setting needs at least problems / 2.5 s: cells above ~500 problems need a timeout
above the default.

    .venv/bin/python -m benchmarks.engine_saturation --quick
    .venv/bin/python -m benchmarks.engine_saturation --trees 1,16,64 --actors 1,2
    ... --barrier: the same with main's batch barrier (the "before" numbers)

With --quick the last line is exactly `ratio_to_ceiling=<float>` for the quick setting.
With --h100 (`benchmarks/h100_goodput.py`: the H100 shape, realistic lengths, admission
on and off, in-flight expansions per tree) it is `goodput_ratio=<float>` for
`--h100-default`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from benchmarks.support.procstat import descendants, machine_ticks, proc_table
from pipeline.config import RunConfig, parse_run_config
from pipeline.run.synthesis import synthesize
from search.scorer_kinds import GENPRM

SLOW_MARKER = "(a long one)"
QUICK = {"actors": 1, "trees": 48, "problems": 96}


# ------------------------------------------------ deployments that report engine stats
def _install_stats_deployments() -> None:
    """Serve deployments that also answer `engine_stats` (the load model's counters).

    `synthesize` deploys `actors.serve.PolicyServer` / `ScorerServer`; for this benchmark
    they are replaced by subclasses with one more method.  (Defined in this script, so
    Ray pickles them by value into the replicas.)
    """
    from ray import serve

    import actors.serve as services

    class PolicyWithStats(services.PolicyServer.func_or_class):  # type: ignore[name-defined, misc]
        async def engine_stats(self) -> dict[str, Any]:
            return dict(self.engine._engine.stats())

    class ScorerWithStats(services.ScorerServer.func_or_class):  # type: ignore[name-defined, misc]
        async def engine_stats(self) -> dict[str, Any]:
            return dict(self.engine._engine.stats())

    services.PolicyServer = serve.deployment(PolicyWithStats)  # type: ignore[misc, assignment]
    services.ScorerServer = serve.deployment(ScorerWithStats)  # type: ignore[misc, assignment]


def _install_batch_barrier() -> None:
    """Main's search stage before continuous trees, for the "before" numbers (--barrier).

    Each actor call took `trees_per_actor` problems and returned when its slowest tree
    ended; one call ran at a time per actor.  Copied from pipeline/run/synthesis.py as it was.
    """
    import ray

    import pipeline.run.synthesis

    def barrier_stage(
        problems: Any, config: RunConfig, actor: type, board: str, wall_cap: Any = None
    ) -> Any:  # the benchmark sets no max_wall_s: no cap to hand the actors
        # the stream has one row per block; batch_size bundles trees_per_actor of them
        return problems.map_batches(
            actor,
            fn_constructor_kwargs={"run": config.model_dump(mode="json"), "board": board},
            compute=ray.data.ActorPoolStrategy(size=config.actors),
            batch_size=config.trees_per_actor,
            num_cpus=config.actor_num_cpus,
        )

    pipeline.run.synthesis.search_stage = barrier_stage


def _engine_stats() -> dict[str, dict[str, Any]]:
    from ray import serve

    from actors.serve import POLICY_APP, SCORER_APP

    return {
        role: serve.get_app_handle(app).engine_stats.remote().result()
        for role, app in (("policy", POLICY_APP), ("scorer", SCORER_APP))
    }


# -------------------------------------------------------------------- one setting
@dataclass
class Result:
    actors: int
    trees: int
    problems: int
    window_s: float
    e2e_s: float
    utilisation: dict[str, float]
    max_running: dict[str, int]
    cache_hit: dict[str, float]
    tree_wall_s: list[float]
    our_cores: float = 0.0  # CPU s of the setting's processes per wall s (set by the parent)
    machine_busy: float = 0.0  # the whole machine's busy share, other users included
    timed_out_s: float = 0.0  # > 0: did not finish within this many seconds

    @property
    def problems_per_s(self) -> float:
        return self.problems / self.window_s

    @property
    def ratio(self) -> float:
        return max(self.utilisation.values())


def _problems(path: Path, count: int, slow_every: int) -> None:
    rows = []
    for i in range(count):
        long = slow_every > 0 and i % slow_every == slow_every - 1
        rows.append(
            {
                "id": f"q{i}",
                "question": f"Problem {i}{' ' + SLOW_MARKER if long else ''}: what is {i} + {i}?",
                "answer": str(2 * i),
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _config(
    args: argparse.Namespace, actors: int, trees: int, problems: int, root: Path
) -> RunConfig:
    label = f"a{actors}-t{trees}-n{problems}"
    source = root / f"problems-{label}.jsonl"
    _problems(source, problems, args.slow_every)
    engine = {
        "kind": "load_model",
        "model": f"load-{label}",  # a new config: fresh replicas, counters from zero
        "max_seqs": args.max_seqs,
        "time_scale": args.time_scale,
        "output_tokens": args.output_tokens,
        "slow_marker": SLOW_MARKER,
        "slow_factor": args.slow_factor,
    }
    return parse_run_config(
        {
            "run_id": label,
            "output_root": str(root / "out"),
            "budget": args.output_tokens * 2 * args.steps,  # n=2 choices per step
            "source": {
                "kind": "jsonl",
                "path": str(source),
                "columns": {"problem": "question", "reference": "answer", "id": "id"},
            },
            "search": {"algorithm": "bg_mcts", "step_max_tokens": 4 * args.output_tokens},
            "policy": {"engine": engine, "max_ongoing_requests": 100_000},
            "scorer": {
                "engine": engine,
                GENPRM: {"max_analysis_tokens": args.output_tokens},
                "max_ongoing_requests": 100_000,
            },
            "records": {"decontamination": {"enabled": False}},
            "actors": actors,
            "trees_per_actor": trees,
            "actor_num_cpus": 0,
            "ray_num_cpus": os.cpu_count() or 2,
        }
    )


def run_setting(
    args: argparse.Namespace, actors: int, trees: int, problems: int, root: Path
) -> Result:
    config = _config(args, actors, trees, problems, root)
    start = time.perf_counter()
    summary = synthesize(config, progress=None)
    e2e = time.perf_counter() - start
    if summary.errors:
        raise SystemExit(f"{summary.errors} problems failed; see {summary.run_dir}/errors")
    stats = _engine_stats()
    first = min(s["first_arrival"] for s in stats.values())
    last = max(s["last_finish"] for s in stats.values())
    window = last - first
    scale = args.time_scale
    # a local folder: the run's output root is the cell's temporary directory
    trees_table = pq.read_table(Path(summary.run_dir) / "trees").to_pylist()
    return Result(
        actors=actors,
        trees=trees,
        problems=summary.searched,
        window_s=window,
        e2e_s=e2e,
        utilisation={role: s["work_s"] * scale / window for role, s in stats.items()},
        max_running={role: int(s["max_running"]) for role, s in stats.items()},
        cache_hit={
            role: s["cached_prompt_tokens"] / max(s["prompt_tokens"], 1)
            for role, s in stats.items()
        },
        tree_wall_s=[float(t["wall_time_s"]) for t in trees_table],
    )


def _cpu_note(r: Result, cores: int) -> str:
    limited = r.our_cores >= 0.85 * cores
    return (
        f"{r.our_cores:.2f} of {cores}{' (CPU-limited)' if limited else ''} | {r.machine_busy:.0%}"
    )


def _row(r: Result, cores: int) -> str:
    if r.timed_out_s:
        return (
            f"| {r.actors} | {r.trees} | {r.problems} | did not finish in {r.timed_out_s:.0f} s "
            f"| - | - | - | - | - | - | - | {_cpu_note(r, cores)} |"
        )
    walls = sorted(r.tree_wall_s)
    return (
        f"| {r.actors} | {r.trees} | {r.problems} | {r.window_s:.1f} | {r.problems_per_s:.2f} "
        f"| {r.utilisation['policy']:.2f} | {r.utilisation['scorer']:.2f} "
        f"| {r.max_running['policy']}/{r.max_running['scorer']} "
        f"| {r.cache_hit['policy']:.0%}/{r.cache_hit['scorer']:.0%} "
        f"| {statistics.median(walls):.1f}/{walls[-1]:.1f} | {r.ratio:.2f} "
        f"| {_cpu_note(r, cores)} |"
    )


# ------------------------------------------------ one setting per process, under a timeout
_TICK = os.sysconf("SC_CLK_TCK")


def run_cell(
    args: argparse.Namespace, actors: int, trees: int, problems: int, root: Path
) -> Result:
    """Run one setting in a child process; kill it (and its Ray) past the timeout."""
    out = root / f"cell-a{actors}-t{trees}.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.engine_saturation",
        *args.passthrough,
        "--cell",
        f"{actors},{trees},{problems}",
        "--cell-out",
        str(out),
    ]
    # its own session: on a timeout the whole group (its Ray processes too) goes
    repo = Path(__file__).resolve().parents[1]  # where `-m benchmarks.<name>` resolves
    child = subprocess.Popen(command, start_new_session=True, cwd=repo)
    start, (busy0, total0) = time.perf_counter(), machine_ticks()
    ticks: dict[int, int] = {}  # pid -> CPU ticks, for the child and all it started
    deadline = start + args.cell_timeout_s
    timed_out = False
    while child.poll() is None:
        table = proc_table()
        ticks.update((pid, table[pid][1]) for pid in descendants(child.pid, table))
        if time.perf_counter() > deadline:
            timed_out = True
            child.send_signal(signal.SIGINT)  # the driver shuts its Ray down
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            break
        time.sleep(1)
    wall = time.perf_counter() - start
    # whatever of its session is left (Ray's processes share the child's group)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    busy1, total1 = machine_ticks()
    if not timed_out and child.returncode != 0:
        raise SystemExit(f"setting a{actors} t{trees} failed (exit {child.returncode})")
    if timed_out:
        result = Result(actors, trees, problems, 0.0, wall, {}, {}, {}, [])
        result.timed_out_s = args.cell_timeout_s
    else:
        result = Result(**json.loads(out.read_text()))
    result.our_cores = sum(ticks.values()) / _TICK / wall
    result.machine_busy = (busy1 - busy0) / max(total1 - total0, 1)
    return result


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the quick setting (< 3 min)")
    parser.add_argument("--trees", type=_ints, default=[1, 4, 16, 64, 256])
    parser.add_argument("--actors", type=_ints, default=[1, 2, 4])
    parser.add_argument("--problems", type=int, default=0, help="per setting; 0: 2 waves")
    parser.add_argument(
        "--cell-timeout-s", type=float, default=600.0, help="a setting still running is cut off"
    )
    parser.add_argument("--max-seqs", type=int, default=32, help="the engines' max_seqs")
    parser.add_argument("--time-scale", type=float, default=4.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6, help="budget = 2 x output_tokens x steps")
    parser.add_argument("--slow-every", type=int, default=8, help="every n-th problem is long")
    parser.add_argument("--slow-factor", type=float, default=3.0)
    parser.add_argument(
        "--barrier", action="store_true", help="main's batch barrier instead of continuous trees"
    )
    parser.add_argument(
        "--h100",
        action="store_true",
        help="the H100 shape (benchmarks/h100_goodput.py): goodput with admission on and off",
    )
    parser.add_argument(
        "--h100-settings",
        default="off:1024:1,off:256:1,off:64:4,off:128:8,off:32:8,on:1024:1,on:1024:2,on:1024:4,on:1024:8,on:1024:16,on:1024:32",
        help="admission:trees (off: in flight; on: the cap):in-flight expansions per tree",
    )
    parser.add_argument("--h100-default", default="on:1024:16", help="the goodput_ratio= setting")
    parser.add_argument(
        "--h100-curve",
        choices=["assumed", "measured"],
        default="assumed",
        help="the load model's public-figure H100 curve, or the GPU-measured one with its "
        'context cost (docs/benchmarks.md, "Step costs on a GPU")',
    )
    parser.add_argument("--h100-warm-s", type=float, default=300.0, help="simulated seconds")
    parser.add_argument("--h100-window-s", type=float, default=300.0, help="simulated seconds")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # a,t,n: run one setting here
    parser.add_argument("--cell-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.passthrough = [
        f"--max-seqs={args.max_seqs}",
        f"--time-scale={args.time_scale}",
        f"--output-tokens={args.output_tokens}",
        f"--steps={args.steps}",
        f"--slow-every={args.slow_every}",
        f"--slow-factor={args.slow_factor}",
        *(["--barrier"] if args.barrier else []),
    ]
    return args


def _run_grid(args: argparse.Namespace, cores: int) -> list[Result]:
    """Every setting (or the quick one), each in its own process; a row as each ends."""
    if args.quick:
        settings = [(QUICK["actors"], QUICK["trees"], QUICK["problems"])]
    else:
        settings = [
            (a, t, args.problems or max(8, 2 * a * t)) for a in args.actors for t in args.trees
        ]
    print(
        f"1-min load average before the run: {os.getloadavg()[0]:.1f} on {cores} cores "
        "(above ~2.5: other work shared the machine)",
        flush=True,
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="engine-saturation-") as tmp:
        for actors, trees, problems in settings:
            result = run_cell(args, actors, trees, problems, Path(tmp))
            results.append(result)
            print(_row(result, cores), flush=True)
    return results


def _print_report(args: argparse.Namespace, results: list[Result], cores: int) -> None:
    print(
        f"\nLoad model: the cited H100 curve (step 7.4 ms + 0.051 ms per sequence, prefill "
        f"24,000 tokens/s, 400k-token prefix cache), max_seqs {args.max_seqs}, time_scale "
        f"{args.time_scale}; BG-MCTS, {args.output_tokens} tokens per completion, budget "
        f"{args.output_tokens * 2 * args.steps}; every {args.slow_every}th tree "
        f"{args.slow_factor:g}x longer; {cores} CPU cores; "
        f"{'batch barrier (main before)' if args.barrier else 'continuous trees'}; "
        f"1-min load average after the run: {os.getloadavg()[0]:.1f}.\n"
        "our cores: CPU s of the setting's processes (driver, Ray, actors, replicas) per wall "
        "s, from /proc; CPU-limited: 85% or more of the cores. machine busy: every process "
        "on the machine, other users' included (near 100% with few cores of ours: other work "
        "starved the setting; its numbers say little about the pipeline).\n"
    )
    print(
        "| actors | trees/actor | problems | window s | problems/s | policy util "
        "| scorer util | max running p/s | prompt cache hit p/s | tree wall s median/max "
        "| ratio to ceiling | our cores | machine busy |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|")
    for result in results:
        print(_row(result, cores))
    if args.quick:
        print(f"ratio_to_ceiling={results[0].ratio if not results[0].timed_out_s else 0.0:.3f}")


def main() -> None:
    args = _parse_args()
    if args.cell:
        _run_one_cell(args)
        return
    if args.h100:
        _h100(args)
        return

    cores = os.cpu_count() or 2
    results = _run_grid(args, cores)
    _print_report(args, results, cores)


def _h100(args: argparse.Namespace) -> None:
    """The H100 shape on a virtual clock (one process, no Ray): see benchmarks/h100_goodput."""
    from benchmarks.h100_goodput import CURVES, HEADER, Setting, row, run_setting

    def parse(text: str) -> Setting:
        admission, trees, inflight = text.split(":")
        return Setting(int(trees), int(inflight), admission == "on")

    settings = [parse(t) for t in args.h100_settings.split(",") if t]
    default = parse(args.h100_default)
    if default not in settings:
        settings.append(default)
    curve = CURVES[args.h100_curve]
    print(
        f"H100 shape, {args.h100_curve} curve: one load-model engine (step "
        f"{curve.decode_base_s * 1e3:.1f} ms + {curve.decode_per_seq_s * 1e3:.4f} ms/seq + "
        f"{curve.decode_per_context_token_s * 1e9:.1f} ns/context token, max_seqs 256, "
        f"prefill {curve.prefill_tokens_per_s:,.0f} tokens/s, 400k-token KV cache) "
        "serving BG-MCTS (k=2, B=10,000) and GenPRM; "
        "prompts ~300 tokens, completions 64-1,024 tokens (steps capped at 512, analyses at "
        f"1,024); warm-up {args.h100_warm_s:g} s, window {args.h100_window_s:g} s of "
        "simulated time (a virtual clock: the timing does not depend on this machine's load).",
        flush=True,
    )
    print(HEADER, flush=True)
    results = {}
    for setting in settings:
        result = run_setting(setting, args.h100_warm_s, args.h100_window_s, curve)
        results[(setting.admission, setting.trees, setting.inflight)] = result
        print(row(result), flush=True)
    chosen = results[(default.admission, default.trees, default.inflight)]
    print(f"goodput_ratio={chosen['goodput']:.3f}")


def _run_one_cell(args: argparse.Namespace) -> None:
    """Child process: one setting on its own Ray cluster; the result as JSON."""
    import ray
    from ray import serve

    from pipeline.run.cluster import quiet_ray

    actors, trees, problems = _ints(args.cell)
    quiet_ray()
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    _install_stats_deployments()
    if args.barrier:
        _install_batch_barrier()
    try:
        with tempfile.TemporaryDirectory(prefix="engine-saturation-cell-") as tmp:
            result = run_setting(args, actors, trees, problems, Path(tmp))
        Path(args.cell_out).write_text(json.dumps(asdict(result)))
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


if __name__ == "__main__":
    main()
