"""Typed configs of the model services: which engine, which resources, how resilient."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import Field, field_validator, model_validator

from actors.errors import EngineError
from actors.prompts import PromptConfig
from search.scorer_kinds import DEFAULT_SCORER_KIND, ScorerKindName, decodes
from search.strict_config import StrictConfig

# The engine field an error about a model folder concerns (`EngineError.field`).
MODEL = "engine.model"

CONTEXT_OVERFLOW = (
    "tokens of one sequence (prompt and completion); a longer prompt comes back as a "
    "context overflow"
)

# The sleep engine's answers, which the load model gives too (a SleepEngine answers for
# it): each setting defined once for both configs.
OutputTokens = Annotated[int, Field(ge=1, description="tokens per completion (max_tokens caps)")]
SleepContext = Annotated[int, Field(ge=256, description=CONTEXT_OVERFLOW)]
AnswerEvery = Annotated[
    int,
    Field(ge=0, description="every n-th stopped step answers $\\boxed{42}$ instead; 0: never"),
]
AnswerSeed = Annotated[
    int, Field(description="seeds which completions answer (with the request's seed)")
]


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


class Package(NamedTuple):
    """A module an engine imports beyond the base install, and what installs it."""

    module: str  # what the engine imports, e.g. "vllm"
    install: str  # what follows `pip install`, e.g. "'.[gpu]'"

    def __str__(self) -> str:
        return f"{self.module} (pip install {self.install})"


class _Engine(StrictConfig):
    """What every engine config tells `actors.engines.factory`, which has no list of kinds:
    a new engine is one config class here (added to `EngineConfig`) and one module.

    `builds` names the engine class as "module:Class"; the factory imports that module only
    when it builds the engine, so vLLM is imported on the nodes that run it and nowhere else,
    and calls `Class.from_config(config)`.  `packages` are what that module imports beyond
    the base install: a real run refuses to start without them, a dry run lists them (the
    nodes that run the engine need them, the machine that writes the config may not).
    """

    builds: ClassVar[str]
    packages: ClassVar[tuple[Package, ...]] = ()
    # True: the engine is a one-pass PRM (`actors.engines.base.StepScoringEngine`: it scores
    # a path's steps and decodes nothing); False: it generates text (`Engine`).  A scorer of
    # kind one_pass needs the first, the policy and GenPRM the second.
    scores_steps: ClassVar[bool] = False
    # Where a one-pass engine's vocabulary is found before the engine is built, so that a
    # run can refuse a step separator that is not one token before it starts: "module:
    # function" (`actors.engines.vocabulary`), imported only by that check.  None: nothing
    # to look at before the engine runs (a remote server's), or no step separator at all.
    vocabulary: ClassVar[str | None] = None
    # True: `model` may be a Hugging Face Hub id the engine downloads in its replica (into
    # HF_HOME), so `bgmcts prefetch-models` fetches it ahead (`pipeline.run.model_cache`).
    downloads_model: ClassVar[bool] = False

    def context(self) -> tuple[str, int | None]:
        """The field that bounds one sequence (prompt and completion, or a scored path) and
        its value; None: the model's own length, not known before the engine loads it."""
        return "context_length", getattr(self, "context_length", None)

    def check_model(self) -> str | None:
        """Look for the model files the engine loads here (none by default).

        Raises EngineError for one that must be on this machine; returns a warning, naming
        the field under `engine.`, for one that may live only on the nodes that run it.
        """
        return None


