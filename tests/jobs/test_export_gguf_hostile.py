"""`bgmcts export-gguf` on a checkpoint that is not whole: one line, exit 2, nothing written.

The checkpoint is a tiny random Llama causal LM (saved as a trainer saves one); each test
breaks one thing in a copy: its weights cut short, a NaN in them, a config.json whose sizes
are SmolLM2's (what ``--like embedded`` checks) while the weights are the tiny model's, an
output folder that cannot be made.  The checkpoint is checked before ``--like`` is read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import cli
from jobs.exits import BAD_INPUT

pytestmark = pytest.mark.integration

pytest.importorskip("transformers")
pytest.importorskip("gguf")

# SmolLM2-135M-Instruct's sizes, as the bundled GGUF gives them
SMOLLM2_SIZES = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
}


@pytest.fixture(scope="module")
def tiny_causal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-causal")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _export(checkpoint: Path, output: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    argv = ["export-gguf", str(checkpoint), "--like", "embedded", "--output", str(output)]
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert not output.exists()
    return err


def test_the_tiny_checkpoint_is_whole(tiny_causal: Path) -> None:
    from actors.engines.checkpoint import verify_checkpoint

    # tied embeddings: the file has no lm_head, and none is asked for
    assert "lm_head.weight" not in verify_checkpoint(tiny_causal, tokenizer=False).tensors


def test_weights_cut_short_are_one_line(
    tiny_causal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = Path(shutil.copytree(tiny_causal, tmp_path / "ckpt"))
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    err = _export(checkpoint, tmp_path / "out.gguf", capsys)
    assert f"error: {weights} is cut short: " in err


def test_a_config_whose_sizes_the_tensors_lack_is_one_line(
    tiny_causal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = Path(shutil.copytree(tiny_causal, tmp_path / "ckpt"))
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, **SMOLLM2_SIZES}))
    err = _export(checkpoint, tmp_path / "out.gguf", capsys)
    assert "model.embed_tokens.weight is [64, 16], but config.json gives it [49152, 576]" in err


def test_a_nan_weight_is_one_line(
    tiny_causal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file, save_file

    checkpoint = Path(shutil.copytree(tiny_causal, tmp_path / "ckpt"))
    tensors = load_file(str(checkpoint / "model.safetensors"))
    tensors["model.norm.weight"][0] = float("inf")
    save_file(tensors, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})
    err = _export(checkpoint, tmp_path / "out.gguf", capsys)
    assert "model.norm.weight holds 1 values that are NaN or infinite" in err


def test_an_output_folder_that_cannot_be_made_is_one_line(
    tiny_causal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked first, before the checkpoint or --like is read."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    err = _export(tiny_causal, blocker / "out.gguf", capsys)
    assert f"--output: {blocker / 'out.gguf'} cannot be written" in err
