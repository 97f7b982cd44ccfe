"""Nodes lost in the middle of a run on a multi-node cluster: every problem exactly once.

The rehearsal cluster (tests/cluster.py: head, two "GPU" nodes, a CPU node; real raylets
on one machine) runs the real pipeline on the load model.  Mid-run, a worker node is
removed the way a lost machine goes (its raylet and workers SIGKILLed, no draining):

* the CPU node with the search actors: a replacement CPU node joins (as an autoscaler
  would bring one), Ray Data restarts the actors there and retries their problems, and
  the killed trees resume from their request logs (`actors.replay`);
* the GPU node with the policy replica: Serve starts a new replica on the other GPU
  node, and the default retry settings (`actors.config.ServiceConfig`) carry the
  requests that were in flight over the gap, so no node of any tree fails.

Both on the four-node cluster are the node-loss scenario (`make test-scenarios`): two
four-node clusters are minutes of a 2-core machine.  The landing gate keeps the same
property small: the search node lost from a two-node cluster (the head holding the
replicas), with fewer problems.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import parse_run_config
from pipeline.run.summary import RunSummary
from pipeline.run.synthesis import synthesize
from pipeline.store.request_log import FOLDER
from pipeline.store.run_folder import RunFolder
from tests.cluster import actor_nodes, cluster_run_config, rehearsal_cluster, wait_for
from tests.deadlines import JOB_DEADLINE_S

pytestmark = pytest.mark.e2e

PROBLEMS = 10
# The gate's two-node version: enough problems that trees are still in flight when the
# first one commits, with two search actors of two trees each, and still some to search
# once the replacement node has joined.
SMALL_PROBLEMS = 8


def _in_flight(run_dir: Path) -> bool:
    """A tree committed and at least two others half way (their logs growing)."""
    committed = any((run_dir / "trees").glob("part-*.parquet"))
    logs = [p for p in (run_dir / FOLDER).glob("*/*.jsonl") if p.stat().st_size > 3000]
    return committed and len(logs) >= 2


def _run(config: Any, lose: Any) -> RunSummary:
    """Run `config` on the cluster in a thread; call `lose()` once trees are in flight."""
    summaries: list[RunSummary] = []
    failures: list[BaseException] = []

    def target() -> None:
        try:
            summaries.append(synthesize(config, progress=None))
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=target)
    worker.start()
    run_dir = Path(config.output_root) / f"run={config.run_id}"
    wait_for(
        lambda: _in_flight(run_dir) or not worker.is_alive(), JOB_DEADLINE_S, "trees in flight"
    )
    assert worker.is_alive(), f"the run ended before a node could be lost: {failures}"
    lose()
    worker.join(timeout=JOB_DEADLINE_S)
    assert not worker.is_alive(), "the run did not end after the node was lost"
    assert not failures, failures
    return summaries[0]


def _exactly_once(out: Path, run_id: str, problems: int = PROBLEMS) -> list[dict[str, Any]]:
    trees = RunFolder.open(out, run_id).read("trees").to_pylist()
    counts = Counter(t["problem_id"] for t in trees)
    assert len(counts) == problems and set(counts.values()) == {1}, counts
    return trees


def _lose_the_search_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, problems: int, gpu_nodes: int
) -> None:
    """Lose the CPU node that holds every search actor mid-run, a replacement joining:
    the actors restart there and the killed trees resume from their request logs."""
    import ray
    from ray import serve

    out = tmp_path / "out"
    source = {"kind": "arithmetic", "count": problems, "seed": 0, "max_steps": 1}
    config = parse_run_config(cluster_run_config(out, run_id="search-lost", source=source))
    lost: dict[str, Any] = {}
    with rehearsal_cluster(gpu_nodes=gpu_nodes) as cluster:
        monkeypatch.setenv("RAY_ADDRESS", cluster.cluster.address)

        def lose() -> None:
            lost["actors"] = actor_nodes("SearchActor", alive=True)
            assert set(lost["actors"].values()) == set(cluster.cpu)
            lost["node"] = cluster.cpu[0]
            cluster.remove(lost["node"])
            lost["replacement"] = cluster.add_cpu_node()

        try:
            summary = _run(config, lose)
            hosts = actor_nodes("SearchActor")
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()
    _exactly_once(out, "search-lost", problems)
    assert summary.errors == 0
    # Every search actor that ran after the loss, restarted or new, ran on the replacement
    # (the head has no search resource).  A lost actor whose work was all done may still be
    # restarting when the run ends, and then keeps the lost node's id.
    after = {node for actor, node in hosts.items() if node != lost["node"]}
    assert after == {lost["replacement"]}, (hosts, lost)
    assert summary.replayed_requests > 0  # the killed trees resumed from their logs
    assert not (out / "run=search-lost" / FOLDER).exists()  # every log cleaned


def test_lost_search_node_of_a_two_node_cluster_resumes_its_trees_on_a_replacement(
    own_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lose_the_search_node(tmp_path, monkeypatch, problems=SMALL_PROBLEMS, gpu_nodes=0)


@pytest.mark.scenario("node-loss")
def test_lost_search_node_resumes_its_trees_on_a_replacement_node(
    own_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lose_the_search_node(tmp_path, monkeypatch, problems=PROBLEMS, gpu_nodes=2)


@pytest.mark.scenario("node-loss")
def test_lost_policy_node_is_bridged_by_the_default_retries(
    own_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray import serve

    out = tmp_path / "out"
    source = {"kind": "arithmetic", "count": PROBLEMS, "seed": 0, "max_steps": 1}
    config = parse_run_config(cluster_run_config(out, run_id="policy-lost", source=source))
    lost: dict[str, Any] = {}
    with rehearsal_cluster() as cluster:
        monkeypatch.setenv("RAY_ADDRESS", cluster.cluster.address)

        def lose() -> None:
            (node,) = set(actor_nodes("PolicyServer", alive=True).values())
            assert node in cluster.gpu
            lost["node"] = node
            cluster.remove(node)

        try:
            summary = _run(config, lose)
            replicas = actor_nodes("PolicyServer", alive=True)
        finally:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()
        survivors = set(cluster.gpu)
    _exactly_once(out, "policy-lost")
    assert summary.errors == 0
    # the replacement replica runs on the other GPU node
    assert lost["node"] and set(replicas.values()) == survivors  # the one GPU node left
    # no request failed for good: no error node in any tree
    nodes = RunFolder.open(out, "policy-lost").read("tree_nodes")
    assert nodes.column("error").null_count == nodes.num_rows
