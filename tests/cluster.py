"""A multi-node Ray cluster on one machine (`ray.cluster_utils.Cluster`) shaped like a real one.

    head      the driver, Serve's controller, Ray Data's coordinator; no GPU, no search slot
    gpu-a     2 GPUs (advertised: Ray lets a node claim GPUs it does not have)  policy/scorer
    gpu-b     2 GPUs                                                             replicas
    cpu       4 `search_node` slots                                              search actors

Every node is a real raylet with its own object store; `Cluster.remove_node` kills one
the way a lost machine dies (its processes SIGKILLed, no draining).  The engines are the
model-free load model, so a "GPU" replica needs no GPU; placement still goes through
the same `num_gpus` / `resources` settings a real cluster config uses
(configs/cluster-example.yaml).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

REPO = Path(__file__).resolve().parents[1]
SERVICES = ("policy", "scorer")
SEARCH_RESOURCE = "search_node"  # what the CPU node group advertises (configs/cluster-example)
STORE = 80 * 2**20  # object store per node: the smallest Ray accepts is 75 MiB
GPU_NODE = {"num_cpus": 1, "num_gpus": 2, "object_store_memory": STORE}
CPU_NODE = {"num_cpus": 2, "resources": {SEARCH_RESOURCE: 4}, "object_store_memory": STORE}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Rehearsal:
    """The running cluster and which node is which."""

    cluster: Any
    head: str
    gpu: list[str]
    cpu: list[str]
    dashboard: str
    nodes: dict[str, Any] = field(default_factory=dict)  # node id -> the Cluster's node

    def add_cpu_node(self) -> str:
        """A replacement CPU node (what an autoscaler does after a node is lost)."""
        node = self.cluster.add_node(**CPU_NODE)
        self.nodes[node.node_id] = node
        self.cpu.append(node.node_id)
        self.cluster.wait_for_nodes()
        return str(node.node_id)

    def remove(self, node_id: str) -> None:
        """Kill a worker node at once (SIGKILL, no graceful drain: a lost machine)."""
        self.cluster.remove_node(self.nodes.pop(node_id), allow_graceful=False)
        for group in (self.gpu, self.cpu):
            if node_id in group:
                group.remove(node_id)


@contextmanager
def rehearsal_cluster(*, dashboard: bool = True, gpu_nodes: int = 2) -> Iterator[Rehearsal]:
    """Head + two GPU nodes + one CPU node; the caller's `ray.init(address=...)` joins it
    from the head's machine, as a `ray job submit` driver would run there.

    `gpu_nodes=0`: a two-node cluster, the head advertising the GPUs itself, for a test
    that loses only the CPU node (two raylets fewer to start on a 2-core machine)."""
    from ray.cluster_utils import Cluster

    port = free_port()
    head_args: dict[str, Any] = {
        "num_cpus": 1,
        "num_gpus": 0 if gpu_nodes else GPU_NODE["num_gpus"],
        "object_store_memory": STORE,
        "include_dashboard": dashboard,
    }
    if dashboard:
        # the job agent's port too: the default (52365) is taken when another test's
        # cluster with a dashboard runs beside this one
        head_args |= {
            "dashboard_host": "127.0.0.1",
            "dashboard_port": port,
            "dashboard_agent_listen_port": free_port(),
        }
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        nodes = {}
        gpu = []
        for _ in range(gpu_nodes):
            node = cluster.add_node(**GPU_NODE)
            nodes[node.node_id] = node
            gpu.append(node.node_id)
        node = cluster.add_node(**CPU_NODE)
        nodes[node.node_id] = node
        cluster.wait_for_nodes()
        yield Rehearsal(
            cluster,
            head=cluster.head_node.node_id,
            gpu=gpu,
            cpu=[node.node_id],
            dashboard=f"http://127.0.0.1:{port}",
            nodes=nodes,
        )
    finally:
        cluster.shutdown()


def cluster_run_config(output_root: Path, **extra: Any) -> dict[str, Any]:
    """configs/cluster-example.yaml with its placement settings kept (num_gpus per replica,
    `search_node` per search actor) and the rest made small: the load model for vLLM,
    one replica each (a lost GPU node's replica then has room on the other), eight
    generated problems, local output.

    The load model at time_scale 0.3 keeps each tree a few seconds long (dozens of
    sequential engine calls), so a node can be lost while trees are in flight.
    """
    example = yaml.safe_load((REPO / "configs" / "cluster-example.yaml").read_text())
    engine = {"kind": "load_model", "output_tokens": 16, "answer_every": 4, "time_scale": 0.3}
    placement = ("num_gpus", "resources")
    policy, scorer = ({k: v for k, v in example[s].items() if k in placement} for s in SERVICES)
    assert policy["num_gpus"] >= 1 and example["actor_resources"] == {SEARCH_RESOURCE: 1}
    config: dict[str, Any] = {
        "run_id": "cluster",
        "output_root": str(output_root),
        "budget": 480,
        "source": {"kind": "arithmetic", "count": 8, "seed": 0, "max_steps": 1},
        "search": {"algorithm": "bg_mcts", "step_max_tokens": 32},
        "policy": {**policy, "engine": engine, "num_cpus": 0},
        "scorer": {
            **scorer,
            "engine": engine,
            "num_cpus": 0,
            "genprm": {"samples": 1, "max_analysis_tokens": 16},
        },
        "records": {"decontamination": {"enabled": False}},
        "actors": 2,
        "trees_per_actor": 2,
        "actor_num_cpus": 0.5,
        "actor_resources": example["actor_resources"],
    }
    return {**config, **extra}


def actor_nodes(fragment: str, *, alive: bool = False) -> dict[str, str]:
    """actor id -> node id of every actor whose class name has `fragment` (alive or dead;
    `alive`: only those alive now)."""
    from ray.util.state import list_actors

    return {
        a.actor_id: a.node_id
        for a in list_actors(limit=10_000, detail=True)
        if fragment in a.class_name and (not alive or a.state == "ALIVE")
    }


def wait_for(predicate: Any, timeout_s: float, what: str, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
