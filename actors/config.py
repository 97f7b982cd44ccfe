"""Typed configs of the model services: which engine, which resources, how resilient."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from actors.engines.configs import EngineConfig
from actors.engines.llamacpp import LlamaCppConfig
from actors.prompts import PromptConfig
from search.scorer_kinds import DEFAULT_SCORER_KIND, ScorerKindName, decodes
from search.strict_config import StrictConfig

# Ray's own resource names: set through their fields, never as custom resources.
RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def check_custom_resources(resources: dict[str, float], fields: str) -> dict[str, float]:
    """Custom Ray resources: names Ray accepts, amounts > 0 (Ray refuses the rest later,
    at scheduling time, with an error far from the config)."""
    for name, amount in resources.items():
        if name in RESERVED_RESOURCES:
            raise ValueError(f"{name!r} is Ray's own resource: set it with {fields}")
        if not name or name.startswith("node:"):
            raise ValueError(f"{name!r} is not a custom resource name")
        if not amount > 0 or amount != amount or amount == float("inf"):
            raise ValueError(f"{name!r}: the amount must be a finite number > 0, not {amount}")
    return resources


class ServiceConfig(StrictConfig):
    """One Serve deployment: its engine, resources, scaling and request resilience."""

    engine: EngineConfig = Field(
        default_factory=LlamaCppConfig,
        description="the model engine of each replica, chosen by `kind`",
    )
    num_replicas: int = Field(1, ge=1, description="Serve replicas (each with its own engine)")
    autoscaling: dict[str, Any] | None = Field(
        None, description="Serve autoscaling_config; replaces num_replicas when set"
    )
    num_cpus: float = Field(0.0, ge=0, description="0 leaves CPUs to the search actors")
    num_gpus: float = Field(0.0, ge=0, description="GPUs reserved per replica")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources per replica (placement on node groups that "
        "advertise them, e.g. {gpu_node: 0.01}); CPUs and GPUs go in num_cpus/num_gpus",
    )
    max_ongoing_requests: int = Field(
        256, ge=1, description="requests one replica takes at once (Serve); more queue"
    )
    # The defaults below were measured against a lost node (docs/benchmarks.md, "Node loss and
    # request replay", 2026-11-26): when the node of a deployment's only replica is lost, a
    # request in flight fails once, 1.8-2.6 s later; its retry then waits in Serve's queue
    # until the new replica on another node is up (9.0-10.6 s after the loss), and that wait
    # counts against request_timeout_s, not against the retries.
    request_timeout_s: float = Field(
        300.0,
        gt=0,
        description="seconds one call may take before it is retried; a call waiting for a "
        "lost replica's replacement waits within it (10 s measured here; a real replacement "
        "also loads the model)",
    )
    max_retries: int = Field(
        2,
        ge=0,
        description="retries of a failed call; then its node fails, not the search (a lost "
        "replica fails a call once: 2 leaves one spare); a failure the engine already retried "
        "itself (the openai engine's engine.max_retries) or that its server refused (a 4xx) "
        "is not sent again",
    )
    retry_backoff_s: float = Field(
        1.0,
        ge=0,
        description="seconds before the first retry, doubled for each next one; each wait is "
        "drawn from the upper half of its step at random (jitter)",
    )
    coalesce_window_s: float = Field(
        0.002, ge=0, le=1, description="how long a request waits for others to share its call"
    )
    coalesce_max_batch: int = Field(
        64, ge=1, description="most requests in one coalesced call; 1: one call per request"
    )
    coalesce_linger_s: float = Field(
        0.0005,
        ge=0,
        le=0.1,
        description="how long a replica holds a finished result of a coalesced call for others "
        "finishing with it (one stream item; never longer); 0: only what finished by then",
    )
    affinity: bool = Field(
        True, description="with more than one replica, send every request of a tree to one"
    )
    affinity_router: Literal["even", "consistent_hash"] = Field(
        "even",
        description="how buckets reach replicas: even = bucket n to replica n mod R "
        "(actors/routing.py; even with one bucket per replica); consistent_hash = Serve's "
        "hash ring (needs several buckets per replica to spread evenly)",
    )
    affinity_buckets_per_replica: int = Field(
        1,
        ge=1,
        description="trees hash into this many buckets per replica; a bucket's requests share "
        "coalesced calls and one replica (more: better spread under consistent_hash, "
        "smaller calls, more CPU)",
    )
    affinity_fallback_replicas: int = Field(
        2, ge=0, description="replicas tried after a tree's own when its queue is full"
    )
    prompts: PromptConfig = Field(
        default_factory=PromptConfig,
        description="prompt overrides (the policy uses policy_instruction, the scorer prm_system)",
    )

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, resources: dict[str, float]) -> dict[str, float]:
        return check_custom_resources(resources, "num_cpus/num_gpus")

    @property
    def routes_by_tree(self) -> bool:
        """Tree affinity matters only when there is more than one replica to choose from."""
        return self.affinity and (self.num_replicas > 1 or self.autoscaling is not None)

    @property
    def affinity_buckets(self) -> int:
        """How many buckets the trees hash into (per replica, at the most replicas there can be)."""
        replicas = self.num_replicas
        if self.autoscaling is not None:
            replicas = int(self.autoscaling.get("max_replicas", replicas))
        return self.affinity_buckets_per_replica * max(replicas, 1)


class GenPRMSettings(StrictConfig):
    """GenPRM's sampling (the released code: T 0.6, top-p 0.95, top-k 20, 1,024 tokens)."""

    samples: int = Field(1, ge=1, description="N judgements averaged per step")
    max_analysis_tokens: int = Field(
        512, ge=1, description="max_tokens of one step's analysis (the paper's runs: 1,024)"
    )
    temperature: float = Field(0.6, ge=0, description="sampling temperature of the analysis")
    top_p: float | None = Field(0.95, gt=0, le=1, description="None: the engine's default")
    top_k: int | None = Field(20, ge=0, description="None: the engine's default")
    analysis_turn: Literal["user", "assistant"] = Field(
        "user", description="user: continue the last user turn (GenPRM's training format)"
    )
    prm_after_answer: Literal["continue", "restart"] = Field(
        "continue", description="restart: a fresh conversation after an answered node"
    )