class LlamaCppConfig(_Engine):
    """llama.cpp in-process (the CPU default); `model: embedded` is SmolLM2-135M-Instruct."""

    builds: ClassVar[str] = "actors.engines.llamacpp:LlamaCppEngine"
    packages: ClassVar[tuple[Package, ...]] = (Package("xllamacpp", "xllamacpp"),)

    kind: Literal["llamacpp"] = Field("llamacpp", description="llama.cpp in the replica (CPU)")
    model: str = Field(
        "embedded", description="path to a GGUF file; embedded: the bundled SmolLM2-135M-Instruct"
    )
    context_length: int = Field(
        4096,
        ge=256,
        description="tokens of one sequence (prompt and completion) per slot; llama.cpp gets "
        "context_length x parallel",
    )
    threads: int = Field(2, ge=1, description="CPU threads llama.cpp computes with")
    parallel: int = Field(4, ge=1, description="concurrent sequences (llama.cpp slots)")
    slot_prompt_similarity: float = Field(
        0.9,
        ge=0,
        le=1,
        description="llama.cpp takes an idle slot whose cached prompt covers more than this "
        "share of a request's prompt; otherwise the least recently used slot, after loading "
        "the request's longest cached prefix from the host-RAM prompt cache (0: always the "
        "least recently used slot)",
    )
    cache_ram_mib: int = Field(
        8192,
        ge=-1,
        description="host memory for llama.cpp's prompt cache, where a slot's state is kept "
        "when another prompt takes the slot (0: off; -1: no limit)",
    )
    hold_shared_prefixes: bool = Field(
        True,
        description="a request waits while one in flight shares more of its prompt than "
        "llama.cpp has cached (siblings of one node), so that the shared part is computed "
        "once (actors/engines/prefix_gate.py)",
    )

    def check_model(self) -> str | None:
        """The GGUF file must exist here: llama.cpp is the CPU engine, run where the config
        is (a wrong path is a typo to fix before the run, not a file on other nodes)."""
        from actors.models import resolve_model_path

        resolve_model_path(self.model)
        return None


class _InProcessVLLMConfig(_Engine):
    """What both in-process vLLM engines take (`actors.engines.vllm_engine.InProcessVLLM`):
    the model, how vLLM starts, and any further `AsyncEngineArgs` field."""

    packages: ClassVar[tuple[Package, ...]] = (Package("vllm", "'.[gpu]'"),)
    downloads_model: ClassVar[bool] = True

    model: str = Field(
        description="Hugging Face model id or local folder; `embedded`: the embedded "
        "SmolLM2-135M-Instruct as a model folder, written once from its GGUF (`bgmcts "
        "embedded-model`)"
    )
    dtype: str = Field("auto", description="vLLM's dtype: auto (the checkpoint's), bfloat16, ...")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one model is sharded over")
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="share of GPU memory vLLM may take (weights and KV cache); on vLLM's CPU "
        "build, the share of the host's memory, which must be free when the engine starts",
    )
    max_model_len: int = Field(
        8192, ge=256, description="tokens of one sequence (prompt and completion)"
    )

    def context(self) -> tuple[str, int | None]:
        return "max_model_len", self.max_model_len

    enable_prefix_caching: bool = Field(
        True, description="reuse the KV cache of shared prompt prefixes (the paths of a tree)"
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="vLLM's `max_num_seqs`: sequences in one batch; the rest wait in vLLM's "
        "queue. null: vLLM's default (docs/sizing.md)",
    )
    seed: int = Field(0, description="vLLM's engine seed (each request also has its own)")
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="further vLLM AsyncEngineArgs fields (e.g. enforce_eager); one set by a "
        "field here is refused",
    )

    def check_model(self) -> str | None:
        """A hub id cannot be checked offline; a folder that is not here may be on the GPU
        nodes (the machine writing the config rarely has the weights): a warning."""
        if self.model == "embedded":
            return None
        return _folder_warning("engine.model", self.model)


class VLLMConfig(_InProcessVLLMConfig):
    """vLLM's async engine in the replica (GPU production)."""

    builds: ClassVar[str] = "actors.engines.vllm_engine:VLLMEngine"

    kind: Literal["vllm"] = Field("vllm", description="vLLM's async engine in the replica (GPU)")


