"""jobs/podmonitor.yaml: what the Prometheus operator accepts, scraping what the RayJobs run.

No cluster here: the manifest is read as YAML and checked as the API server would under
kubectl's strict field validation, against the PodMonitor schema of the Prometheus
operator release it was written for (v0.93.0's CRD, whole, descriptions left out:
tests/fixtures/prometheus-operator/, vendored by scripts/vendor_podmonitor_crd.py), closed
to unknown fields as tests/kuberay_schema.py closes KubeRay's.  Then:

* it selects both kinds of Ray pod by the label KubeRay gives them (`ray.io/node-type`:
  head, worker) and scrapes the container port KubeRay names `metrics`;
* no pod of the RayJob manifests moves Ray's metrics port away from that port: KubeRay
  adds the `metrics` port (8080) to a Ray container, so a container may list no ports or
  list it, and no group sets another `metrics-export-port`;
* the schema check fails on a misspelt field (the rule is shown to fail).
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft7Validator

from tests.kuberay_schema import strict
from tests.test_manifests import MANIFESTS, groups, job_spec

REPO = Path(__file__).resolve().parents[1]
OPERATOR_VERSION = "v0.93.0"
SCHEMA = REPO / "tests" / "fixtures" / "prometheus-operator" / OPERATOR_VERSION
PODMONITOR = REPO / "jobs" / "podmonitor.yaml"
METRICS_PORT = 8080  # KubeRay's default metrics port, named "metrics"


@functools.cache
def validator() -> Draft7Validator:
    path = SCHEMA / "PodMonitor.schema.json.gz"
    return Draft7Validator(strict(json.loads(gzip.decompress(path.read_bytes()))))


def problems(manifest: dict[str, Any]) -> list[str]:
    """What the API server would refuse in a PodMonitor, as `path: message` lines."""
    if (manifest.get("apiVersion"), manifest.get("kind")) != (
        "monitoring.coreos.com/v1",
        "PodMonitor",
    ):
        return [f"{manifest.get('apiVersion')} {manifest.get('kind')}: not a v1 PodMonitor"]
    found = []
    for error in validator().iter_errors(manifest):
        where = ".".join(str(part) for part in error.absolute_path) or "(top)"
        found.append(f"{where}: {error.message}")
    return sorted(found)


def _podmonitor() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(PODMONITOR.read_text())
    return loaded


def test_the_operator_accepts_the_podmonitor() -> None:
    assert problems(_podmonitor()) == []


def test_it_scrapes_the_metrics_port_of_head_and_worker_pods() -> None:
    spec = _podmonitor()["spec"]
    (expression,) = spec["selector"]["matchExpressions"]
    assert expression["key"] == "ray.io/node-type" and expression["operator"] == "In"
    assert set(expression["values"]) == {"head", "worker"}
    assert [e["port"] for e in spec["podMetricsEndpoints"]] == ["metrics"]


def test_no_ray_pod_moves_its_metrics_port_away() -> None:
    for path in MANIFESTS:
        manifest = yaml.safe_load((REPO / path).read_text())
        for group in groups(job_spec(manifest)):
            params = group.spec.get("rayStartParams", {})
            port = int(params.get("metrics-export-port", METRICS_PORT))
            assert port == METRICS_PORT, f"{path} {group.name}"
            ports = group.ray.get("ports")
            if ports:  # KubeRay adds the metrics port only to a container that lacks it
                named = {p.get("name"): p.get("containerPort") for p in ports}
                assert named.get("metrics") == METRICS_PORT, f"{path} {group.name}: {ports}"


def test_schema_rule_catches_a_misspelt_field() -> None:
    broken = copy.deepcopy(_podmonitor())
    endpoint = broken["spec"]["podMetricsEndpoints"][0]
    endpoint["scrapeTimeOut"] = endpoint.pop("scrapeTimeout")
    found = problems(broken)
    assert found and "scrapeTimeOut" in found[0], found
