"""The run config: one YAML file validated into typed models, errors naming the field."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from actors.config import ScorerConfig, ServiceConfig
from pipeline.errors import InputError
from pipeline.problems.sources import SourceConfig
from pipeline.records import RecordsConfig
from pipeline.store.filesystem import check_output_root
from search.budget import TokenWeights
from search.config import SearchConfig

M = TypeVar("M", bound=BaseModel)


# A local folder stays a Path (as always); an object-store URI (s3://bucket/prefix,
# gs://...) stays a string (Path would fold its "//").  Credentials never go here.
OutputRoot = Annotated[Path | str, BeforeValidator(check_output_root)]

# A run id names the run's folder, run=<id>: a plain name, never a path.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class ConfigError(InputError):
    """A run config that cannot be used; the message names the file and the field."""


class PublishConfig(BaseModel):
    """Where a finished run's Parquet is published on the Hugging Face Hub (jobs.publish)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str | None = Field(None, description="Hub dataset repo id; unset: do not publish")
    private: bool = Field(
        True, description="a repo the publish creates is private (an existing one stays as it is)"
    )
    token_env: str = Field(
        "HF_TOKEN", description="environment variable holding the Hub token (never stored)"
    )
    endpoint: str | None = Field(None, description="Hub endpoint URL; unset: huggingface.co")


class NightlyConfig(BaseModel):
    """How `jobs.nightly` slices the source: one slice of this many problems per date."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    problems_per_night: int = Field(100, ge=1, description="problems in each date's slice")
    run_id_prefix: str = Field(
        "",
        description="run id = prefix + date (YYYY-MM-DD), under the run_id rule: letters, "
        "digits, '.', '_', '-', starting with a letter or digit",
    )
    budget_per_night: float | None = Field(
        None,
        gt=0,
        description="spend envelope in cost units (the search's `cost` weights: output tokens "
        "by default, money when the weights are per-token prices); a night takes no new "
        "problem once the problems it started could exceed it",
    )

    @field_validator("run_id_prefix")
    @classmethod
    def _plain_run_id(cls, prefix: str) -> str:
        # prefix + date becomes the folder run=<id>: one rule for both, so "../" or "a/"
        # cannot place a run (or its lease) outside the output root.
        if not re.fullmatch(RUN_ID_PATTERN, f"{prefix}2000-01-01"):
            raise ValueError(
                f"{prefix!r} would make run ids that are not plain folder names (letters, "
                "digits, '.', '_', '-', starting with a letter or digit)"
            )
        return prefix


class PricesConfig(TokenWeights):
    """Money per million tokens of each kind; the run report then shows money."""

    # Same four kinds as the search's cost weights; here money, and unset means free.
    policy_output: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="money per million policy output tokens"
    )
    policy_input: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="money per million policy prompt tokens"
    )
    prm_input: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="money per million PRM prompt tokens"
    )
    prm_output: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="money per million PRM generated tokens"
    )
    currency: str = Field("USD", description="the currency's name, as the report shows it")


class RunConfig(BaseModel):
    """Everything one synthesis run needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str | None = Field(
        None,
        pattern=RUN_ID_PATTERN,
        description="output folder run=<id>: letters, digits, '.', '_', '-'; default: today",
    )
    output_root: OutputRoot = Field(
        Path("out"), description="local folder or s3://bucket/prefix, gs://bucket/prefix"
    )
    seed: int = Field(
        0, description="run seed; each problem's search seed is derived from it and its id"
    )
    budget: int = Field(
        10_000,
        ge=1,
        description="budget B per problem in cost units (search.cost; default: output tokens)",
    )
    source: SourceConfig = Field(description="where the problems come from, chosen by `kind`")
    search: SearchConfig = Field(
        description="the search algorithm and its settings, chosen by `algorithm`"
    )
    policy: ServiceConfig = Field(
        default_factory=ServiceConfig, description="the policy model's Serve deployment"
    )
    scorer: ScorerConfig = Field(
        default_factory=ScorerConfig, description="the process reward model's Serve deployment"
    )
    records: RecordsConfig = Field(
        default_factory=RecordsConfig, description="which training records are written, and how"
    )
    publish: PublishConfig = Field(
        default_factory=PublishConfig, description="publishing the run to the Hugging Face Hub"
    )
    nightly: NightlyConfig = Field(
        default_factory=NightlyConfig, description="how jobs.nightly slices the source"
    )
    prices: PricesConfig | None = Field(None, description="per-million-token prices (report)")
    actors: int = Field(1, ge=1, description="search actors in the Ray Data pool")
    trees_per_actor: int = Field(4, ge=1, description="searches each actor runs at once")
    actor_num_cpus: float = Field(0.5, ge=0, description="CPUs reserved per search actor")
    ray_num_cpus: int | None = Field(None, ge=1, description="local cluster size when starting one")
    engine_failure_limit: int = Field(
        20, ge=0, description="policy requests failed in a row that stop new problems; 0: off"
    )
    allow_empty: bool = Field(
        False, description="an empty source selection is fine (else: exit 2 with a message)"
    )

    @property
    def resolved_run_id(self) -> str:
        return self.run_id or dt.date.today().isoformat()


def _where(error: ValidationError) -> list[str]:
    """One `field: problem` per error (a validator's own message without pydantic's prefix)."""
    lines = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "value_error" and "error" in item.get("ctx", {}):
            message = str(item["ctx"]["error"])
        lines.append(f"{field}: {message}")
    return lines


def parse_config(data: Any, model: type[M], source: str = "config") -> M:
    """Validate a mapping into `model`; a `ConfigError` names every bad field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = _where(exc)
        if len(problems) == 1:  # the usual case: one line naming the file and the field
            raise ConfigError(f"{source}: {problems[0]}") from None
        listed = "\n".join(f"  {line}" for line in problems)
        raise ConfigError(f"{source}: invalid config\n{listed}") from None


def load_config(path: str | Path, model: type[M], **overrides: Any) -> M:
    """Read a YAML config into `model`; `overrides` (from the CLI) win over the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return parse_config(data, model, str(path))


def parse_run_config(data: Any, source: str = "config") -> RunConfig:
    return parse_config(data, RunConfig, source)


def load_run_config(path: str | Path, **overrides: Any) -> RunConfig:
    """Read a YAML run config; `overrides` (e.g. output_root from the CLI) win over the file."""
    return load_config(path, RunConfig, **overrides)