class OpenAIConfig(_Engine):
    """Any OpenAI-compatible endpoint; the key is read from `api_key_env`, never stored."""

    builds: ClassVar[str] = "actors.engines.openai_compat:OpenAIEngine"
    packages: ClassVar[tuple[Package, ...]] = (Package("openai", "openai"),)

    kind: Literal["openai"] = Field("openai", description="an OpenAI-compatible HTTP endpoint")
    base_url: str = Field(description="the API's base URL, e.g. http://localhost:8000/v1")
    model: str = Field(description="model name sent with every request")
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="environment variable holding the API key (required unless the URL is "
        "loopback); None: no key",
    )
    context_length: int = Field(
        8192,
        ge=256,
        description="tokens of one sequence (prompt and completion); caps max_tokens",
    )
    chat_template: str = Field(
        "server",
        description="'server': the server renders the chat; else a local tokenizer folder "
        "whose template renders it",
    )

    def check_model(self) -> str | None:
        """The local tokenizer folder, like vLLM's model folder: a warning when not here."""
        if self.chat_template in ("server", "auto"):
            return None
        return _folder_warning("engine.chat_template", self.chat_template)


class VLLMPoolingConfig(_InProcessVLLMConfig):
    """A one-pass PRM on vLLM's pooling runner in the replica (GPU production); `model` is
    a checkpoint `bgmcts train-prm` wrote (or a PRM of that layout)."""

    builds: ClassVar[str] = "actors.engines.vllm_pooling:VLLMPoolingEngine"
    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = "actors.engines.vocabulary:model_folder"

    kind: Literal["vllm_pooling"] = Field(
        "vllm_pooling", description="a process reward model on vLLM's pooling runner (GPU)"
    )
    read_prefix_cache: bool = Field(
        True,
        description="score a child by computing only its new step: read its parent's path "
        "from vLLM's prefix cache (the values equal a cold pass's); false: vLLM's default "
        "for token classification, every token computed",
    )

    def check_model(self) -> str | None:
        """A checkpoint folder that is here is checked whole, as the engine checks it when
        it loads; one that is not may be on the GPU nodes (a warning), a hub id is not
        looked at."""
        warning = super().check_model()
        folder = Path(self.model).expanduser()
        if warning is None and self.model != "embedded" and folder.is_dir():
            _verify_prm(folder)
        return warning


class OpenAIPoolingConfig(_Engine):
    """A one-pass PRM behind vLLM's OpenAI-compatible server (its `/pooling` endpoint), started
    with `--runner pooling --pooler-config '{"tok_pooling_type": "ALL"}'`; the key is read
    from `api_key_env`, never stored."""

    builds: ClassVar[str] = "actors.engines.openai_pooling:OpenAIPoolingEngine"
    scores_steps: ClassVar[bool] = True

    kind: Literal["openai_pooling"] = Field(
        "openai_pooling", description="the /pooling endpoint of a vLLM server (--runner pooling)"
    )
    base_url: str = Field(
        description="the server's URL, e.g. http://localhost:8000 (a trailing /v1 is dropped: "
        "vLLM serves /pooling and /tokenize at its root)"
    )
    model: str = Field(description="the served model name sent with every request")
    api_key_env: str | None = Field(
        "OPENAI_API_KEY",
        description="environment variable holding the API key (required unless the URL is "
        "loopback); None: no key",
    )
    context_length: int = Field(
        8192, ge=256, description="tokens of one scored path (the server's --max-model-len)"
    )
    request_timeout_s: float = Field(
        120.0, gt=0, description="seconds one HTTP request may take before it fails"
    )


class SleepConfig(_Engine):
    """No model: each call sleeps `latency_s` and returns `output_tokens` tokens (load tests)."""

    builds: ClassVar[str] = "actors.engines.sleep:SleepEngine"

    kind: Literal["sleep"] = Field("sleep", description="no model: fixed latency (load tests)")
    model: str = Field("sleep", description="the name the engine reports")
    latency_s: float = Field(0.05, ge=0, description="seconds each engine call sleeps")
    output_tokens: OutputTokens = 16
    context_length: SleepContext = 4096
    answer_every: AnswerEvery = 4
    seed: AnswerSeed = 0


