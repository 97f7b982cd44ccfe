"""`bgmcts export-gguf`: a Hugging Face llama checkpoint -> a GGUF that transformers and
llama.cpp read back as the same model.

The checkpoint is SmolLM2-135M-Instruct itself, dequantized from the bundled GGUF as the
SFT benchmark loads its base, saved as a Hugging Face folder: a real fine-tune's layout
(tied embeddings, 30 layers, grouped K/V heads), with nothing downloaded.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs import cli

pytestmark = pytest.mark.integration

pytest.importorskip("transformers")
pytest.importorskip("gguf")

# an answer of more than 16 tokens, so that all 16 are compared
PROMPT = [{"role": "user", "content": "Compute 17 * 23 - 45 step by step."}]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Any:
    """Torch on one thread: a 135M model is fast on one, and on a machine busy with other
    work torch's spinning thread pool made a 16-token generate take half a minute."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The base model and its Hugging Face folder, written by `bgmcts embedded-model`."""
    import torch
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("cache")
    assert cli.main(["embedded-model", "--root", str(root)]) == 0
    (folder,) = root.iterdir()
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), folder


def test_the_embedded_model_folder_holds_the_ggufs_weights_and_is_written_once(
    base: tuple[Any, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder's weights are the GGUF's, dequantized (what vLLM is given); the config
    names no quantization; a second call finds the folder and writes nothing; a folder cut
    short (no completion mark) is written again."""
    import torch

    from actors.models import embedded_model_folder, embedded_model_path

    model, folder = base
    gguf = _load_gguf(embedded_model_path())
    for name, tensor in gguf.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert "<|im_start|>" in (folder / "chat_template.jinja").read_text()
    written = (folder / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    assert cli.main(["embedded-model", "--root", str(folder.parent)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(folder)
    assert (folder / "model.safetensors").stat().st_mtime_ns == written
    (folder / ".complete").unlink()
    assert embedded_model_folder(folder.parent) == folder
    assert (folder / ".complete").is_file()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging left


def test_the_folder_is_readable_by_every_replica_and_written_again_when_damaged(
    base: tuple[Any, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Every file 0644 and the folder 0755 (transformers wrote the weights 0600); a folder
    marked written whose weights were cut in half since is not reused (it was, exit 0):
    it is written again, whole, with a warning naming the file."""
    import stat

    from actors.engines.checkpoint import verify_checkpoint

    _, folder = base
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as file:
        file.truncate(size // 2)
    with caplog.at_level("WARNING", logger="actors.models"):
        assert cli.main(["embedded-model", "--root", str(folder.parent)]) == 0
    assert f"{weights} is cut short: {size // 2:,} bytes" in caplog.text
    assert "writing it again" in caplog.text
    assert weights.stat().st_size == size
    verify_checkpoint(folder)
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644


@pytest.fixture(scope="module")
def exported(base: tuple[Any, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint exported at f32 through the real command line entry."""
    output = tmp_path_factory.mktemp("export") / "policy.f32.gguf"
    argv = ["export-gguf", str(base[1]), "--like", "embedded", "--output", str(output)]
    assert cli.main([*argv, "--type", "f32"]) == 0
    return output


def _logits(model: Any, tokens: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(tokens).logits


def _chat_ids(folder: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    return tokenizer, text, tokenizer(text, return_tensors="pt", add_special_tokens=False)


def _load_gguf(path: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )


def test_f32_export_loads_back_as_the_same_model(base: tuple[Any, Path], exported: Path) -> None:
    from gguf import GGUFReader, LlamaFileType

    model, folder = base
    _, _, ids = _chat_ids(folder)
    diff = (_logits(model, ids.input_ids) - _logits(_load_gguf(exported), ids.input_ids)).abs()
    assert float(diff.max()) < 1e-4

    reader = GGUFReader(exported)
    assert reader.fields["general.file_type"].contents() == LlamaFileType.ALL_F32
    assert "fine-tuned" in reader.fields["general.name"].contents()
    names = {t.name for t in reader.tensors}
    assert "output.weight" not in names  # tied: llama.cpp reads the head from token_embd
    assert len(reader.fields["tokenizer.ggml.merges"].data) > 40_000


def test_llama_cpp_greedy_continuation_equals_transformers(
    base: tuple[Any, Path], exported: Path
) -> None:
    """The engine the policy is served with, on the export: same chat prompt, same
    greedy tokens as transformers on the checkpoint."""
    from actors.engines.base import Sampling
    from actors.engines.llamacpp import LlamaCppConfig, LlamaCppEngine

    model, folder = base
    tokenizer, text, ids = _chat_ids(folder)
    output = model.generate(**ids, max_new_tokens=16, do_sample=False)
    new = output[0, ids.input_ids.shape[1] :].tolist()
    if tokenizer.eos_token_id in new:
        new = new[: new.index(tokenizer.eos_token_id)]
    expected = tokenizer.decode(new)

    async def serve() -> tuple[str, str]:
        config = LlamaCppConfig(model=str(exported), context_length=256, threads=1, parallel=1)
        engine = LlamaCppEngine(config)
        try:
            prompt = await engine.render_chat(PROMPT, continue_final=False)
            greedy = Sampling(max_tokens=16, stop=(), temperature=0.0, seed=0)
            return prompt, (await engine.complete(prompt, greedy)).text
        finally:
            await engine.close()

    prompt, continuation = asyncio.run(serve())
    assert prompt == text  # the chat template came across
    assert len(new) == 16 and continuation == expected


def test_untied_head_is_exported_as_its_own_tensor(base: tuple[Any, Path], tmp_path: Path) -> None:
    """A checkpoint whose LM head is not the embedding gets an ``output`` tensor, which
    llama.cpp (and transformers' GGUF loader) read as the head; neither tensor is
    permuted, so the file holds them as they are."""
    import numpy as np
    import torch
    from gguf import GGUFReader
    from safetensors import safe_open

    model, _ = base
    untied = tmp_path / "untied"
    embedding = model.get_input_embeddings().weight
    head = embedding.detach().clone() + 0.01 * torch.randn_like(embedding)
    model.config.tie_word_embeddings = False
    try:
        model.lm_head.weight = torch.nn.Parameter(head)
        model.save_pretrained(untied)
    finally:
        model.config.tie_word_embeddings = True
        model.lm_head.weight = embedding
    with safe_open(str(untied / "model.safetensors"), framework="pt") as saved:
        assert "lm_head.weight" in saved.keys()  # noqa: SIM118 - not a dict
    output = tmp_path / "untied.gguf"
    argv = ["export-gguf", str(untied), "--like", "embedded", "--output", str(output)]
    assert cli.main([*argv, "--type", "f32"]) == 0
    tensors = {t.name: t for t in GGUFReader(output).tensors}
    assert np.array_equal(tensors["output.weight"].data, head.numpy())
    assert np.array_equal(tensors["token_embd.weight"].data, embedding.detach().numpy())


def test_q8_0_keeps_norms_f32_and_quantizes_matrices(
    base: tuple[Any, Path], tmp_path: Path
) -> None:
    from gguf import GGMLQuantizationType, GGUFReader, LlamaFileType

    output = tmp_path / "policy.gguf"
    argv = ["export-gguf", str(base[1]), "--like", "embedded", "--output", str(output)]
    assert cli.main(argv) == 0  # the default type
    reader = GGUFReader(output)
    assert reader.fields["general.file_type"].contents() == LlamaFileType.MOSTLY_Q8_0
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_norm.weight"] == GGMLQuantizationType.F32
    assert types["output_norm.weight"] == GGMLQuantizationType.F32
    assert types["blk.0.attn_q.weight"] == GGMLQuantizationType.Q8_0
    assert types["token_embd.weight"] == GGMLQuantizationType.Q8_0
    assert cli.main(argv) == 2  # an existing file stays, unless --overwrite


def _tiny(folder: Path, architecture: str, vocab: int) -> Path:
    """A small random model of `architecture`, saved the way trainers save."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model_class = getattr(transformers, architecture)
    model_class(config).save_pretrained(folder)
    return folder


def _bgmcts(*argv: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "export-gguf", *argv],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("case", "names"),
    [
        ("missing", "checkpoint folder not found"),
        ("token-classifier", "architecture LlamaForTokenClassification cannot be exported"),
        ("small-vocab", "vocab size differs"),
        ("like-not-gguf", "not a GGUF file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(case: str, names: str, tmp_path: Path) -> None:
    like = "embedded"
    if case == "missing":
        checkpoint = tmp_path / "no-such-checkpoint"
    elif case == "token-classifier":
        checkpoint = _tiny(tmp_path / "prm", "LlamaForTokenClassification", 49152)
    elif case == "small-vocab":
        checkpoint = _tiny(tmp_path / "small", "LlamaForCausalLM", 1000)
        assert json.loads((checkpoint / "config.json").read_text())["vocab_size"] == 1000
    else:
        checkpoint = _tiny(tmp_path / "causal", "LlamaForCausalLM", 49152)
        (tmp_path / "base.gguf").write_text("not a model\n")
        like = str(tmp_path / "base.gguf")
    output = tmp_path / "out.gguf"
    done = _bgmcts(str(checkpoint), "--like", like, "--output", str(output))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], lines
    assert not output.exists()
