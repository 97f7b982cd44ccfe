"""The evaluation config: which methods, budgets, seeds, on which environment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from actors.config import ScorerConfig, ServiceConfig, check_generating_engine
from pipeline.problems.sources import SourceConfig
from pipeline.records import RecordsConfig
from pipeline.records.config import GradeTimeout
from search.config import SearchConfig
from search.strict_config import StrictConfig


class Method(StrictConfig):
    """One row of the accuracy table: a search config and the label it is reported under."""

    label: str = Field(
        min_length=1, description="the method's name in the tables; default: its algorithm"
    )
    search: SearchConfig = Field(description="the search config, chosen by `algorithm`")


class SimulatedEnvironment(StrictConfig):
    """The simulated reasoning environment (search/simulated.py): no model, ground truth."""

    kind: Literal["simulated"] = Field(
        "simulated", description="the simulated environment: no model, ground truth"
    )
    problems: int = Field(200, ge=1, description="simulated problems drawn")
    seed: int = Field(0, description="draws the problems (difficulties, answers)")
    params: dict[str, Any] = Field(
        default_factory=dict, description="SimParams overrides; defaults are documented there"
    )
    workers: int = Field(2, ge=1, description="processes running searches")


class ServicesEnvironment(StrictConfig):
    """Real models behind the same Serve deployments the synthesis pipeline uses."""

    kind: Literal["services"] = Field(
        "services", description="real models behind the pipeline's Serve deployments"
    )
    source: SourceConfig = Field(description="where the problems come from, chosen by `kind`")
    policy: ServiceConfig = Field(
        default_factory=ServiceConfig, description="the policy model's Serve deployment"
    )
    scorer: ScorerConfig = Field(
        default_factory=ScorerConfig, description="the process reward model's Serve deployment"
    )
    concurrency: int = Field(8, ge=1, description="searches in flight at once")
    grade_timeout_s: GradeTimeout = 5.0
    ray_num_cpus: int | None = Field(
        None, ge=1, description="local cluster size when starting one; unset: Ray's default"
    )

    @field_validator("policy")
    @classmethod
    def _policy_generates(cls, policy: ServiceConfig) -> ServiceConfig:
        return check_generating_engine(policy, "environment.policy")


Environment = Annotated[SimulatedEnvironment | ServicesEnvironment, Field(discriminator="kind")]


def _method(value: Any) -> Any:
    """`bg_mcts`, or {algorithm: litesearch, mode: batch}, or {label: ..., search: {...}}."""
    if isinstance(value, str):
        value = {"algorithm": value}
    if isinstance(value, dict) and "search" not in value:
        search = dict(value)
        label = search.pop("label", None)
        if label is None:  # validated with `search`, so errors name methods.<i>.search...
            label = str(search.get("algorithm"))
            if label == "litesearch" and search.get("mode") == "batch":
                label = "litesearch_batch"
        return {"label": label, "search": search}
    return value


class EvalConfig(StrictConfig):
    """Everything one evaluation needs: each method at each budget and seed, on one environment."""

    name: str = Field(
        "eval",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="the report folder under output_dir: letters, digits, '.', '_', '-'",
    )
    output_dir: Path = Field(Path("out/eval"), description="where the report folder goes")
    methods: list[Method] = Field(
        min_length=1,
        description="rows of the accuracy table: an algorithm name, a search config or "
        "{label, search}; labels must be unique",
    )
    budgets: list[int] = Field(
        min_length=1, description="nominal budgets B (each method runs at each; sorted, unique)"
    )
    seeds: list[int] = Field(
        [0, 1, 2], min_length=1, description="search seeds (each method runs with each)"
    )
    environment: Environment = Field(
        description="where problems and scores come from, chosen by `kind`"
    )
    tree_pictures: int = Field(2, ge=0, description="problems drawn as Fig. 6-style trees")
    records: RecordsConfig = Field(
        default_factory=RecordsConfig,
        description="the training rows' rules (quality gates, pair caps) the data-yield table "
        "counts with; default: the synthesis run's defaults",
    )

    @field_validator("methods", mode="before")
    @classmethod
    def _methods(cls, value: Any) -> Any:
        return [_method(v) for v in value] if isinstance(value, list) else value

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, value: list[int]) -> list[int]:
        if any(b < 1 for b in value):
            raise ValueError("every budget must be >= 1")
        return sorted(set(value))

    @model_validator(mode="after")
    def _unique_labels(self) -> EvalConfig:
        labels = [m.label for m in self.methods]
        duplicates = sorted({x for x in labels if labels.count(x) > 1})
        if duplicates:
            raise ValueError(f"methods: duplicate labels {duplicates}; give each a `label`")
        return self

    @property
    def run_dir(self) -> Path:
        return self.output_dir / self.name
