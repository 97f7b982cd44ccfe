"""Export a fine-tuned Hugging Face checkpoint to GGUF, for the llama.cpp policy engine.

    bgmcts export-gguf checkpoints/sft --like embedded --output policies/sft.q8_0.gguf
    python -m jobs.export_gguf CHECKPOINT --like base.gguf --output FILE.gguf --type f16

(`jobs.export_gguf` is the command line; the export is here.)

The checkpoint (a folder: ``config.json`` and ``model.safetensors``, or shards with
their index) is a llama-architecture causal LM fine-tuned from the model in the
``--like`` GGUF (``embedded``: the bundled SmolLM2-135M-Instruct).  Fine-tuning changes
the weights and nothing else, so the new file takes every piece of metadata - the
hyper-parameters, the tokenizer's vocabulary, merges and special ids, the chat template
- from the ``--like`` file, except the fields that say how the tensors are stored, and
it takes every tensor from the checkpoint, named and laid out as llama.cpp reads them.
The engine then serves it with ``policy.engine: {kind: llamacpp, model: FILE.gguf}``.

``--type``: ``q8_0`` (default: the fastest to decode of the three here, and a quarter
of the size of f32, at 8 bits a weight), ``f16`` or ``f32`` (exact: what the tests
compare).  Norm weights always stay f32, as llama.cpp wants them.

An input that is wrong - a checkpoint folder missing or not a llama causal LM, one whose
sizes differ from the ``--like`` model, an output file that exists without
``--overwrite`` - raises one line (`InputError`), which the command turns into exit
status 2.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

ARCHITECTURE = "LlamaForCausalLM"
TYPES = ("f32", "f16", "q8_0")
DEFAULT_TYPE = "q8_0"

# (config.json key, GGUF key under the architecture, what it is): the sizes a fine-tune
# keeps; a checkpoint that differs was not fine-tuned from the --like model.
_SIZES = (
    ("vocab_size", "vocab_size", "vocab size"),
    ("hidden_size", "embedding_length", "hidden size"),
    ("num_hidden_layers", "block_count", "layer count"),
    ("num_attention_heads", "attention.head_count", "attention head count"),
    ("num_key_value_heads", "attention.head_count_kv", "key-value head count"),
    ("intermediate_size", "feed_forward_length", "feed-forward size"),
)
# GGUF keys the new file sets itself: the writer adds the architecture, and these
# describe the tensors of the --like file, not of the export.
_OWN_KEYS = ("general.architecture", "general.file_type", "general.quantization_version")


def export_checkpoint(
    checkpoint: Path, like: str, output: Path, kind: str = DEFAULT_TYPE, *, overwrite: bool = False
) -> tuple[int, Path]:
    """Write `checkpoint` as the GGUF `output` (`kind`: one of TYPES), metadata and
    tokenizer from the `like` GGUF; returns the tensors written and the `like` file."""
    _check_output(output, overwrite)
    config = read_config(checkpoint)
    _check_whole(checkpoint)
    like_path = resolve_like(like)
    return export(checkpoint, like_path, output, kind, config=config), like_path


def _check_whole(checkpoint: Path) -> None:
    """The checkpoint's weights whole, of the shapes its config.json gives, every value
    finite (`actors.engines.checkpoint.verify_checkpoint`; the tokenizer comes from --like)."""
    from actors.engines.checkpoint import CheckpointError, verify_checkpoint
    from pipeline.errors import InputError

    try:
        verify_checkpoint(checkpoint, tokenizer=False)
    except CheckpointError as exc:
        raise InputError(str(exc)) from None


def resolve_like(like: str) -> Path:
    """`embedded` (the bundled model, as the llama.cpp engine resolves it) or a file."""
    from actors.models import embedded_model_path
    from pipeline.errors import InputError

    if like == "embedded":
        return embedded_model_path()
    path = Path(like).expanduser()
    if not path.is_file():
        raise InputError(f"--like: GGUF file not found: {path}")
    return path


def read_config(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's config.json, which must describe a llama causal LM."""
    from actors.engines.checkpoint import CheckpointError, read_model_config
    from pipeline.errors import InputError

    if not checkpoint.is_dir():
        raise InputError(f"checkpoint folder not found: {checkpoint}")
    path = checkpoint / "config.json"
    try:
        config = read_model_config(checkpoint)
    except CheckpointError as exc:
        raise InputError(str(exc)) from None
    architectures = config.get("architectures") or [config.get("model_type", "unknown")]
    if architectures != [ARCHITECTURE]:
        raise InputError(
            f"{path}: architecture {', '.join(map(str, architectures))} cannot be exported "
            f"(only {ARCHITECTURE}: a llama-architecture causal LM)"
        )
    return dict(config)


