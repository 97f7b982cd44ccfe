"""How long Serve takes to replace a replica whose node is lost, as a search actor sees it.

On the rehearsal cluster (tests/cluster.py: head, two "GPU" nodes, a CPU node; real
raylets on one machine) the policy deployment runs one replica (num_gpus 1, the
load-model engine).  A client on the CPU node sends one request after another through
the same `ServePolicy` the search actors use, *with retries off*, and records when each
one fails or succeeds.  The GPU node hosting the replica is then removed (SIGKILL of its
raylet and workers: a lost machine, no draining).  Printed, per trial:

    outage_s         node removed -> the first request that succeeds again
    first_error_s    node removed -> the first failed request (what retries must outlast)
    failures         requests that failed in between (retries off), and their errors

The retry defaults in `actors.config.ServiceConfig` (max_retries, retry_backoff_s) are
chosen from the largest outage measured here: a request's retries must span it.

    python -m benchmarks.replica_replacement [--trials 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections import Counter
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _probe_actor() -> Any:
    import ray

    from tests.cluster import SEARCH_RESOURCE

    @ray.remote(num_cpus=0, resources={SEARCH_RESOURCE: 1})
    class Probe:
        """Sends policy requests back to back from the CPU node, as a search actor would."""

        def __init__(self, service: dict[str, Any]) -> None:
            from ray import serve

            from actors.config import ServiceConfig
            from actors.serve import POLICY_APP, ServePolicy

            config = ServiceConfig.model_validate(service)
            self.policy = ServePolicy(serve.get_app_handle(POLICY_APP), config)
            self.events: list[tuple[float, float, bool, str]] = []
            self.running = False

        async def run(self, seconds: float) -> list[tuple[float, float, bool, str]]:
            from search.protocols import FinishReason, GenerationRequest

            self.running = True
            seed = 0
            end = time.time() + seconds
            while time.time() < end:
                seed += 1
                request = GenerationRequest("1 + 1?", "Step 1:", 1, 16, ("\nStep",), 0.7, seed)
                sent = time.time()
                out = await self.policy.generate(request)
                ok = bool(out) and out[0].finish is not FinishReason.ERROR
                self.events.append((sent, time.time(), ok, "" if ok else str(out[0].error)[:120]))
                if not ok:
                    await asyncio.sleep(0.05)
            return self.events

        def started(self) -> bool:
            return self.running and len(self.events) > 5

    return Probe


def trial(seconds: float) -> dict[str, Any]:
    import ray
    from ray import serve

    from actors.config import ServiceConfig
    from actors.serve import deploy_policy
    from tests.cluster import actor_nodes, rehearsal_cluster, wait_for

    engine = {"kind": "load_model", "output_tokens": 16, "time_scale": 0.3}
    # retries off and a long timeout: each failure is seen, and a request that waits in
    # Serve's router for the new replica counts as waiting, not failing
    service = ServiceConfig.model_validate(
        {"engine": engine, "num_gpus": 1, "max_retries": 0, "request_timeout_s": 600}
    )
    with rehearsal_cluster(dashboard=True) as cluster:
        ray.init(address=cluster.cluster.address, log_to_driver=False)
        try:
            deploy_policy(service)
            probe = _probe_actor().remote(service.model_dump(mode="json"))
            events_ref = probe.run.remote(seconds)
            wait_for(lambda: ray.get(probe.started.remote()), 120, "probe started")
            replica_node = next(iter(actor_nodes("PolicyServer").values()))
            assert replica_node in cluster.gpu
            removed = time.time()
            cluster.remove(replica_node)
            events = ray.get(events_ref)
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()
    # requests in flight at the removal or sent after it, times relative to the removal
    after = [(a - removed, b - removed, ok, err) for a, b, ok, err in events if b >= removed]
    failures = [(b, err) for _, b, ok, err in after if not ok]
    last_failure = failures[-1][0] if failures else 0.0
    waits = [b - max(a, 0.0) for a, b, ok, _ in after if ok]
    back = next(
        (b for a, b, ok, _ in after if ok and a > last_failure and b - max(a, 0) > 0.5), None
    )
    kinds = Counter(err.split(":")[0] for _, err in failures)
    return {
        # the first success after the outage (a request that had to wait for the new replica)
        "outage_s": back,
        "longest_wait_s": max(waits, default=None),
        "first_error_s": failures[0][0] if failures else None,
        "last_error_s": failures[-1][0] if failures else None,
        "failures": len(failures),
        "errors": dict(kinds),
        "requests_after": len(after),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=90.0, help="probe duration per trial")
    args = parser.parse_args()
    outages = []
    for n in range(args.trials):
        result = trial(args.seconds)
        print(f"trial {n + 1}: {result}", flush=True)
        if result["outage_s"] is not None:
            outages.append(result["outage_s"])
    if outages:
        print(f"outage_s median={statistics.median(outages):.1f} max={max(outages):.1f}")
    else:
        print("outage_s: the replica did not come back within the probe")


if __name__ == "__main__":
    main()
