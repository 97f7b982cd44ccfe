"""Worst case of bounded grading: adversarial answers against a 5 s limit, plus MATH500.

    python -m benchmarks.grading_worst_case [--limit 5]

First one answer sympy cannot finish, on a cold pool (the pool's start counts inside
the bound, `timeout_s + POOL_START_ALLOWANCE_S`).  Then, on the warm pool, prints per
input the verdict and wall time; then the slowest comparison, the total wall time,
and the longest the event loop went without running a ticker coroutine (the loop
must keep running while sympy grinds in a worker process, and while the pool starts).
Then every MATH500 gold answer against its own \\boxed{} form (all must match).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common.grading import POOL_START_ALLOWANCE_S, compare, shutdown_pool

# Passes the cheap filter (nothing in the text says it explodes); sympy expands it for ever.
SLOW = "(x+1)^{9999} - x^{9999}"

ADVERSARIAL = [
    ("42", "9^{9^{9^{9}}}"),  # sympy builds billions of digits for it (common/grading.py)
    ("42", "9^9^9"),
    ("42", "2**3**4**5"),
    ("42", "9^{99999}"),  # a huge exponent
    ("42", "1" * 5000),  # a huge literal
    ("42", "9^{{9^{9}}}"),  # a tower behind extra braces
    ("42", "(9999^{9999})^{9999}"),  # exponents that multiply
    ("42", "{9999^{9999}}^{9999}"),
    ("42", SLOW),  # passes the filter: the worker is killed at the limit
    ("42", "\\binom{10^{4000}}{10^{3000}}"),
    ("\\frac{1}{2}", "0.5"),  # ordinary comparisons between the attacks
    ("x^2y^2", "x^{2}y^{2}"),
]


async def _worst(limit: float) -> None:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    t0 = time.perf_counter()
    verdict = await compare("42", SLOW, limit)  # the pool starts inside this call
    cold = time.perf_counter() - t0
    print(
        f"cold pool: {verdict.value} in {cold:.3f} s "
        f"(bound {limit + POOL_START_ALLOWANCE_S} s, the pool's start included)"
    )
    times = []
    start = time.perf_counter()
    for answer, reference in ADVERSARIAL:
        t0 = time.perf_counter()
        verdict = await compare(answer, reference, limit)
        times.append(time.perf_counter() - t0)
        print(f"{reference[:32]:34} {verdict.value:9} {times[-1]:7.3f} s")
    total = time.perf_counter() - start
    stop.set()
    await task
    print(f"slowest comparison {max(times):.3f} s (limit {limit} s); total {total:.2f} s")
    print(f"longest event-loop stall {max(gaps) * 1000:.0f} ms (ticker every 10 ms)")


async def _math500(limit: float) -> None:
    from pipeline.problems.sources import BundledSource, load_problems

    problems = load_problems(BundledSource(dataset="math500")).problems
    times, verdicts = [], []
    for p in problems:
        reference = p["reference"] or ""
        t0 = time.perf_counter()
        verdicts.append(await compare(f"\\boxed{{{reference}}}", reference, limit))
        times.append(time.perf_counter() - t0)
    matched = sum(v.value == "match" for v in verdicts)
    print(
        f"MATH500 gold vs boxed gold: {matched}/{len(problems)} match; "
        f"median {statistics.median(times) * 1000:.1f} ms, slowest {max(times):.3f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=5.0)
    args = parser.parse_args()
    asyncio.run(_worst(args.limit))
    asyncio.run(_math500(args.limit))
    shutdown_pool()


if __name__ == "__main__":
    main()
