"""The real pipeline on a multi-node Ray cluster: who runs where.

A head, two "GPU" nodes and a CPU node (tests/cluster.py, real raylets on one machine).
The run config places the policy and scorer replicas with `num_gpus` (as on a real GPU
node group) and the search actors with a custom resource only the CPU node advertises;
the driver joins from the head.  Placement is read back from Ray's state API.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pipeline.config import parse_run_config
from pipeline.run.synthesis import synthesize
from pipeline.store.run_folder import RunFolder
from tests.cluster import actor_nodes, cluster_run_config, rehearsal_cluster


@pytest.mark.e2e
def test_replicas_on_gpu_nodes_search_actors_on_cpu_nodes_driver_on_head(
    own_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray import serve

    config = parse_run_config(cluster_run_config(tmp_path / "out"))
    with rehearsal_cluster() as cluster:
        monkeypatch.setenv("RAY_ADDRESS", cluster.cluster.address)
        try:
            summary = synthesize(config, progress=None)
            driver = ray.get_runtime_context().get_node_id()
            policy = actor_nodes("PolicyServer")
            scorer = actor_nodes("ScorerServer")
            search = actor_nodes("SearchActor")
            controller = actor_nodes("ServeController")
            board = actor_nodes("ProgressBoard")
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()
        head, gpu, cpu = cluster.head, set(cluster.gpu), set(cluster.cpu)
    assert driver == head
    assert set(controller.values()) == {head} and set(board.values()) == {head}
    assert len(policy) == 1 and set(policy.values()) <= gpu
    assert len(scorer) == 1 and set(scorer.values()) <= gpu
    assert len(search) == 2 and set(search.values()) == cpu
    ids = RunFolder.open(tmp_path / "out", "cluster").read("trees").column("problem_id")
    assert summary.errors == 0 and sorted(Counter(ids.to_pylist()).values()) == [1] * 8


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("actor_resources", {"CPU": 1}, "set it with actor_num_cpus"),
        ("actor_resources", {"search_node": 0}, "must be a finite number > 0"),
    ],
)
def test_placement_settings_are_checked(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match=message) as caught:
        parse_run_config(cluster_run_config(tmp_path, **{field: value}))
    assert field in str(caught.value)


def test_replica_resources_are_checked(tmp_path: Path) -> None:
    from pipeline.config import ConfigError

    raw = cluster_run_config(tmp_path)
    raw["policy"] = {**raw["policy"], "resources": {"GPU": 1}}
    with pytest.raises(ConfigError, match=r"policy.resources.*set it with num_cpus/num_gpus"):
        parse_run_config(raw)


def test_the_cluster_example_config_is_valid_and_places_by_the_same_settings() -> None:
    from pipeline.config import load_run_config
    from tests.cluster import REPO, SEARCH_RESOURCE

    config = load_run_config(REPO / "configs" / "cluster-example.yaml")
    assert config.policy.num_gpus >= 1 and config.scorer.num_gpus >= 1
    assert config.actor_resources == {SEARCH_RESOURCE: 1}
    assert config.replay.enabled
