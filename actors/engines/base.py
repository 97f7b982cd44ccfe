"""The engine contract shared by llama.cpp, vLLM and OpenAI-compatible backends: what
every engine does (`Engine`, `StepScoringEngine`) and what every engine's config tells
the rest of the code (`EngineConfigBase`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ClassVar, NamedTuple, Protocol, runtime_checkable

from pydantic import Field

from actors.engines.read_counts import checked_counts
from actors.errors import EngineError as EngineError  # every engine raises it
from search.protocols import FinishReason
from search.strict_config import StrictConfig

TopLogprobs = tuple[tuple[str, float], ...]  # (token text, log-probability), best first

# The most CPU threads a CPU engine's config may ask for: ggml's GGML_MAX_N_THREADS, far
# beyond any machine's cores.  More threads than the process may start kill it in libgomp
# ("Thread creation failed"), taking the replica down with no error to report.
MAX_THREADS = 512

# A CPU engine's `threads` setting, bounded as above.
Threads = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_THREADS,
        description=f"CPU threads the engine computes with (at most {MAX_THREADS}: more than a "
        "process may start kill it in libgomp)",
    ),
]


def short_name(model: str) -> str:
    """An engine's default name: the last part of its model's id or folder ("org/Model-7B"
    and "/models/Model-7B/" are both "Model-7B")."""
    return model.rstrip("/").rsplit("/", 1)[-1]


def _check_counts(
    answer: Completion | StepValues, sent: str, cached: str, output: str = ""
) -> None:
    """An engine's answer's token counts as counts that can be, where they enter: whole,
    at least 0, cached at most sent (`actors.engines.read_counts`: clamped, and said
    once per engine); the faults found join the answer's `count_faults` (those the engine
    found when it checked the counts itself, before it made the answer)."""
    values = [getattr(answer, name) for name in (sent, cached, output) if name]
    faults: set[str] = set()
    checked = checked_counts(*values, faults=faults)
    for name, value, fixed in zip((sent, cached, output), values, checked, strict=False):
        if type(value) is not int or value != fixed:
            object.__setattr__(answer, name, fixed)  # frozen: set once, as it is made
    if faults or type(answer.count_faults) is not frozenset:
        object.__setattr__(answer, "count_faults", frozenset(answer.count_faults) | faults)


@dataclass(frozen=True, slots=True)
class Sampling:
    """How to sample one continuation: everything an engine's `complete` needs but the prompt.

    * `max_tokens`: the most tokens to generate (the tokens of a matched stop
      string and the end-of-sequence token count).
    * `stop`: stop strings; generation ends on the first one matched, which the
      completion's text leaves out.  Empty: run to end of sequence or `max_tokens`.
    * `temperature`: the sampling temperature; 0 is greedy decoding.
    * `seed`: the sampling seed; the same request with the same seed gives the
      same text on engines that honour it.
    * `top_logprobs`: how many top alternatives (with log-probabilities) to
      return for every generated token; 0 asks for none.
    * `top_p` / `top_k`: nucleus and top-k sampling; None leaves the engine's own
      default (GenPRM sets them).
    """

    max_tokens: int
    stop: tuple[str, ...]
    temperature: float
    seed: int
    top_logprobs: int = 0
    top_p: float | None = None
    top_k: int | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """One sampled continuation of a prompt.

    `output_tokens` counts every generated token, a matched stop string
    included (the engine generated it), while `text` excludes the stop string.
    `top_logprobs` holds, per generated token, the engine's top alternatives
    when they were asked for.  `retryable` (an `error` completion): False when the engine
    already retried the request or the server refused it, so the serving layer does not
    send it again (retries are never multiplied).  `count_faults`: what was wrong with
    the counts the engine reported, now clamped (names of `search.protocols.COUNT_FAULTS`;
    empty: nothing).
    """

    text: str
    output_tokens: int
    finish: FinishReason
    input_tokens: int = 0
    stop_string: str = ""
    top_logprobs: tuple[TopLogprobs, ...] = field(default=())
    error: str | None = None
    cached_tokens: int = 0  # of input_tokens, read from the prefix cache (0: none/unknown)
    retryable: bool = True
    count_faults: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        _check_counts(self, "input_tokens", "cached_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class EngineCapacity:
    """What an engine can hold at once, for admission (`actors.admission`).

    * `max_seqs`: sequences decoded in one batch (vLLM `max_num_seqs`, llama.cpp slots);
    * `kv_tokens`: tokens the KV cache holds (running sequences and cached prefixes);
    * `context_length`: the longest prompt plus completion;
    * `prefix_hit_rate`: the share of prompt tokens served from the prefix cache so
      far (None: unknown, or nothing served yet).
    """

    max_seqs: int
    kv_tokens: int
    context_length: int
    prefix_hit_rate: float | None = None


def engine_capacity(engine: object) -> EngineCapacity:
    """`engine.capacity()` where the engine has it; else one sequence of its context
    (an engine that says nothing is admitted as if it were small)."""
    method = getattr(engine, "capacity", None)
    if method is not None:
        capacity = method()
        assert isinstance(capacity, EngineCapacity)
        return capacity
    context = int(getattr(engine, "context_length", 4096))
    return EngineCapacity(max_seqs=1, kv_tokens=context, context_length=context)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """What an engine is doing now, for admission's run-time steering (`actors.admission`).

    * `max_seqs`: sequences decoded in one batch;
    * `running` / `waiting`: sequences in the batch and queued for it now;
    * `prompt_tokens` / `cached_prompt_tokens`: prompt tokens seen and served from the
      prefix cache since start (counters: the caller takes differences per interval).

    None: the engine does not report it (the controller then keeps its target).
    """

    max_seqs: int
    running: int | None = None
    waiting: int | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None


def engine_load(engine: object) -> EngineLoad:
    """`engine.load()` where the engine has it; else only its slots (nothing live)."""
    method = getattr(engine, "load", None)
    if method is not None:
        load = method()
        assert isinstance(load, EngineLoad)
        return load
    return EngineLoad(max_seqs=engine_capacity(engine).max_seqs)


@runtime_checkable
class Engine(Protocol):
    name: str
    context_length: int

    async def complete(self, prompt: str, sampling: Sampling) -> Completion:
        """Continue `prompt` as `sampling` says; never raises for a bad request
        (returns an ERROR completion)."""
        ...

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        """The model's chat template applied to `messages`.

        `continue_final=True` leaves the last (assistant) message open so the
        model continues it; otherwise the assistant turn header is appended.
        """
        ...

    async def tokenize(self, text: str) -> list[int]: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StepValues:
    """What a step-scoring engine returns for one path, from one forward pass.

    * `values`: per step, the probability of the positive ("good step") class at the
      token that closes the step (its step separator), in step order;
    * `input_tokens`: the tokens of the whole sequence (prompt and every step);
    * `cached_tokens`: of those, the ones served from the engine's prefix cache (0: none
      or unknown), reported apart from the tokens computed;
    * `error`: set when nothing was scored (then `values` is empty); a path longer than
      the engine's context is such an error, never an exception;
    * `count_faults`: as a `Completion`'s.
    """

    values: tuple[float, ...]
    input_tokens: int
    cached_tokens: int = 0
    error: str | None = None
    count_faults: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        _check_counts(self, "input_tokens", "cached_tokens")


@runtime_checkable
class StepScoringEngine(Protocol):
    """A one-pass process reward model: one forward pass scores every step of a path.

    The sequence an engine scores is laid out by `actors.engines.step_layout` (the token
    layout TRL's stepwise PRM trainer used): the prompt's tokens, then each step's tokens
    followed by the step separator's token, the step's value read at that separator.
    """

    name: str
    context_length: int

    async def score_steps(self, prompt: str, steps: Sequence[str]) -> StepValues:
        """Every step's value; never raises for a bad request (an error `StepValues`)."""
        ...

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, continue_final: bool
    ) -> str:
        """The model's chat template applied to `messages` (as `Engine.render_chat`)."""
        ...

    async def tokenize(self, text: str) -> list[int]: ...

    async def close(self) -> None: ...


