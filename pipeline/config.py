"""The run config: one YAML file validated into typed models, errors naming the field.

Every config (run, nightly, evaluation) is read by `read_yaml`, the one YAML reader: a
file that is not UTF-8, too large, nested too deep or whose aliases expand past
`MAX_YAML_NODES` values (a "billion laughs" bomb) is refused with one line naming the
file, before anything is built from it.  Every number in a validated config must be one
a record can hold (`check_numbers`): integers within +-2**53 (a float64 column holds
them exactly; pyarrow refuses a larger int for one) and finite floats.
"""

from __future__ import annotations

import codecs
import datetime as dt
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from actors.config import (
    ScorerConfig,
    ServiceConfig,
    check_custom_resources,
    check_generating_engine,
)
from pipeline.errors import InputError
from pipeline.problems.sources import SourceConfig
from pipeline.records import RecordsConfig
from pipeline.store.filesystem import check_output_root
from pipeline.store.request_log import RequestLogConfig
from search.budget import TokenWeights
from search.config import SearchConfig
from search.strict_config import StrictConfig

M = TypeVar("M", bound=BaseModel)


# A local folder stays a Path (as always); an object-store URI (s3://bucket/prefix,
# gs://...) stays a string (Path would fold its "//").  Credentials never go here.
OutputRoot = Annotated[Path | str, BeforeValidator(check_output_root)]

# A run id names the run's folder, run=<id>: a plain name, never a path.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class ConfigError(InputError):
    """A run config that cannot be used; the message names the file and the field."""


class PublishConfig(StrictConfig):
    """Where a finished run's Parquet is published on the Hugging Face Hub (jobs.publish)."""

    repo: str | None = Field(None, description="Hub dataset repo id; unset: do not publish")
    private: bool = Field(
        True, description="a repo the publish creates is private (an existing one stays as it is)"
    )
    token_env: str = Field(
        "HF_TOKEN", description="environment variable holding the Hub token (never stored)"
    )
    endpoint: str | None = Field(None, description="Hub endpoint URL; unset: huggingface.co")
    license: str | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9.+-]*$",
        description="the dataset's license, as the Hub names it (apache-2.0, cc-by-4.0, mit, "
        "other, ...), written into the card; required to publish to a public repo",
    )
    language: list[str] = Field(
        default_factory=lambda: ["en"],
        description="the rows' languages (ISO 639-1 codes) for the card; the problems' language",
    )

    @model_validator(mode="after")
    def _public_needs_license(self) -> PublishConfig:
        # Caught here so a dry run says it; a repo already public is checked when publishing.
        if self.repo is not None and not self.private and self.license is None:
            raise ValueError(
                "publish.private is false and publish.license is not set: a public dataset "
                "must say its license (e.g. license: apache-2.0)"
            )
        return self


