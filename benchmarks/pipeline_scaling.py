"""How the real pipeline scales with trees_per_actor when the model costs a fixed latency.

The policy and the GenPRM scorer are real Serve deployments of the model-free
`sleep` engine (`actors/engines/sleep.py`): every engine call sleeps `--latency`
seconds and returns `--output-tokens` tokens, so a BG-MCTS step (one policy
request with n=2, then the two children scored concurrently, each two sequential
GenPRM calls: analysis, judgement) costs 3 x latency of waiting, and a tree
whose budget allows S steps costs about 3 x S x latency.  Everything else is the
real pipeline (`pipeline.run.synthesis.synthesize`): the bundled GSM8K source, Ray Data,
one search actor, Serve handles, math-verify grading, records, the Parquet sink.

With 1 actor and trees_per_actor = T, an ideal pipeline finishes
T / (3 x S x latency) problems per second.  Each setting runs N = 4 x T
problems (capped), i.e. 4 batches; throughput is measured over the search
window (first policy engine call to last scorer engine call, read by polling
both deployments' counters) and end to end.  The same background thread reads
/proc to attribute the CPU time of the window to the Ray processes (search
actor, replicas, Ray/Serve system).

    .venv/bin/python -m benchmarks.pipeline_scaling [--trees 1,4,16,64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from benchmarks.support.procstat import descendants, machine_ticks, proc_table
from pipeline.config import RunConfig, parse_run_config
from pipeline.run.synthesis import synthesize
from search.scorer_kinds import GENPRM

_TICK = os.sysconf("SC_CLK_TCK")
ROLES = ("search actor", "policy replica", "scorer replica", "Serve controller", "Ray system")


# ------------------------------------------------------------------ CPU accounting
def _role(cmdline: str) -> str:
    if "MapWorker" in cmdline or "SearchActor" in cmdline:
        return "search actor"
    if "PolicyServer" in cmdline:
        return "policy replica"
    if "ScorerServer" in cmdline:
        return "scorer replica"
    if "ServeController" in cmdline or "ProxyActor" in cmdline:
        return "Serve controller"
    return "Ray system"  # raylet, gcs_server, idle workers, agents, Ray Data coordinator


@dataclass
class Sample:
    t0: float  # before the counters were read
    t: float  # after
    ticks: dict[int, int]  # pid -> CPU ticks, this process and its descendants
    machine: tuple[int, int]  # (busy, total) ticks of the whole machine
    policy_calls: int
    scorer_calls: int


@dataclass
class Monitor:
    """Polls both deployments' engine-call counters and /proc in a background thread.

    The search window of a run is from the first sample where the policy's engine
    calls grew to the last sample where the scorer's grew (the last judgement);
    CPU time is attributed to the processes' roles over that window.
    """

    interval_s: float = 0.1
    samples: list[Sample] = field(default_factory=list)
    roles: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _calls(self) -> tuple[int, int]:
        from ray import serve

        from actors.serve import POLICY_APP, SCORER_APP

        policy = serve.get_app_handle(POLICY_APP).stats.remote().result()
        scorer = serve.get_app_handle(SCORER_APP).stats.remote().result()
        return int(policy["engine_calls"]), int(scorer["engine_calls"])

    def _sample(self) -> None:
        table = proc_table()
        mine = descendants(os.getpid(), table)
        for pid in mine:
            # Ray retitles an idle worker when it becomes an actor: re-read until specific.
            if self.roles.get(pid, "Ray system") == "Ray system":
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                self.roles[pid] = "driver" if pid == os.getpid() else _role(cmd)
        t0 = time.perf_counter()
        policy, scorer = self._calls()
        self.samples.append(
            Sample(
                t0,
                time.perf_counter(),
                {pid: table[pid][1] for pid in mine},
                machine_ticks(),
                policy,
                scorer,
            )
        )

    def start(self) -> None:
        self.samples.clear()
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> tuple[float, dict[str, float]]:
        """(search window seconds, CPU seconds per role over it, plus 'machine')."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        # synthesize() redeploys both apps (fresh replicas, counters back to 0): the search
        # starts at the first sample whose policy counter grew over the one before it.
        samples = self.samples
        i = next(
            i
            for i in range(1, len(samples))
            if samples[i].policy_calls > samples[i - 1].policy_calls
        )
        j = next(
            j for j in range(i, len(samples)) if samples[j].scorer_calls == samples[-1].scorer_calls
        )
        # The first call came after sample i-1 started reading the counters and the last
        # one before sample j finished: the window is an upper bound, by at most two
        # polling intervals.
        first, last = samples[i - 1], samples[j]
        seconds: dict[str, float] = defaultdict(float)
        for pid, ticks in last.ticks.items():
            seconds[self.roles.get(pid, "Ray system")] += (ticks - first.ticks.get(pid, 0)) / _TICK
        (busy1, total1), (busy0, total0) = last.machine, first.machine
        cores = os.cpu_count() or 1
        seconds["machine"] = (busy1 - busy0) / max(total1 - total0, 1) * cores * (last.t - first.t)
        return last.t - first.t0, dict(seconds)