class LoadCurveConfig(_Engine):
    """The continuous-batching curve both model-free load engines run on (the policy's,
    `load_model`, and the one-pass PRM's, `load_model_prm`): one definition of each field,
    so the two cannot drift apart.  A step is a decode step of the policy's engine, the
    one forward step of a scored path on the PRM's.
    """

    # each engine narrows `kind` to its Literal and gives `model` its default; declared
    # here so that they stay the first keys of both engines (and of their docs)
    kind: str
    model: str = Field(description="the name the engine reports")
    decode_base_ms: float = Field(
        7.4,
        ge=0,
        description="step time with no sequences (a decode step; the PRM's: its forward step)",
    )
    decode_per_seq_ms: float = Field(
        0.051, ge=0, description="extra step time per sequence in the batch"
    )
    decode_per_context_token_ns: float = Field(
        0.0,
        ge=0,
        description="extra step time per context token the batch holds (attention reading "
        "the KV cache); 0: folded into decode_per_seq_ms, as the public figures are",
    )
    prefill_tokens_per_s: float = Field(24_000.0, gt=0, description="uncached prompt tokens/s")
    max_seqs: int = Field(256, ge=1, description="sequences in the batch at most; others queue")
    cache_tokens: int = Field(400_000, ge=0, description="LRU prefix cache size in tokens")
    block_tokens: int = Field(16, ge=1, description="prefix cache block size in tokens")
    time_scale: float = Field(
        1.0, gt=0, description="multiplies every duration (<1 faster, >1 slower than the GPU)"
    )


class LoadModelConfig(LoadCurveConfig):
    """No model: a continuous-batching engine's timing (actors/engines/load_model.py).

    Defaults: vLLM serving a 7-8B model on one H100 80GB; the module docstring cites
    the published benchmarks each value comes from.
    """

    builds: ClassVar[str] = "actors.engines.load_model:LoadModelEngine"

    kind: Literal["load_model"] = Field(
        "load_model", description="no model: a continuous-batching engine's timing"
    )
    model: str = Field("load-model", description="the name the engine reports")
    output_tokens: OutputTokens = 16
    output_tokens_max: int | None = Field(
        None,
        ge=1,
        description="None: every completion has output_tokens; else each one's length is "
        "drawn in [output_tokens, output_tokens_max] (steps and trees of varied length)",
    )
    context_length: SleepContext = 4096
    answer_every: AnswerEvery = 4
    slow_marker: str | None = Field(
        None, description="a prompt containing this text is slow (a deliberately slow problem)"
    )
    slow_factor: float = Field(1.0, ge=1, description="how many times longer a slow request runs")
    seed: AnswerSeed = 0

    @model_validator(mode="after")
    def _length_range(self) -> LoadModelConfig:
        """Refused here, not when the replica builds the engine (a dry run would pass it)."""
        if self.output_tokens_max is not None and self.output_tokens_max < self.output_tokens:
            raise ValueError(
                f"output_tokens_max ({self.output_tokens_max}) must be >= output_tokens "
                f"({self.output_tokens})"
            )
        return self