class NightlyConfig(StrictConfig):
    """How `jobs.nightly` slices the source: one slice of this many problems per date."""

    problems_per_night: int = Field(100, ge=1, description="problems in each date's slice")
    run_id_prefix: str = Field(
        "",
        description="run id = prefix + date (YYYY-MM-DD), under the run_id rule: letters, "
        "digits, '.', '_', '-', starting with a letter or digit",
    )
    budget_per_night: float | None = Field(
        None,
        gt=0,
        description="a night's spend cap in cost units (the search's `cost` weights: output "
        "tokens by default, money when the weights are per-token prices); a night takes no new "
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


class TableWeights(StrictConfig):
    """What one kept row of each training table is worth to the allocator."""

    sft: float = Field(
        0.5,
        ge=0,
        description="one sft row; below a pair's: any solved problem gives sft rows, and the "
        "probe already gives most of what the per-problem cap allows",
    )
    dpo: float = Field(
        1.0,
        ge=0,
        description="one dpo pair: only a tree with both right and wrong answers gives one",
    )
    step_dpo: float = Field(1.0, ge=0, description="one step_dpo pair (as dpo)")
    prm: float = Field(
        0.0,
        ge=0,
        description="one prm row; 0: every answered path gives one, whatever the problem, so "
        "budget buys them at the same rate anywhere",
    )
    kto: float = Field(0.0, ge=0, description="one kto row; 0 for prm's reason")


class AllocationConfig(StrictConfig):
    """The night-level allocator (`pipeline.run.allocation`): a probe tree per problem,
    then the rest of the night's tokens to the problems whose probes promise the most kept
    rows."""

    enabled: bool = Field(
        False,
        description="false: every problem one tree at `budget` (uniform B); true: a probe "
        "tree, then a second tree whose B the allocator decides",
    )
    probe_fraction: float = Field(
        0.65,
        gt=0,
        lt=1,
        description="the probe tree's B, as a share of `budget`; 0.65 was the best of 0.3-0.8 "
        "on the simulated world (benchmarks.night_allocation, seeds 0-1): a smaller probe is "
        "in BG-MCTS's costly early regime and often ends without an answer",
    )
    window: int = Field(
        64, ge=1, description="problems whose probes are allocated together, in source order"
    )
    min_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="every problem's two trees get at least this share of `budget` (above "
        "probe_fraction: a second tree for every problem, easy ones kept represented)",
    )
    max_multiple: float = Field(
        4.0, gt=0, description="a problem's two trees together hold at most this many `budget`"
    )
    min_tree_fraction: float = Field(
        0.1,
        gt=0,
        le=1,
        description="no second tree smaller than this share of `budget` (too small to answer)",
    )
    step_fraction: float = Field(
        0.05, gt=0, le=1, description="the allocator's step, as a share of `budget`"
    )
    hold_below: float = Field(
        0.25,
        ge=0,
        description="an increase whose expected rows per token are below this share of what "
        "the night's earlier windows got per token is not given: its tokens carry to later "
        "windows (a stretch of easy problems leaves its share to the problems after it); the "
        "night's last window gives out everything; 0: every window gives out its whole pool",
    )
    prior: tuple[float, float] | None = Field(
        None,
        description="Beta prior (a, b) of a problem's share of right answers, before its probe; "
        "null: fitted to the night's committed probes so far (beta-binomial maximum "
        "likelihood), (1, 1) until a probe has a graded answer",
    )
    weights: TableWeights = Field(
        default_factory=TableWeights, description="what one kept row of each table is worth"
    )

    @model_validator(mode="after")
    def _check(self) -> AllocationConfig:
        if self.prior is not None and min(self.prior) <= 0:
            raise ValueError("prior: both Beta parameters must be > 0")
        if self.max_multiple < max(self.min_fraction, self.probe_fraction):
            raise ValueError("max_multiple is below min_fraction or probe_fraction")
        return self