# --------------------------------------------------------------------- one setting
@dataclass
class Result:
    trees: int
    problems: int
    e2e_s: float
    window_s: float
    iterations: float
    tree_wall_s: float
    answered: int
    cpu: dict[str, float]

    @property
    def rate(self) -> float:
        return self.problems / self.window_s if self.window_s > 0 else float("nan")


def _config(args: argparse.Namespace, trees: int, problems: int, root: Path) -> RunConfig:
    engine = {
        "kind": "sleep",
        "latency_s": args.latency,
        "output_tokens": args.output_tokens,
        "answer_every": args.answer_every,
    }
    return parse_run_config(
        {
            "run_id": f"scale-t{trees}-n{problems}",
            "output_root": str(root),
            "budget": args.output_tokens * 2 * args.steps,  # n=2 choices per step
            "source": {"kind": "bundled", "dataset": "gsm8k", "split": "test", "limit": problems},
            "search": {"algorithm": "bg_mcts", "step_max_tokens": 4 * args.output_tokens},
            "policy": {"engine": engine},
            "scorer": {"engine": engine, GENPRM: {"max_analysis_tokens": 64}},
            "actors": 1,
            "trees_per_actor": trees,
            "ray_num_cpus": os.cpu_count() or 2,
        }
    )


def run_setting(args: argparse.Namespace, trees: int, problems: int, root: Path) -> Result:
    config = _config(args, trees, problems, root)
    monitor = Monitor()
    monitor.start()
    start = time.perf_counter()
    summary = synthesize(config, progress=None)
    e2e = time.perf_counter() - start
    window, cpu = monitor.stop()
    if summary.errors:
        raise SystemExit(f"{summary.errors} problems failed; see {summary.run_dir}/errors")
    # a local folder: the run's output root is a temporary directory
    trees_table = pq.read_table(Path(summary.run_dir) / "trees").to_pylist()
    return Result(
        trees=trees,
        problems=summary.searched,
        e2e_s=e2e,
        window_s=window,
        iterations=statistics.mean(t["iterations"] for t in trees_table),
        tree_wall_s=statistics.mean(t["wall_time_s"] for t in trees_table),
        answered=summary.answered_nodes,
        cpu=cpu,
    )


# ------------------------------------------------------------- actor-side profile
COMPONENTS = (
    ("Serve handle (client side)", ("ray/serve/",)),
    ("Ray core (task submit, object refs)", ("ray/_private", "ray/_raylet", "_raylet", "ray/util")),
    ("serialization", ("pickle", "cloudpickle")),
    ("search core (search/)", ("search/",)),
    ("services (actors/)", ("actors/",)),
    ("grading + records (pipeline/, math-verify)", ("pipeline/", "math_verify", "sympy", "latex2")),
    (
        "asyncio + cross-thread futures",
        ("asyncio/", "selectors", "_asyncio", "_contextvars", "concurrent/futures", "threading.py"),
    ),
)


def _component(filename: str, name: str) -> str:
    where = f"{filename} {name}"
    for label, keys in COMPONENTS:
        if any(key in where for key in keys):
            return label
    return "other"


THREADS = {
    "python": "other Python threads (Serve router loop, math-verify pool)",
    "worker.io": "Ray core worker I/O (task submit, gRPC)",
}


def _thread_ticks() -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (name, int(fields[11]) + int(fields[12]))
    return out


@dataclass
class Profile:
    trees: int
    wall_s: float
    steps: int
    threads: dict[str, float]  # CPU seconds by thread ("main" = the event loop thread)
    components: dict[str, float]  # main-thread CPU seconds by component (cProfile tottime)