class TransformersPRMConfig(_Engine):
    """A one-pass PRM on CPU: a token-classification checkpoint (what `bgmcts train-prm`
    writes) run with transformers; concurrent paths share padded forwards, and a path's
    forward starts after its parent's kept keys and values."""

    builds: ClassVar[str] = "actors.engines.transformers_prm:TransformersPRMEngine"
    packages: ClassVar[tuple[Package, ...]] = (
        Package("torch", "'.[prm]'"),
        Package("transformers", "'.[prm]'"),
    )
    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = "actors.engines.vocabulary:model_folder"

    kind: Literal["transformers_prm"] = Field(
        "transformers_prm", description="a one-pass PRM checkpoint on CPU (transformers)"
    )
    model: str = Field(
        description="the checkpoint folder (config.json, weights and tokenizer files, as "
        "`bgmcts train-prm` saves them)"
    )
    threads: int = Field(1, ge=1, description="CPU threads torch computes with")
    max_batch: int = Field(16, ge=1, description="most paths in one padded forward")
    batch_window_s: float = Field(
        0.002, ge=0, le=1, description="how long a path waits for others to share its forward"
    )
    context_length: int | None = Field(
        None,
        ge=16,
        description="tokens of one path (prompt and steps); a longer one comes back as a "
        "context overflow. null: the model's max_position_embeddings",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="the weights' and activations' type (bfloat16: half the memory)"
    )
    kv_cache_tokens: int = Field(
        32_768,
        ge=0,
        description="tokens of scored paths' keys and values kept, so that a child's forward "
        "computes only its new step (least recently used dropped first; 0: none kept). "
        "SmolLM2-135M keeps 46 KB a token in float32 (1.5 GB at this default, half in "
        "bfloat16); the default holds every path of the embedded default's 16 trees at once "
        "(about 13,000 tokens) with room to spare",
    )

    def check_model(self) -> str | None:
        """The checkpoint must be here (the CPU engine runs where the config is) and be a
        whole two-class token classifier (`actors.checkpoint.verify_checkpoint`: weights,
        head, values, tokenizer, layout file)."""
        folder = Path(self.model).expanduser()
        if not folder.is_dir():
            # the usual cause: no checkpoint trained yet; say how to make one (one line)
            raise EngineError(
                f"engine.model: {folder} is not a folder here; train one from a run's trees: "
                f"make prm RUNS=<run folder> PRM_OUT={folder} (bgmcts train-prm)",
                field=MODEL,
            )
        _verify_prm(folder)
        return None


def _verify_prm(folder: Path) -> None:
    """A one-pass PRM checkpoint here checked whole, its fault one line on `engine.model`
    (imported only now: reading a config loads nothing)."""
    from actors.checkpoint import verify_prm

    verify_prm(folder)


class LoadModelPRMConfig(LoadCurveConfig):
    """No model: a one-pass PRM's timing on a continuous-batching engine (load_model_prm.py).

    A scoring request prefills the uncached tokens of its path (the prefix cache
    serves the parent's) and runs one forward step; nothing is decoded (vLLM's pooling
    runner).  The curve's defaults are `load_model`'s: a 7-8B model on one H100 80GB.
    """

    builds: ClassVar[str] = "actors.engines.load_model_prm:LoadModelPRMEngine"
    scores_steps: ClassVar[bool] = True
    vocabulary: ClassVar[str | None] = "actors.engines.vocabulary:words"

    kind: Literal["load_model_prm"] = Field(
        "load_model_prm", description="no model: a one-pass PRM's continuous-batching timing"
    )
    model: str = Field("load-model-prm", description="the name the engine reports")
    context_length: int = Field(
        4096, ge=256, description="the longest path scored; a longer one is an error value"
    )
    seed: int = Field(0, description="seeds the step values (a hash of the path)")
    read_prefix_cache: bool = Field(
        True,
        description="a path's cached prefix is not computed again (`vllm_pooling` reading "
        "vLLM's cache); false: every path computed whole (vLLM's default for token "
        "classification)",
    )


def _folder_warning(field: str, folder: str) -> str | None:
    """A warning naming `field` when `folder` is written as a path (not a hub id) and is
    not a folder here."""
    if not folder.startswith(("/", "./", "../", "~")):
        return None  # a hub id (or a bare relative name, which vLLM also tries as one)
    if Path(folder).expanduser().is_dir():
        return None
    return f"{field}: {folder} is not a folder here (the nodes that run the engine need it)"


EngineConfig = Annotated[
    LlamaCppConfig
    | VLLMConfig
    | VLLMPoolingConfig
    | OpenAIConfig
    | OpenAIPoolingConfig
    | SleepConfig
    | LoadModelConfig
    | TransformersPRMConfig
    | LoadModelPRMConfig,
    Field(discriminator="kind"),
]


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
        "replica fails a call once: 2 leaves one spare)",
    )
    retry_backoff_s: float = Field(
        1.0, ge=0, description="seconds before the first retry, doubled for each next one"
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
