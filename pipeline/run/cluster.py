"""Joining or starting the Ray cluster a job runs on."""

from __future__ import annotations

import json
import os
from typing import Any

# Every worker process of the job (tasks, actors, Serve replicas) redacts its log lines
# from the start: a Ray worker's own and its libraries' (httpx, openai) loggers included.
REDACTION_HOOK = "common.redact.install_log_redaction"
# Ray's setting (read by a new raylet from the environment) for idle workers started when
# the first driver connects.
PRESTART = "RAY_prestart_worker_first_driver"


def start_ray(num_cpus: int | None, *, quiet: bool = False) -> bool:
    """Join the cluster in RAY_ADDRESS (`ray job submit` sets it), else start a local one.

    Returns True when this call initialized Ray (so the caller may shut it down).
    `quiet`: Ray's driver-side logging at WARNING (see `quiet_ray`).
    """
    import logging

    import ray

    from common.redact import install_log_redaction

    install_log_redaction()  # the driver
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return False
    level = logging.WARNING if quiet else logging.INFO
    address = os.environ.get("RAY_ADDRESS")
    runtime_env = _runtime_env()
    if address and address != "local":
        ray.init(address=address, log_to_driver=False, logging_level=level, runtime_env=runtime_env)
    else:
        # "local": a new cluster of this process's own.  Without it, Ray joins whatever
        # cluster `ray start` left running on this machine, and refuses `num_cpus` there.
        # RAY_ADDRESS=local asks for the same, so it gets the same settings: no dashboard
        # (its processes cost a small machine CPU at every start; `ray start` has one).
        # Nor does Ray start an idle worker per CPU for the first driver: those carry no
        # runtime env, and every worker of this job carries the redaction hook, so none of
        # them could ever run its tasks (a local run started 12 worker processes, now 10).
        os.environ.setdefault(PRESTART, "0")
        init_local_ray(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=level,
            runtime_env=runtime_env,
        )
    return True


# What Ray's exception says when a new node missed its registration deadline.
STARTUP_TIMEOUT = "timed out during startup"


def init_local_ray(*, attempts: int = 3, **options: Any) -> None:
    """`ray.init` of a new local cluster (`options`: ray.init's), tried `attempts` times.

    Ray gives a new node 30 s to register with its GCS, hard-coded; a machine whose cores
    are busy (a small one running two engines, a test suite) can miss it, and a second
    start then usually makes it.  Any other error is raised at once."""
    import ray

    for attempt in range(attempts):
        try:
            ray.init(address="local", **options)
            return
        except Exception as exc:  # Ray raises a bare Exception for this timeout
            if STARTUP_TIMEOUT not in str(exc) or attempt == attempts - 1:
                raise
            ray.shutdown()


def on_head_node() -> dict[str, Any]:
    """Actor options that place a run's small bookkeeping actors (the progress board) on
    the head node, as Serve places its controller: the node that lives as long as the
    cluster (and runs a `ray job submit` driver), never a worker that may be lost."""
    from ray._common.constants import HEAD_NODE_RESOURCE_NAME

    return {"resources": {HEAD_NODE_RESOURCE_NAME: 0.001}}


def _runtime_env() -> dict[str, Any] | None:
    """The job's runtime env: the redaction hook, unless `ray job submit` set a hook already
    (Ray refuses two; the actors and replicas still install redaction themselves)."""
    # What `ray job submit --runtime-env` gave the driver (Ray's JobConfig as JSON).
    submitted = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    if "worker_process_setup_hook" in (submitted.get("runtime_env") or {}):
        return None
    return {"worker_process_setup_hook": REDACTION_HOOK}


def quiet_ray() -> None:
    """Ray's own progress bars and INFO lines off; warnings and errors still shown.

    Called before Ray starts (`--verbose` skips it).  Ray Data's progress bars are a
    DataContext switch; Ray, Ray Data and Serve log through the `ray` logger tree.
    """
    import logging

    import ray.data
    from ray.util.debug import log_once

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    # Ray Data warns once that its bars are off: we asked for it, so use up that "once".
    log_once("ray_data_progress_manager_disabled")
    for name in ("ray", "ray.data", "ray.serve", "ray.train", "ray.tune"):
        logging.getLogger(name).setLevel(logging.WARNING)