def profile_searches(args: argparse.Namespace, trees: int, root: Path) -> Profile:
    """The search actor's work (search + grading + records), in this process, profiled.

    `trees` searches run at once on this process's event loop through the same
    ServePolicy / ServeScorer clients and Serve deployments the actor uses.
    cProfile sees only the event-loop thread; the other threads (Serve's router
    loop, Ray's core worker, math-verify's pool) are measured from /proc.
    """
    import asyncio
    import cProfile
    import pstats

    from ray import serve

    from actors.serve import POLICY_APP, SCORER_APP, ServePolicy, ServeScorer
    from pipeline.problems.sources import load_problems
    from pipeline.records import records_for
    from search import derive_seed, run_search

    config = _config(args, trees, trees, root)
    policy = ServePolicy(serve.get_app_handle(POLICY_APP), config.policy)
    scorer = ServeScorer(serve.get_app_handle(SCORER_APP), config.scorer)
    problems = load_problems(config.source).problems

    async def one(problem: dict[str, Any]) -> int:
        seed = derive_seed(config.seed, problem["problem_id"])
        result = await run_search(
            problem["problem"], config.search, policy, scorer, config.budget, seed
        )
        await records_for(
            result, problem["reference"], problem_id=problem["problem_id"], run_id="profile"
        )
        return result.iterations

    async def all_of_them() -> list[int]:
        return await asyncio.gather(*(one(dict(p)) for p in problems))

    asyncio.run(all_of_them())  # warm-up: routers, imports, math-verify
    main_tid = threading.get_native_id()
    before = _thread_ticks()
    profiler = cProfile.Profile(time.thread_time)  # CPU time of the event-loop thread
    start = time.perf_counter()
    profiler.enable()
    steps = asyncio.run(all_of_them())
    profiler.disable()
    wall = time.perf_counter() - start
    after = _thread_ticks()
    threads: dict[str, float] = defaultdict(float)
    for tid, (name, ticks) in after.items():
        label = (
            "event loop (searches, handle calls)" if tid == main_tid else THREADS.get(name, name)
        )
        threads[label] += (ticks - before.get(tid, (name, 0))[1]) / _TICK
    components: dict[str, float] = defaultdict(float)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _, name), (_, _, tottime, _, _) in stats.items():
        components[_component(filename, name)] += tottime
    return Profile(trees, wall, sum(steps), dict(threads), dict(components))


# -------------------------------------------------------------------------- report
def report(args: argparse.Namespace, results: list[Result], profile: Profile | None) -> None:
    cores = os.cpu_count()
    optimized = args.serve_throughput_optimized
    mode = ", RAY_SERVE_THROUGHPUT_OPTIMIZED=1 in the workers" if optimized else ""
    print(
        f"\nPipeline scaling, sleep engine: {args.latency * 1000:.0f} ms per engine call, "
        f"{args.output_tokens} tokens per completion, budget {args.output_tokens * 2 * args.steps} "
        f"(about {args.steps} BG-MCTS steps of n=2; each step waits 3 x latency: policy, then "
        f"GenPRM analysis + judgement), 1 search actor, {cores} CPU cores"
        f"{mode}.\n"
        "problems/s = problems / search window, from the first policy engine call to the last "
        "scorer engine call (both deployments' counters polled every 0.1 s), so Ray Data and "
        "actor start-up are excluded but batch barriers, grading and commits are not; "
        "ideal = trees_per_actor / (3 x latency x mean steps per tree).\n"
    )
    _print_rates(args, results)
    _print_cpu(results, cores)
    if profile is not None:
        _print_profile(profile)
    if results:
        _print_cpu_limit(args, results[-1], cores)