def check_sizes(config: dict[str, Any], reader: GGUFReader, like: Path) -> None:
    """Every size a fine-tune keeps must equal the --like model's, else its metadata
    and tokenizer would describe another model."""
    from pipeline.errors import InputError

    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise InputError(f"--like {like}: architecture {arch!r}, not llama")
    for config_key, gguf_key, what in _SIZES:
        theirs = _field(reader, f"llama.{gguf_key}")
        if theirs is None and config_key == "vocab_size":
            theirs = len(reader.fields["tokenizer.ggml.tokens"].data)
        ours = config.get(config_key)
        if ours is None and config_key == "num_key_value_heads":
            ours = config.get("num_attention_heads")
        if theirs is not None and ours != theirs:
            raise InputError(
                f"{what} differs: the checkpoint's config.json has {config_key}={ours}, "
                f"--like {like.name} has {theirs} (export with the GGUF of the model it was "
                "fine-tuned from)"
            )


def export(
    checkpoint: Path,
    like: Path,
    output: Path,
    kind: str = DEFAULT_TYPE,
    *,
    config: dict[str, Any] | None = None,
) -> int:
    """Write `output` from the checkpoint's tensors and the --like file's metadata; the
    number of tensors written.  The file appears whole or not at all (written next to it
    under another name, then renamed)."""
    from gguf import GGUFReader, GGUFWriter

    from pipeline.errors import InputError

    config = config if config is not None else read_config(checkpoint)
    try:
        reader = GGUFReader(like)
    except (ValueError, OSError) as exc:
        raise InputError(f"--like {like}: not a GGUF file ({exc})") from exc
    check_sizes(config, reader, like)
    tensors = _tensors(checkpoint, config, reader, kind)
    output.parent.mkdir(parents=True, exist_ok=True)
    # a name of this process's own beside the output (opened as any new file, so with
    # the usual permissions), renamed over it once complete
    partial = output.with_name(f".{output.name}.{os.getpid()}.part")
    try:
        writer = GGUFWriter(partial, arch="llama")
        _copy_metadata(reader, writer, kind, checkpoint)
        for name, array, raw_type in tensors:
            writer.add_tensor(name, array, raw_dtype=raw_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, output)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return len(tensors)


def _check_output(output: Path, overwrite: bool) -> None:
    """The output file may be written: not a folder, not there unless --overwrite, its
    folder made now (one that cannot be is bad input before the export, not after)."""
    from pipeline.errors import InputError

    if output.is_dir():
        raise InputError(f"--output: {output} is a folder, not a .gguf file")
    if output.exists() and not overwrite:
        raise InputError(f"--output: {output} exists (pass --overwrite to replace it)")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"--output: {output} cannot be written ({exc.strerror or exc}: {exc.filename})"
        ) from None
    if not os.access(output.parent, os.W_OK):
        raise InputError(f"--output: {output} cannot be written (its folder is not writable)")