class RunConfig(StrictConfig):
    """Everything one synthesis run needs."""

    run_id: str | None = Field(
        None,
        pattern=RUN_ID_PATTERN,
        description="output folder run=<id>: letters, digits, '.', '_', '-'; default: today",
    )
    output_root: OutputRoot = Field(
        Path("out"), description="local folder or s3://bucket/prefix, gs://bucket/prefix"
    )
    compact: bool = Field(
        True,
        description="when the run reaches its end, merge its per-tree Parquet parts into a "
        "few shards per record type (pipeline.store.compaction; bgmcts compact does it "
        "later): a 500-problem night leaves about 3,700 small files, which every later "
        "reader (check, report, publish, a resume's listing) would list and open, on a "
        "bucket one request each; the rows that count stay exactly the same, and a resumed "
        "run writes next to the shards; false: keep one part per tree",
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
    admission: bool = Field(
        False,
        description="decide the searches each actor runs at once from what the engines "
        "report (slots, KV tokens, prefix hit rate; actors/admission.py) so that the "
        "batch stays full and the trees' contexts stay cached; trees_per_actor is the cap; "
        "re-evaluated every admission_interval_s while the run goes on",
    )
    admission_interval_s: float = Field(
        10.0,
        gt=0,
        description="with admission: seconds between looks at the engines' batch and prefix "
        "hit rate; a batch with room adds an eighth more trees, a hit rate below 0.85 takes "
        "an eighth away",
    )
    actor_num_cpus: float = Field(0.5, ge=0, description="CPUs reserved per search actor")
    actor_resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources per search actor (placement on the node group "
        "that advertises them, e.g. {search_node: 0.01}); CPUs go in actor_num_cpus",
    )
    ray_num_cpus: int | None = Field(None, ge=1, description="local cluster size when starting one")
    replay: RequestLogConfig = Field(
        default_factory=RequestLogConfig,
        description="the request log: a redone tree replays the requests it already paid for",
    )
    engine_failure_limit: int = Field(
        20, ge=0, description="policy requests failed in a row that stop new problems; 0: off"
    )
    max_wall_s: float | None = Field(
        None,
        gt=0,
        description="wall-time cap in seconds from the job's start (a nightly job's: across "
        "its top-ups): then no new tree starts, trees in flight get wall_grace_s to finish "
        "(later ones are abandoned uncommitted), the run commits, reports and publishes what "
        "it has and exits 124; rerunning resumes the rest; unset: no cap",
    )
    wall_grace_s: float = Field(
        600.0,
        ge=0,
        description="with max_wall_s: seconds the trees in flight at the cap may still run "
        "to be committed; 0: abandon them at the cap",
    )
    allow_empty: bool = Field(
        False, description="an empty source selection is fine (else: exit 2 with a message)"
    )
    allocation: AllocationConfig = Field(
        default_factory=AllocationConfig,
        description="the night allocator (pipeline.run.allocation): off by default (every "
        "problem one tree at `budget`); enabled: a probe tree at probe_fraction x budget for "
        "every problem, then a second tree whose budget the allocator gives window by window "
        "from the night's total (problems x budget), never past it",
    )

    @field_validator("actor_resources")
    @classmethod
    def _actor_resources(cls, resources: dict[str, float]) -> dict[str, float]:
        return check_custom_resources(resources, "actor_num_cpus")

    @field_validator("policy")
    @classmethod
    def _policy_generates(cls, policy: ServiceConfig) -> ServiceConfig:
        return check_generating_engine(policy, "policy")

    @property
    def resolved_run_id(self) -> str:
        return self.run_id or dt.date.today().isoformat()


MAX_CONFIG_BYTES = 1 << 20  # a config file is a few kB; this bounds reading and parsing it
MAX_YAML_NODES = 100_000  # values after aliases are expanded (a config has hundreds)
MAX_YAML_DEPTH = 64  # nesting levels of mappings and sequences
MAX_YAML_DIGITS = 100  # digits of one plain integer (Python refuses past 4,300)
RECORD_INT_LIMIT = 2**53  # the largest integer a float64 record column holds exactly


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong, and where."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        return _one_line(f"{exc.problem}{where}")
    return _one_line(str(exc))


def _decode(path: Path, data: bytes) -> str:
    """The file as text: UTF-8 only (a BOM is fine), else one line with the byte offset."""
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = data.count(b"\n", 0, offset) + 1
        raise ConfigError(
            f"{path}: not UTF-8: byte 0x{data[offset]:02x} at offset {offset} "
            f"(line {line}); save it as UTF-8"
        ) from None


def _scalar_too_long(event: yaml.ScalarEvent) -> bool:
    """A plain integer with more digits than any config needs (Python's int() of a long
    one is slow, and past 4,300 digits refused)."""
    text = event.value.lstrip("+-").replace("_", "")
    return event.implicit[0] and len(text) > MAX_YAML_DIGITS and text.isdigit()


def _check_events(text: str) -> str | None:
    """Walk the YAML event stream (flat, no recursion) and say what is past a bound:
    nesting depth, a recursive alias, values after alias expansion, a huge integer.

    An alias stands for its anchor's whole subtree, so it counts as that many values:
    "billion laughs" (nine aliases of nine aliases of ...) is caught after a few hundred
    events, before PyYAML builds anything and before anything walks it expanded (the
    run's config dump did: 3 GB in 26 s)."""
    sizes: dict[str, int] = {}  # anchor -> values in its subtree, expanded
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, values so far)
    values = 0  # values so far, expanded
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_YAML_DEPTH:
                return f"nested deeper than {MAX_YAML_DEPTH} levels"
            stack.append((event.anchor, 1))
            n = 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
            if stack:  # already counted in `values`, value by value
                stack[-1] = (stack[-1][0], stack[-1][1] + size)
            continue
        elif isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _ in stack):
                return f"alias *{event.anchor} refers to itself"
            n = sizes.get(event.anchor or "", 1)  # an undefined alias: PyYAML says so next
        elif isinstance(event, yaml.ScalarEvent):
            if _scalar_too_long(event):
                return f"an integer of more than {MAX_YAML_DIGITS} digits{_at(event)}"
            n = 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        else:
            continue
        values += n
        if values > MAX_YAML_NODES:
            return (
                f"more than {MAX_YAML_NODES:,} values once aliases are expanded{_at(event)} "
                "(an alias bomb?)"
            )
        if stack and not isinstance(event, yaml.CollectionStartEvent):
            stack[-1] = (stack[-1][0], stack[-1][1] + n)
    return None


def _at(event: yaml.Event) -> str:
    mark = event.start_mark
    return "" if mark is None else f" at line {mark.line + 1}"


