"""Joining or starting the Ray cluster a job runs on."""

from __future__ import annotations

import os


def start_ray(num_cpus: int | None) -> bool:
    """Join the cluster in RAY_ADDRESS (`ray job submit` sets it), else start a local one.

    Returns True when this call initialized Ray (so the caller may shut it down).
    """
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return True