def _print_rates(args: argparse.Namespace, results: list[Result]) -> None:
    """Throughput per setting against the latency model's ideal."""
    base = results[0].rate if results else float("nan")
    print(
        "| trees_per_actor | problems | wall s (end to end) | wall s (searching) "
        "| problems/s | ideal problems/s | ratio to ideal | speedup vs T=1 "
        "| steps/tree | tree wall s (ideal) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        tree_ideal = 3 * args.latency * r.iterations
        ideal = r.trees / tree_ideal
        print(
            f"| {r.trees} | {r.problems} | {r.e2e_s:.1f} | {r.window_s:.1f} | {r.rate:.2f} "
            f"| {ideal:.2f} | {r.rate / ideal:.2f} | {r.rate / base:.1f}x "
            f"| {r.iterations:.1f} | {r.tree_wall_s:.2f} ({tree_ideal:.2f}) |"
        )


def _print_cpu(results: list[Result], cores: int | None) -> None:
    """CPU seconds of the search window by process."""
    print(
        "\nWhere the CPU went during the search window (CPU seconds by process; % of cores = "
        "CPU seconds / (window x cores); 'machine' counts every process on the box, other "
        "users included):\n"
    )
    print(
        "| trees_per_actor | "
        + " | ".join(ROLES)
        + " | driver | ours, % of cores | machine, % of cores |"
    )
    print("|---:|" + "---:|" * (len(ROLES) + 3))
    for r in results:
        ours = sum(v for k, v in r.cpu.items() if k != "machine")
        cells = [f"{r.cpu.get(role, 0.0):.1f}" for role in (*ROLES, "driver")]
        share = 100 * ours / (r.window_s * (cores or 1))
        machine = 100 * r.cpu.get("machine", 0.0) / (r.window_s * (cores or 1))
        print(f"| {r.trees} | " + " | ".join(cells) + f" | {share:.0f}% | {machine:.0f}% |")


def _print_profile(profile: Profile) -> None:
    """The driver-side profile: CPU by thread, then the event loop's by component."""
    requests = 3 * profile.steps  # one policy + two score requests per step
    print(
        f"\nSearch-actor work profiled in the driver: {profile.trees} searches at once "
        f"(+ grading and records) through the same Serve handles, {profile.steps} steps, "
        f"{requests} Serve requests, {profile.wall_s:.1f}s wall. CPU seconds by thread "
        "(/proc), then the event-loop thread by component (cProfile tottime, inflated "
        "by the profiler):\n"
    )
    print("| thread | CPU s | ms per Serve request |")
    print("|---|---:|---:|")
    for name, sec in sorted(profile.threads.items(), key=lambda kv: -kv[1]):
        if sec >= 0.05:
            print(f"| {name} | {sec:.2f} | {1000 * sec / requests:.2f} |")
    print("\n| event-loop thread component | CPU s | share |")
    print("|---|---:|---:|")
    total = sum(profile.components.values()) or 1.0
    for name, sec in sorted(profile.components.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {sec:.2f} | {sec / total:.0%} |")


def _print_cpu_limit(args: argparse.Namespace, top: Result, cores: int | None) -> None:
    """Where the cores saturate, from the largest setting's CPU per request."""
    ours = sum(v for k, v in top.cpu.items() if k != "machine")
    requests = 3 * top.iterations * top.problems  # one policy + two score requests a step
    per_request = ours / requests
    cap = (cores or 1) / per_request / (3 * top.iterations)
    print(
        f"\nAt trees_per_actor={top.trees} our processes spent {1000 * per_request:.1f} ms "
        f"of CPU per Serve request (search actor, both replicas, Ray/Serve system, driver), "
        f"so {cores} cores saturate at about {(cores or 1) / per_request:.0f} requests/s = "
        f"{cap:.1f} problems/s of {top.iterations:.1f} steps, against the "
        f"{top.trees / (3 * args.latency * top.iterations):.1f} the latency model allows. "
        "Once the cores saturate, every request waits longer (tree wall s above its "
        "ideal) and throughput stops scaling with trees_per_actor; the profile shows "
        "where the actor's share goes (grading is negligible here: one distinct answer "
        "per tree)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trees", default="1,4,16,64", help="trees_per_actor settings")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per engine call")
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8, help="budget = 2 x output_tokens x steps")
    parser.add_argument("--answer-every", type=int, default=4)
    parser.add_argument("--batches", type=int, default=4, help="N = batches x trees_per_actor")
    parser.add_argument("--max-problems", type=int, default=256)
    parser.add_argument(
        "--serve-throughput-optimized",
        action="store_true",
        help="set RAY_SERVE_THROUGHPUT_OPTIMIZED=1 in the Ray workers (actor, replicas)",
    )
    parser.add_argument(
        "--profile-trees", type=int, default=64, help="searches profiled in the driver; 0: skip"
    )
    args = parser.parse_args()
    settings = [int(t) for t in args.trees.split(",")]

    import ray
    from ray import serve

    from actors.serve import deploy_policy, deploy_scorer

    # Workers only (the driver's monitor thread needs Serve's router loop in a thread).
    env = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"} if args.serve_throughput_optimized else {}
    ray.init(
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    results = []
    profile = None
    try:
        with tempfile.TemporaryDirectory(prefix="pipeline-scaling-") as tmp:
            # Warm-up: deploys both services and starts Ray Data once (not measured).
            warmup = _config(args, 1, 1, Path(tmp) / "warmup")
            deploy_policy(warmup.policy)
            deploy_scorer(warmup.scorer)
            run_setting(args, 1, 1, Path(tmp) / "warmup")
            for trees in settings:
                problems = min(args.batches * trees, args.max_problems)
                result = run_setting(args, trees, problems, Path(tmp))
                print(
                    f"trees_per_actor={trees}: {result.problems} problems in {result.e2e_s:.1f}s "
                    f"({result.rate:.2f}/s over {result.window_s:.1f}s of searching)",
                    flush=True,
                )
                results.append(result)
            if args.profile_trees > 0:
                profile = profile_searches(args, args.profile_trees, Path(tmp))
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
    report(args, results, profile)


if __name__ == "__main__":
    main()