def _field(reader: GGUFReader, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _copy_metadata(reader: GGUFReader, writer: GGUFWriter, kind: str, checkpoint: Path) -> None:
    """Every key of the --like file but those about its own tensors, then the new ones."""
    from gguf import GGML_QUANT_VERSION, GGUFValueType, LlamaFileType

    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in _OWN_KEYS:
            continue  # the header (version, counts) is the writer's own
        if key == "general.name":
            writer.add_name(f"{field.contents()} (fine-tuned: {checkpoint.name})")
            continue
        value_type = field.types[0]
        sub_type = None
        if value_type == GGUFValueType.ARRAY:
            sub_type = field.types[-1]
            if len(field.types) != 2:
                raise ValueError(f"{key}: nested arrays are not copied")
        writer.add_key_value(key, field.contents(), value_type, sub_type=sub_type)
    file_type = {
        "f32": LlamaFileType.ALL_F32,
        "f16": LlamaFileType.MOSTLY_F16,
        "q8_0": LlamaFileType.MOSTLY_Q8_0,
    }[kind]
    writer.add_file_type(int(file_type))
    writer.add_quantization_version(GGML_QUANT_VERSION)


# a tensor to write: its GGUF name, its data, its GGML type (None: its numpy dtype's)
_Tensor = tuple[str, "np.ndarray", "GGMLQuantizationType | None"]


def _tensors(
    checkpoint: Path, config: dict[str, Any], reader: GGUFReader, kind: str
) -> list[_Tensor]:
    """(GGUF name, data, stored type) of every tensor, in the --like file's order.

    Each --like tensor must come from the checkpoint, with the same shape; ``output``
    (the LM head) comes only from a checkpoint whose head is its own, not the embedding
    (SmolLM2 ties them: llama.cpp then reads the head from ``token_embd``).
    """
    from pipeline.errors import InputError

    weights = dict(_renamed(checkpoint, config))
    if config.get("tie_word_embeddings", False):
        weights.pop("output.weight", None)  # a copy of the embedding some savers keep
    elif "output.weight" not in weights:
        raise InputError(f"{checkpoint}: tie_word_embeddings is false, yet it has no lm_head")
    picked: list[_Tensor] = []
    for tensor in reader.tensors:
        if tensor.name == "output.weight" and "output.weight" not in weights:
            continue  # the base had its own head, the fine-tune ties it: none to write
        if tensor.name == "rope_freqs.weight" and tensor.name not in weights:
            # computed from the rope settings, not trained: the --like file's own
            picked.append((tensor.name, tensor.data, tensor.tensor_type))
            continue
        array = weights.pop(tensor.name, None)
        if array is None:
            raise InputError(f"{checkpoint} has no tensor for {tensor.name}, which --like has")
        expected = tuple(int(n) for n in reversed(tensor.shape))
        if array.shape != expected:
            raise InputError(
                f"{checkpoint}: {tensor.name} has shape {array.shape}, --like {expected}"
            )
        picked.append((tensor.name, *stored(array, kind)))
    head = weights.pop("output.weight", None)
    if head is not None:  # untied here, tied in the base
        picked.append(("output.weight", *stored(head, kind)))
    if weights:
        raise InputError(
            f"{checkpoint}: tensors with no place in the llama layout: {sorted(weights)}"
        )
    return picked


def stored(array: np.ndarray, kind: str) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    """The data and GGML type (None: the numpy dtype's) a float32 tensor is written as.

    Vectors (norm weights) stay f32, which llama.cpp expects; q8_0 packs rows in blocks
    of 32, so a matrix whose rows do not split into whole blocks falls back to f16.
    """
    import numpy as np
    from gguf import GGMLQuantizationType, quants
    from gguf.constants import GGML_QUANT_SIZES

    if array.ndim == 1 or kind == "f32":
        return array.astype(np.float32, copy=False), None
    block = GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][0]
    if kind == "q8_0" and array.shape[-1] % block == 0:
        q8 = GGMLQuantizationType.Q8_0
        return quants.quantize(array, q8), q8
    return array.astype(np.float16), None


def _renamed(checkpoint: Path, config: dict[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    """The checkpoint's tensors under their GGUF names, as float32, Q and K permuted."""
    from gguf import MODEL_ARCH, get_tensor_name_map

    from pipeline.errors import InputError

    names = get_tensor_name_map(MODEL_ARCH.LLAMA, int(config["num_hidden_layers"]))
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    for hf_name, array in _read_safetensors(checkpoint):
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue  # a buffer older checkpoints saved; llama.cpp computes it
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise InputError(f"{checkpoint}: tensor {hf_name} has no llama GGUF name")
        if name.endswith(".attn_q.weight"):
            array = interleave_rope_halves(array, heads)
        elif name.endswith(".attn_k.weight"):
            array = interleave_rope_halves(array, kv_heads)
        yield name, array


def interleave_rope_halves(weight: np.ndarray, heads: int) -> np.ndarray:
    """A Q or K projection's output rows in the order llama.cpp's llama rope wants.

    Transformers rotates the two halves of each head's dimensions against each other
    (dimension i with i + d/2); llama.cpp's llama rope rotates neighbours (2i with
    2i + 1).  So within each head the rows of the two halves are interleaved: row i of
    the first half, then row i of the second.  Transformers' GGUF loader
    (`LlamaTensorProcessor._reverse_permute_weights`) undoes exactly this on load.
    """
    rows = weight.shape[0]
    half = rows // heads // 2
    by_half = weight.reshape(heads, 2, half, *weight.shape[1:])
    return by_half.swapaxes(1, 2).reshape(weight.shape)


def _read_safetensors(checkpoint: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the checkpoint's safetensors file(s), as float32 numpy arrays
    (through torch: numpy has no bfloat16, which trainers often save in)."""
    import torch
    from safetensors import safe_open

    from pipeline.errors import InputError

    index = checkpoint / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = [checkpoint / name for name in sorted(set(weight_map.values()))]
    elif (checkpoint / "model.safetensors").is_file():
        files = [checkpoint / "model.safetensors"]
    else:
        raise InputError(
            f"{checkpoint} has no model.safetensors (save the checkpoint as safetensors)"
        )
    for path in files:
        with safe_open(str(path), framework="pt") as tensors:
            for name in tensors.keys():  # noqa: SIM118 - a safe_open handle, not a dict
                yield name, tensors.get_tensor(name).to(torch.float32).numpy()
