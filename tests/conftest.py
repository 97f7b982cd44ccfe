"""What every test folder shares: the test tiers, one local Ray cluster per test process,
and a tiny one-pass PRM checkpoint (tests/prm_checkpoint.py).

The tiers (markers declared in pyproject.toml; docs/testing.md says what each runs):

* no marker: plain Python (search, records, configs, scripted engines); milliseconds.
* ``integration``: a real Ray cluster with real Serve deployments, a real model (llama.cpp,
  torch) or a subprocess of one of the project's commands; seconds.
* ``e2e``: a whole pipeline run (synthesize, evaluate, nightly; in this process or as a
  ``python -m jobs...`` subprocess), ``ray job submit`` or a multi-node cluster; tens of
  seconds to minutes.

An unmarked test that starts Ray fails at once, naming the marker it needs: the fast tier
stays fast because nothing slips into it unnoticed.

Across the tiers, ``scenario("name")`` marks a long named scenario (tests/scenarios.py):
it is an e2e test that `make test-scenarios` runs and the landing gate (`.ci/run`) leaves
out, because a small real version of it runs in the gate.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Before Ray is imported anywhere: no token auth and no usage-stats calls (shared FACTS).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TIERS = ("integration", "e2e")


def start_local_ray(**options: Any) -> None:
    """A new local 2-CPU cluster (never one `ray start` left running: another test's),
    its start retried as the jobs' is (`init_local_ray`)."""
    from pipeline.run.cluster import init_local_ray

    init_local_ray(**{"num_cpus": 2, "include_dashboard": False, "log_to_driver": False, **options})


def clear_serve() -> None:
    """Delete every Serve application, keeping Serve's controller: the next module deploys
    its own engines onto a clean cluster without paying for a new controller."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        return
    try:
        applications = serve.status().applications
    except Exception:  # Serve was never started in this cluster
        return
    for name in applications:
        serve.delete(name)


def stop_ray() -> None:
    """Serve and Ray down (for a test that needs a cluster shaped its own way).

    Then the garbage collector runs while no Ray is connected.  A new `ray.init` in this
    process gives its driver the same job id, so its objects get the same ids as the old
    session's; an ObjectRef of the old session freed later, inside the new one, would be
    released against the new session's reference table.  That is the likely cause of a task
    failing with "a Ray object whose owner is unknown", seen once in the node-loss
    scenario's second cluster of one process.  Freed now, an old ref touches no session."""
    import gc

    import ray
    from ray import serve

    if ray.is_initialized():
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()
    gc.collect()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """The test process's one local Ray cluster, started by the first module that asks and
    kept for the rest of the session (`pytest_sessionfinish` stops it); each module's Serve
    applications are deleted when it ends.  `synthesize()` joins a running cluster, so the
    whole-pipeline tests that run in this process share it too."""
    import ray

    if not ray.is_initialized():
        start_local_ray()
    yield
    clear_serve()


@pytest.fixture
def own_ray() -> Iterator[None]:
    """No shared cluster during the test (it builds its own: multi-node, other resources);
    whatever Ray it leaves behind is stopped after it, and the next module starts the
    shared one again."""
    stop_ray()
    yield
    stop_ray()


# Fixtures that decide a test's tier by themselves: a test that asks for one needs what
# it starts, whether or not its file says so.
TIER_OF_FIXTURE = {"ray_cluster": "integration", "tiny_prm": "integration", "own_ray": "e2e"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.scenarios import check_scenario_marker

    for item in items:
        scenario = item.get_closest_marker("scenario")
        if scenario is not None:
            check_scenario_marker(item.nodeid, scenario.args)
            if not item.get_closest_marker("e2e"):
                item.add_marker(pytest.mark.e2e)  # a scenario is end to end by definition
        if any(item.get_closest_marker(tier) for tier in TIERS):
            continue  # its own marker says it already (an e2e run may also use the cluster)
        needs = {TIER_OF_FIXTURE.get(name) for name in getattr(item, "fixturenames", ())}
        for tier in reversed(TIERS):  # the heaviest tier its fixtures need
            if tier in needs:
                item.add_marker(getattr(pytest.mark, tier))
                break
    heaviest_files_first(items)


def tier_rank(item: pytest.Item) -> int:
    """0 for an e2e test, 1 for an integration test, 2 for a fast one."""
    for rank, tier in enumerate(reversed(TIERS)):
        if item.get_closest_marker(tier):
            return rank
    return len(TIERS)


def heaviest_files_first(items: list[pytest.Item]) -> None:
    """Order whole files by the heaviest tier among their tests, e2e files first.

    pytest-xdist (`--dist loadfile --no-loadscope-reorder`, Makefile) hands files to its two
    workers in this order as each worker frees up. A minutes-long end-to-end file handed
    out last keeps one worker busy while the other idles; handed out first, the short files
    fill in around it (longest first is the classic rule for balancing two machines).
    The order within a file, and among files of one tier, stays as collected: the
    multi-node files (`own_ray`) were also tried first of all, so that none stops a shared
    cluster that must start again, and their two clusters at once at the start of CI left
    a submitted job short of its deadline."""
    rank_of_file: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        rank_of_file[path] = min(rank_of_file.get(path, len(TIERS)), tier_rank(item))
    items.sort(key=lambda item: rank_of_file[item.nodeid.split("::", 1)[0]])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import sys

    if "ray" in sys.modules:
        stop_ray()


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unmarked test may not start Ray: it would make the fast tier slow unnoticed."""
    if any(request.node.get_closest_marker(tier) for tier in TIERS):
        return
    try:
        import ray
    except ImportError:  # the vLLM and TRL venvs have no Ray
        return
    if ray.is_initialized():
        return

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"{request.node.nodeid} starts Ray: mark it `integration` (a cluster, a model) "
            "or `e2e` (a whole pipeline run); see tests/conftest.py"
        )

    monkeypatch.setattr(ray, "init", refuse)


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-layer random Llama token classifier with SmolLM2's real tokenizer and chat
    template (its step values spread well apart), written once per test session."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from tests.prm_checkpoint import write_tiny_prm

    return write_tiny_prm(tmp_path_factory.mktemp("tiny-prm"))
