"""The one-pass PRM load model: a path's uncached tokens prefilled, one forward step, no decode.

No Ray: the engine runs on an event loop with time scaled down; each check reads the
batcher's simulated seconds (`busy_s`, `work_s`), which do not depend on the machine.
"""

from __future__ import annotations

import asyncio

import pytest

from actors.config import ScorerConfig
from actors.engines.base import StepScoringEngine
from actors.engines.batching import ContinuousBatcher, EngineCurve, PrefixCache
from actors.engines.factory import build_engine, check_step_separator
from actors.engines.load_model import LoadModelConfig, LoadModelEngine
from actors.engines.load_model_prm import LoadModelPRMConfig, LoadModelPRMEngine
from actors.engines.step_layout import layout
from actors.errors import EngineError

CURVE = EngineCurve(
    decode_base_s=0.010, decode_per_seq_s=0.001, prefill_tokens_per_s=10_000, max_seqs=4
)


def engine(**fields: object) -> LoadModelPRMEngine:
    """A PRM of these config fields on the test's curve, time scaled down, blocks of 4."""
    batcher = ContinuousBatcher(CURVE, PrefixCache(400_000, 4), time_scale=0.01)
    config = LoadModelPRMConfig.model_validate(fields)
    return LoadModelPRMEngine(config, step_separator="\n", batcher=batcher)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_the_config_builds_a_step_scoring_engine() -> None:
    config = ScorerConfig.model_validate(
        {"kind": "one_pass", "engine": {"kind": "load_model_prm", "prefill_tokens_per_s": 5000}}
    )
    assert isinstance(config.engine, LoadModelPRMConfig)
    assert config.engine.scores_steps
    built = build_engine(config.engine, step_separator="\n")
    assert isinstance(built, LoadModelPRMEngine) and isinstance(built, StepScoringEngine)
    assert built.batcher.curve.prefill_tokens_per_s == 5000

    # its vocabulary is whitespace words, checked before a run as the engine checks it
    check_step_separator(config.engine, "\n")
    check_step_separator(config.engine, "<extra_0>")
    with pytest.raises(EngineError, match=r"^one_pass.step_separator='two words': .* 2 tokens"):
        check_step_separator(config.engine, "two words")


async def test_a_path_is_laid_out_prefilled_once_and_scored_in_one_step() -> None:
    prm = engine()
    prompt, steps = words(40, "p"), [words(30, "a"), words(20, "b")]
    values = await prm.score_steps(prompt, steps)
    ids = layout(prm._ids, prompt, steps, prm._ids("\n")[0], prm._ids("<bos>")[0]).input_ids
    assert values.input_tokens == len(ids) == 1 + 40 + 31 + 21
    assert len(values.values) == 2 and all(0 < v < 1 for v in values.values)
    assert values.cached_tokens == 0 and values.error is None
    stats = prm.batcher.stats
    assert stats.decode_steps == 1  # one forward step, nothing decoded
    assert stats.prefill_tokens == len(ids)
    assert stats.busy_s == pytest.approx(CURVE.step_s(1) + len(ids) / 10_000)
    again = await prm.score_steps(prompt, steps)
    assert again.values == values.values  # same path, same values
    assert again.cached_tokens == len(ids) // 4 * 4  # its full blocks of 4 are cached now


async def test_a_child_pays_only_for_its_own_step() -> None:
    prm = engine()
    prompt, parent = words(40, "p"), [words(30, "a")]
    first = await prm.score_steps(prompt, parent)
    before = prm.batcher.stats.prefill_tokens
    child = await prm.score_steps(prompt, [*parent, words(20, "b")])
    assert child.values[0] == first.values[0]  # the parent's step keeps its value
    # the parent's full blocks of 4 tokens are cached: 72 tokens -> 72 cached
    assert child.cached_tokens == (first.input_tokens // 4) * 4
    assert prm.batcher.stats.prefill_tokens - before == child.input_tokens - child.cached_tokens


async def test_a_path_longer_than_the_context_is_an_error_value() -> None:
    prm = engine(context_length=256)  # the least the config allows
    values = await prm.score_steps(words(200, "p"), [words(100, "a")])
    assert values.error is not None and "context" in values.error and values.values == ()
    assert prm.batcher.stats.requests == 0  # refused before any prefill


async def test_a_policy_and_its_prm_can_share_one_batcher() -> None:
    batcher = ContinuousBatcher(CURVE, PrefixCache(10_000, 4), time_scale=0.01)
    policy = LoadModelEngine(LoadModelConfig(), batcher=batcher)
    prm = LoadModelPRMEngine(LoadModelPRMConfig(), step_separator="\n", batcher=batcher)
    assert policy.batcher is prm.batcher
    await asyncio.gather(
        prm.score_steps(words(10, "p"), [words(10, "a")]),
        prm.score_steps(words(10, "q"), [words(10, "a")]),
    )
    assert batcher.stats.requests == 2 and batcher.stats.max_running == 2


@pytest.mark.parametrize("read", [True, False])
async def test_a_childs_path_reads_its_parents_from_the_cache_only_when_asked(read: bool) -> None:
    """Reading the cache (`vllm_pooling` asks vLLM to) a child computes its own step only;
    not reading it (stock vLLM for token classification) it computes the whole path again,
    though the parent's path was written to the cache."""
    prm = engine(read_prefix_cache=read)
    prompt, parent = words(40, "p"), [words(30, "a")]
    first = await prm.score_steps(prompt, parent)
    prefilled = prm.batcher.stats.prefill_tokens
    child = await prm.score_steps(prompt, [*parent, words(10, "b")])
    computed = prm.batcher.stats.prefill_tokens - prefilled
    assert first.cached_tokens == 0
    if read:
        assert child.cached_tokens == 72 and computed == child.input_tokens - 72  # 18 blocks
    else:
        assert child.cached_tokens == 0 and computed == child.input_tokens
    built = build_engine(LoadModelPRMConfig(read_prefix_cache=read), step_separator="\n")
    assert isinstance(built, LoadModelPRMEngine) and built.read_prefix_cache is read
