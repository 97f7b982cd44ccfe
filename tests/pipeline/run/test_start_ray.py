"""`start_ray`'s choice between joining a cluster and starting one of its own.

`ray.init` is replaced by a recorder here (the fast tier starts no cluster): what is
checked is which arguments each RAY_ADDRESS gets; the pipeline tiers run them for real.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import ray

from pipeline.run.cluster import PRESTART, REDACTION_HOOK, start_ray


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append(kwargs))
    return seen


@pytest.mark.parametrize("address", [None, "", "local"])
def test_a_local_cluster_gets_its_cpus_and_no_dashboard(
    calls: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, address: str | None
) -> None:
    if address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    assert start_ray(3) is True
    (call,) = calls
    assert call["address"] == "local"
    assert call["num_cpus"] == 3 and call["include_dashboard"] is False


@pytest.mark.parametrize("preset", [None, "1"])
def test_a_local_cluster_prestarts_no_workers_unless_asked(
    calls: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, preset: str | None
) -> None:
    """Ray's idle workers for the first driver have no runtime env, and the job's all carry
    the redaction hook: they could never be used.  A value the user set is kept."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if preset is None:
        monkeypatch.delenv(PRESTART, raising=False)
    else:
        monkeypatch.setenv(PRESTART, preset)
    start_ray(2)
    assert calls[0]["runtime_env"] == {"worker_process_setup_hook": REDACTION_HOOK}
    assert os.environ[PRESTART] == (preset or "0")


def test_a_cluster_address_is_joined_as_it_is(
    calls: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert start_ray(3) is True
    (call,) = calls
    assert call["address"] == "ray://head:10001"
    assert "num_cpus" not in call and "include_dashboard" not in call


def test_a_start_that_times_out_is_tried_again_and_other_errors_are_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray's 30 s registration deadline, missed on a busy machine: a second start."""
    from pipeline.run.cluster import init_local_ray

    outcomes: list[Exception | None] = [
        Exception("The current node timed out during startup. This could happen ..."),
        None,
    ]
    events: list[str] = []

    def init(**kwargs: Any) -> None:
        events.append("init")
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: events.append("shutdown"))
    init_local_ray(num_cpus=2)
    assert events == ["init", "shutdown", "init"]

    events.clear()
    outcomes[:] = [ValueError("num_cpus must be a positive integer")]
    with pytest.raises(ValueError, match="num_cpus"):
        init_local_ray(num_cpus=-1)
    assert events == ["init"]

    events.clear()
    outcomes[:] = [Exception("timed out during startup")] * 3
    with pytest.raises(Exception, match="timed out during startup"):
        init_local_ray(num_cpus=2, attempts=3)
    assert events == ["init", "shutdown", "init", "shutdown", "init"]
