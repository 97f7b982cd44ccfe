"""How long llama.cpp's threads should spin while they wait, when engines share the cores.

    python -m benchmarks.llamacpp_threads [--repeats 3] [--engines 1 2 3]

llama.cpp (as xllamacpp builds it) runs each operation of a forward pass on OpenMP
threads that meet at a barrier after it.  libgomp's waiting thread spins about 300,000
times before it sleeps: right for a process that owns its cores, but the embedded default
runs two engines (policy and GenPRM, 2 threads each) beside Ray on two cores, and CI runs
two such tests at once.  A spinning thread then holds a core that another engine's
thread needs to finish the operation everyone waits for.

Each engine here is its own process (as in a Serve replica) running the same work: three
rounds of eight concurrent 64-token generations on the embedded SmolLM2 (4 slots, 2
threads).  For each number of engines running at once and each waiting policy it prints
the median wall seconds over `--repeats`, the waiting policies:

* ``libgomp default``: ``GOMP_SPINCOUNT=300000`` (libgomp's own default, set explicitly
  because the engine otherwise sets its own);
* ``engine default``: nothing set, so `actors.engines.llamacpp` sets ``GOMP_SPINCOUNT=300``;
* ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (no spinning at all).

The last lines: ``one_engine_ratio`` (engine default over libgomp default, one engine
alone: 1.0 means nothing lost) and ``two_engines_speedup`` (libgomp default over engine
default, two engines at once).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks.support.commands import REPO, child_env

POLICIES = {
    "libgomp default": {"GOMP_SPINCOUNT": "300000"},
    "engine default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
ROUNDS, REQUESTS, TOKENS = 3, 8, 64


async def _work() -> float:
    """One engine's share: the seconds its generations took (the model load not counted)."""
    from actors.engines.base import Sampling
    from actors.engines.llamacpp import LlamaCppEngine

    engine = LlamaCppEngine("embedded", context_length=1024, parallel=4, threads=2)
    started = time.perf_counter()
    for round_ in range(ROUNDS):
        prompts = [
            f"Problem {round_}-{i}: what is {i} + {7 * round_}? Answer step by step.\n"
            for i in range(REQUESTS)
        ]
        sampling = [
            Sampling(max_tokens=TOKENS, stop=(), temperature=0.7, seed=i) for i in range(REQUESTS)
        ]
        await asyncio.gather(
            *(engine.complete(p, s) for p, s in zip(prompts, sampling, strict=True))
        )
    seconds = time.perf_counter() - started
    await engine.close()
    return seconds


def _clean_env(policy: dict[str, str]) -> dict[str, str]:
    env = child_env()
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        env.pop(name, None)
    return {**env, **policy}


def run_at_once(engines: int, policy: dict[str, str]) -> float:
    """Start `engines` worker processes together; the slowest one's generation seconds."""
    command = [sys.executable, "-m", "benchmarks.llamacpp_threads", "--worker"]
    children = [
        subprocess.Popen(
            command,
            cwd=REPO,
            env=_clean_env(policy),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(engines)
    ]
    seconds = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"an engine process failed (exit {child.returncode})")
        seconds.append(float(out.strip().splitlines()[-1]))
    return max(seconds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median)")
    parser.add_argument("--engines", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(f"{asyncio.run(_work()):.3f}")
        return 0
    print(f"cpu_count={os.cpu_count()}  work per engine: {ROUNDS} x {REQUESTS} x {TOKENS} tokens")
    medians: dict[tuple[int, str], float] = {}
    for engines in args.engines:
        # the policies take turns within each repeat, so a noisy minute hits them alike
        times: dict[str, list[float]] = {name: [] for name in POLICIES}
        for _ in range(args.repeats):
            for name, policy in POLICIES.items():
                times[name].append(run_at_once(engines, policy))
        for name, values in times.items():
            medians[engines, name] = statistics.median(values)
    print("\n| engines at once | " + " | ".join(POLICIES) + " |")
    print("|---|" + "---|" * len(POLICIES))
    for engines in args.engines:
        cells = " | ".join(f"{medians[engines, name]:.1f} s" for name in POLICIES)
        print(f"| {engines} | {cells} |")
    if (1, "engine default") in medians:
        ratio = medians[1, "engine default"] / medians[1, "libgomp default"]
        print(f"one_engine_ratio={ratio:.3f}")
    if (2, "engine default") in medians:
        speedup = medians[2, "libgomp default"] / medians[2, "engine default"]
        print(f"two_engines_speedup={speedup:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
