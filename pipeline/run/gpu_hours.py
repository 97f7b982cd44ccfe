"""Kept rows per GPU-hour, measured at the end of a run on GPUs (or the load model's).

Rows per GPU-hour cannot be estimated honestly before a run: rows per tree depend on how
often the policy solves these problems and how the quality gates treat its answers, which
only the run finds out (docs/sizing.md, "Cost per kept row").  So the dry run says what
it can (the GPUs a config holds, tokens) and cannot (rows), and the run measures them: the
rows one invocation wrote, over the GPU-hours it held its GPUs (its wall time, engine
start-up included, times the GPUs its services reserve).

A config's GPU shape (`gpu_shape`): each service's replicas times its `num_gpus`; a
replica of a load-model engine (`load_model`, `load_model_prm`) with no GPU reserved
stands for one simulated GPU, whose time runs `time_scale` times the wall's (its default
curve is one H100 serving a 7-8B model with vLLM, `actors.engines.load_model`).  A config
with neither (llama.cpp, a remote endpoint) has no GPU shape and no figure; one whose GPU
replicas autoscale has a shape whose GPU count is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.config import ServiceConfig
from pipeline.config import RunConfig
from pipeline.records import TRAINING_TYPES

GPU_HOURS_KEY = "gpu_hours"  # in run.json's summary
# engine kinds that simulate one GPU per replica on a CPU (`actors.engines.load_model`)
SIMULATED = ("load_model", "load_model_prm")


@dataclass(frozen=True)
class ServiceGpus:
    role: str  # "policy" or "scorer"
    replicas: int | None  # None: autoscaled, so it varied
    gpus_per_replica: float
    simulated: bool  # a load-model engine's simulated GPU, not a real one
    time_scale: float = 1.0  # a simulated GPU's seconds per wall second are 1 / time_scale

    def describe(self) -> str:
        count = "autoscaled" if self.replicas is None else str(self.replicas)
        unit = "simulated GPU (load model)" if self.simulated else "GPU"
        return f"{self.role} {count} x {self.gpus_per_replica:g} {unit}"


@dataclass(frozen=True)
class GpuShape:
    services: tuple[ServiceGpus, ...]

    @property
    def gpus(self) -> float | None:
        """GPUs held (simulated ones counted at their own clock); None when autoscaled."""
        total = 0.0
        for s in self.services:
            if s.replicas is None:
                return None
            total += s.replicas * s.gpus_per_replica / s.time_scale
        return total

    def describe(self) -> str:
        return ", ".join(s.describe() for s in self.services)


def _service(role: str, service: ServiceConfig) -> ServiceGpus | None:
    replicas = None if service.autoscaling is not None else service.num_replicas
    if service.num_gpus > 0:
        return ServiceGpus(role, replicas, service.num_gpus, simulated=False)
    if service.engine.kind in SIMULATED:
        scale = float(getattr(service.engine, "time_scale", 1.0))
        return ServiceGpus(role, replicas, 1.0, simulated=True, time_scale=scale)
    return None


def gpu_shape(config: RunConfig) -> GpuShape | None:
    """The GPUs the run's services hold (module docstring); None: no GPU shape."""
    services = [
        s
        for s in (_service("policy", config.policy), _service("scorer", config.scorer))
        if s is not None
    ]
    return GpuShape(tuple(services)) if services else None


def rows_per_gpu_hour(
    shape: GpuShape | None,
    rows_before: Mapping[str, int],
    rows_after: Mapping[str, int],
    wall_time_s: float,
) -> dict[str, Any] | None:
    """run.json's `gpu_hours`: one invocation's training rows written, its GPU-hours and
    rows per GPU-hour per table; None for a run with no GPU shape."""
    if shape is None:
        return None
    rows = {t: int(rows_after.get(t, 0)) - int(rows_before.get(t, 0)) for t in TRAINING_TYPES}
    gpus = shape.gpus
    block: dict[str, Any] = {
        "shape": shape.describe(),
        "gpus": gpus,
        "wall_time_s": round(wall_time_s, 1),
        "rows": rows,
    }
    if gpus is None or wall_time_s <= 0:
        block["gpu_hours"] = None
        block["unknown"] = (
            "the GPU replicas autoscaled, so the GPUs held varied"
            if gpus is None
            else "no wall time"
        )
        return block
    hours = gpus * wall_time_s / 3600
    block["gpu_hours"] = hours
    block["rows_per_gpu_hour"] = {t: n / hours for t, n in rows.items()}
    return block
