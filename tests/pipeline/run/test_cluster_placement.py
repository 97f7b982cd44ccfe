"""The placement settings: who runs where on a multi-node cluster.

The run config places the policy and scorer replicas with `num_gpus` (as on a real GPU
node group) and the search actors with a custom resource only the CPU node advertises.
These are the settings' checks; the real run on a multi-node cluster that reads the
placement back from Ray's state API is tests/test_ray_job_submit_cluster.py (the job
submitted as a real cluster runs one, so one cluster start serves both).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import parse_run_config
from tests.cluster import cluster_run_config


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