class Package(NamedTuple):
    """A module an engine imports beyond the base install, and what installs it."""

    module: str  # what the engine imports, e.g. "vllm"
    install: str  # what follows `pip install`, e.g. "'.[gpu]'"

    def __str__(self) -> str:
        return f"{self.module} (pip install {self.install})"


class EngineConfigBase(StrictConfig):
    """What every engine config tells `actors.engines.factory`, which has no list of kinds.

    An engine's config sits in the engine's own module, beside the engine, and its `build`
    makes the engine from it (in the replica that serves it); a new engine is one module
    and one line in `actors.engines.configs.EngineConfig`.  The config is read and checked
    on the machine that starts the run, which may lack the engine's packages: an engine
    module imports them (vLLM, torch, xllamacpp, httpx) only when it builds the engine.
    `packages` are those imports: a real run refuses to start without them, a dry run lists
    them (the nodes that run the engine need them, the machine that writes the config may
    not).
    """

    packages: ClassVar[tuple[Package, ...]] = ()
    # True: the engine is a one-pass PRM (`StepScoringEngine`: it scores a path's steps and
    # decodes nothing), built with the scorer's step separator; False: it generates text
    # (`Engine`).  A scorer of kind one_pass needs the first, the policy and GenPRM the
    # second.
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


def folder_warning(field: str, folder: str) -> str | None:
    """A warning naming `field` when `folder` is written as a path (not a hub id) and is
    not a folder here."""
    if not folder.startswith(("/", "./", "../", "~")):
        return None  # a hub id (or a bare relative name, which vLLM also tries as one)
    if Path(folder).expanduser().is_dir():
        return None
    return f"{field}: {folder} is not a folder here (the nodes that run the engine need it)"