def read_yaml(path: str | Path) -> Any:
    """The one YAML reader for every config: UTF-8 text of at most `MAX_CONFIG_BYTES`,
    bounded nesting and alias expansion, PyYAML's safe loader.  Any problem is a
    one-line `ConfigError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes; a config may have {MAX_CONFIG_BYTES:,}")
    text = _decode(path, path.read_bytes())
    try:
        problem = _check_events(text)
        data = None if problem is not None else yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # a value PyYAML cannot build
        raise ConfigError(f"{path}: not valid YAML: {_one_line(str(exc))}") from None
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    return data


def _leaves(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every number in a validated config, with its dotted field name."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _leaves(getattr(value, name), f"{where}.{name}" if where else name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{where}.{i}" if where else str(i))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield where, value


def _out_of_range(value: int | float) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value} is not a finite number"
    if abs(value) <= RECORD_INT_LIMIT:
        return None
    # str() of a huge int is slow, and refused past 4,300 digits
    shown = str(value) if value.bit_length() <= 256 else f"an integer of {value.bit_length()} bits"
    return f"{shown} is more than a record can hold (at most {RECORD_INT_LIMIT:,} = 2**53)"


def check_numbers(config: BaseModel, source: str = "config") -> None:
    """Refuse a number no record can hold (`RECORD_INT_LIMIT`, non-finite floats),
    naming the field: checked at validation, so `--dry-run` refuses it too."""
    for field, value in _leaves(config, ""):
        problem = _out_of_range(value)
        if problem is not None:
            raise ConfigError(f"{source}: {field}: {problem}")


def _where(error: ValidationError) -> list[str]:
    """One `field: problem` per error (a validator's own message without pydantic's prefix)."""
    lines = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "value_error" and "error" in item.get("ctx", {}):
            message = str(item["ctx"]["error"])
        lines.append(f"{field}: {_one_line(message)}")
    return lines


def parse_config(data: Any, model: type[M], source: str = "config") -> M:
    """Validate a mapping into `model`; a one-line `ConfigError` names every bad field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        problems = _where(exc)
        if len(problems) == 1:  # the usual case: one line naming the file and the field
            raise ConfigError(f"{source}: {problems[0]}") from None
        raise ConfigError(f"{source}: invalid config: {'; '.join(problems)}") from None
    check_numbers(config, source)
    return config


def load_config(path: str | Path, model: type[M], **overrides: Any) -> M:
    """Read a YAML config into `model`; `overrides` (from the CLI) win over the file."""
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return parse_config(data, model, str(path))


def parse_run_config(data: Any, source: str = "config") -> RunConfig:
    return parse_config(data, RunConfig, source)


def load_run_config(path: str | Path, **overrides: Any) -> RunConfig:
    """Read a YAML run config; `overrides` (e.g. output_root from the CLI) win over the file.

    Under `ray job submit` a relative output root is refused (`check_submitted_output_root`).
    """
    config = load_config(path, RunConfig, **overrides)
    check_submitted_output_root(config.output_root, str(path))
    return config


# Ray's job supervisor sets this variable in the driver of every `ray job submit` job
# (ray/dashboard/modules/job/job_supervisor.py; Ray's worker reads it as "only set at ray
# job manager level"), and in no other process.
RAY_JOB_DRIVER_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def submitted_as_ray_job() -> bool:
    """True in the driver of a `ray job submit` job (KubeRay's RayJob submits one too)."""
    return RAY_JOB_DRIVER_ENV in os.environ


def check_submitted_output_root(
    output_root: Path | str, source: str = "config", field: str = "output_root"
) -> None:
    """Refuse a relative output root under `ray job submit`, one line naming the field
    (`output_root` of a run, `output_dir` of an evaluation).

    A submitted job's driver runs in Ray's unpacked copy of `--working-dir`, a temporary
    folder on the head node: `out` would resolve there and the run would be lost with the
    cluster (or the next job's cleanup).  Refusing beats resolving it with a warning, which
    nobody reads before the cluster is gone.  A local run (`make synth`) keeps `out`.
    """
    if not submitted_as_ray_job() or isinstance(output_root, str):  # str: a bucket URI
        return
    if output_root.expanduser().is_absolute():
        return
    raise ConfigError(
        f"{source}: {field} '{output_root}' is relative: under ray job submit it would "
        "land in the job's temporary working directory on the head and be lost with the "
        "cluster; give an absolute path or a bucket URI (s3://, gs://), in the config or "
        f"with --{field.replace('_', '-')}"
    )