# Qwen2.5-Math-PRM's system turn (its model card): the prompt it was trained to read.
QWEN_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class OnePassSettings(StrictConfig):
    """A one-pass (discriminative) PRM: one forward pass scores every step of a path.

    The path is laid out as the model was trained (`actors.engines.step_layout`): the
    prompt, then each step followed by `step_separator`; a step's value is the
    positive class's probability at its separator, and a node's Q is `node_value` of its
    steps' values.  Prefill tokens are PRM input tokens; nothing is decoded.
    """

    step_separator: str = Field(
        "\n",
        description="the text after each step, exactly one token of the PRM's vocabulary; "
        "its value is read there (TRL's default \\n; Qwen2.5-Math-PRM: <extra_0>)",
    )
    steps: Literal["lines", "step_labels"] = Field(
        "lines",
        description="how a path becomes steps: lines = the lines of its text, blank lines "
        "dropped (the prm records' steps, what a PRM trained by `bgmcts train-prm` saw); "
        "step_labels = one step per 'Step N:' paragraph (as GenPRM reads a path)",
    )
    prompt_format: Literal["plain", "chat"] = Field(
        "plain",
        description="plain = the problem text (the prm records' prompt); chat = the model's "
        "chat template with `system_prompt` and the problem as the user turn, then the "
        "assistant's steps (Qwen2.5-Math-PRM)",
    )
    system_prompt: str = Field(
        QWEN_PRM_SYSTEM, description="the system turn of prompt_format: chat"
    )
    node_value: Literal["last", "min", "mean", "product"] = Field(
        "last",
        description="a node's Q from its path's step values: last = its own last step "
        "(Qwen2.5-Math-PRM's use); min / product = the weakest link / every step right; "
        "mean of all",
    )
    cut_after_answer: bool = Field(
        True,
        description="an answered node's text ends after its answer statement, as the "
        "training rows do (SmolLM2 goes on writing a new problem after its answer)",
    )


class ScorerConfig(ServiceConfig):
    """The scorer's Serve deployment: a service config plus the scoring protocol's settings."""

    kind: ScorerKindName = Field(
        DEFAULT_SCORER_KIND,
        description="the scoring protocol: genprm = GenPRM, a generative PRM (Sec. 4.1, the "
        "paper's); one_pass = a discriminative PRM that scores a path in one forward pass",
    )
    genprm: GenPRMSettings = Field(default_factory=GenPRMSettings, description="GenPRM's sampling")
    one_pass: OnePassSettings = Field(
        default_factory=OnePassSettings, description="the one-pass PRM's step layout and Q"
    )

    @model_validator(mode="after")
    def _engine_fits_kind(self) -> ScorerConfig:
        """A one-pass scorer needs an engine that scores steps, GenPRM one that generates."""
        wanted = not decodes(self.kind)
        if self.engine.scores_steps != wanted:
            does = "scores steps (a one-pass PRM)" if self.engine.scores_steps else "generates text"
            needs = "a one-pass PRM engine" if wanted else "an engine that generates text"
            raise ValueError(
                f"scorer.engine.kind={self.engine.kind!r} {does}; scorer.kind "
                f"{self.kind!r} needs {needs}"
            )
        return self


def check_generating_engine(service: ServiceConfig, field: str) -> ServiceConfig:
    """Refuse a one-pass PRM engine where text is generated (the policy), naming `field`."""
    if service.engine.scores_steps:
        raise ValueError(
            f"{field}.engine.kind={service.engine.kind!r} scores steps (a one-pass PRM) and "
            "generates no text; the policy needs an engine that generates text"
        )
    return service
