"""Whether a Hugging Face model folder is whole, checked before anything loads it.

A checkpoint that is cut short, lost a tensor or learned NaNs does not fail where it is
named: transformers fills a missing classification head with random weights and scores
with it, a weight file cut short fails inside a Serve replica far from the config, and a
NaN weight gives NaN values that look like scores.  `verify_checkpoint` reads the folder
without loading the model and raises `CheckpointError`, one line naming the file and what
is wrong with it:

* ``config.json``: there, JSON, an object;
* the weights: safetensors (one file, or shards and their index), each file's header
  read and the file as long as its header says (a copy cut short is shorter); every
  tensor the index names is in its shard;
* the tensors the architecture needs, the head included, each of its shape: the model
  built from ``config.json`` on torch's meta device (no memory, no weights) says which;
  where that cannot be built here (no torch, an architecture transformers does not
  ship, quantized weights), a token classifier must at least hold its head;
* every floating-point value finite (read from the files' bytes: the exponent bits);
* the tokenizer's files, and the layout file `bgmcts train-prm` writes
  (`TrainedLayout`), well formed where they are there.

One function for every reader: the run's check before Ray starts
(`TransformersPRMConfig.check_model` and the vLLM pooling config's), the
engines when they load in their replica (so a folder changed after that check still
fails with its cause), `bgmcts train-prm --base` and `bgmcts export-gguf`.  A folder that
was checked and has not changed since (same files, sizes and modification times) is not
read again in the same process: a replica's engine and its config check share one pass.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.engines.step_layout import CheckpointLayoutError, TrainedLayout
from actors.errors import EngineError
from actors.json_file import first_line, read_json_object

INDEX = "model.safetensors.index.json"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
# The files a tokenizer is read from: its settings, and at least one vocabulary.
TOKENIZER_CONFIG = "tokenizer_config.json"
VOCABULARIES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
# The architectures a one-pass PRM checkpoint can have: a class per token (transformers'
# token classification heads) or Qwen2.5-Math-PRM's own head.
PRM_ARCHITECTURES = ("ForTokenClassification", "ForProcessRewardModel")
# Where those heads keep their weights (transformers' token classifiers and Qwen's PRM:
# `score`; BERT-like ones: `classifier`): what is looked for when the model cannot be
# built here to say exactly.
HEAD_NAMES = ("score", "classifier")

# safetensors' dtypes: bytes per element, and for the floating ones the bits that are all
# set in an infinity or a NaN (the exponent; float8 e4m3 has no infinity and one NaN
# pattern per sign, which the same test finds).
_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
_NOT_FINITE = {
    "F8_E5M2": 0x7C,
    "F8_E4M3": 0x7F,
    "F16": 0x7C00,
    "BF16": 0x7F80,
    "F32": 0x7F800000,
    "F64": 0x7FF0000000000000,
}
_HEADER_LIMIT = 100 * 2**20  # safetensors' own bound on a header
_CHUNK = 2**24  # elements looked at at once when checking values (64 MiB of float32)


class CheckpointError(ValueError):
    """A model folder that cannot be loaded whole; the message is one line naming the
    folder or file and what is wrong (callers prefix the option or field it came from)."""


@dataclass(frozen=True)
class Tensor:
    """One tensor as a safetensors header describes it."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # the first byte of its data in `file`
    end: int


@dataclass(frozen=True)
class Checkpoint:
    """What `verify_checkpoint` read: the config, the tensors, the trained layout if any."""

    folder: Path
    config: dict[str, Any]
    tensors: dict[str, Tensor]
    layout: TrainedLayout | None  # None: a checkpoint `bgmcts train-prm` did not write


_verified: dict[tuple[Any, ...], Checkpoint] = {}


def verify_checkpoint(
    folder: str | Path,
    *,
    token_classifier: bool = False,
    tokenizer: bool = True,
    architecture: bool = True,
) -> Checkpoint:
    """Check `folder` whole (see the module docstring); raises `CheckpointError`.

    `token_classifier`: it must be a two-class token classifier (a one-pass PRM) and
    hold its head.  `tokenizer`: its tokenizer files must be there too.
    `architecture`: False leaves out the tensors the architecture needs (building the
    model on the meta device imports torch and transformers: tens of seconds on a busy
    machine), for a folder this project wrote whole itself and checks for damage since
    (`actors.models.embedded_model_folder`): every file is still read whole.
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a folder here")
    key = (path.resolve(), token_classifier, tokenizer, architecture, _fingerprint(path))
    known = _verified.get(key)
    if known is not None:
        return known
    config = read_model_config(path)
    if token_classifier:
        _check_classifier(path, config)
    if tokenizer:
        _check_tokenizer(path)
    layout = _read_layout(path)
    tensors = read_tensors(path)
    if architecture:
        _check_needed(path, config, tensors, token_classifier)
    _check_finite(tensors)
    checked = Checkpoint(path, config, tensors, layout)
    _verified[key] = checked
    return checked


def verify_prm(folder: str | Path) -> Checkpoint:
    """`verify_checkpoint` of a one-pass PRM served from `engine.model`: what the run's
    check and the engines raise, one line on that field (`EngineError`)."""
    try:
        return verify_checkpoint(folder, token_classifier=True)
    except CheckpointError as exc:
        raise EngineError(f"engine.model: {exc}", field="engine.model") from None


def _fingerprint(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file of the folder with its size and modification time: what changes when a
    file is rewritten, cut or replaced."""
    found = []
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise CheckpointError(f"{folder} cannot be read ({exc.strerror or exc})") from None
    for entry in entries:
        try:
            stat = entry.stat()
        except OSError:
            continue
        found.append((entry.name, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def _json_object(path: Path, what: str) -> dict[str, Any]:
    """A checkpoint file that must hold an object (`what`), refused as a CheckpointError."""
    return read_json_object(path, what, CheckpointError)


def read_model_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json as an object; `architectures`, when given, a list of names."""
    path = folder / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{folder} has no {CONFIG} (not a checkpoint)")
    config = _json_object(path, "a model config")
    architectures = config.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise CheckpointError(f"{path}: architectures is not a list of class names")
    return config


def positions(config: dict[str, Any]) -> int | None:
    """The positions a model config says its model has (`max_position_embeddings`, or the
    older names of it); None where it says none."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def position_ceiling(config: dict[str, Any]) -> int | None:
    """The longest sequence a model config allows: its `positions`, times the factor of a
    RoPE scaling it declares (YaRN and the like stretch the trained positions; vLLM reads
    the factor the same way).  Generous where a scaling's kind would allow less: an engine
    refuses what this lets through, never the other way round."""
    trained = positions(config)
    if trained is None:
        return None
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(factor, int | float) and not isinstance(factor, bool) and factor > 1:
        return int(trained * factor)
    return trained


def _check_classifier(folder: Path, config: dict[str, Any]) -> None:
    """A two-class token classifier (bad step, good step)."""
    architectures = config.get("architectures") or []
    if not any(a.endswith(PRM_ARCHITECTURES) for a in architectures):
        kind = "/".join(architectures) or "model of no stated architecture"
        raise CheckpointError(
            f"{folder} is a {kind}, not a token classifier "
            "(*ForTokenClassification or *ForProcessRewardModel)"
        )
    # transformers writes id2label only when num_labels is not its default of 2
    if "id2label" in config:
        labels: Any = config["id2label"]
        labels = len(labels) if isinstance(labels, dict) else None
    else:
        labels = config.get("num_labels", 2)
    if labels != 2:
        raise CheckpointError(
            f"{folder} has {labels} labels; a PRM has 2 (bad step, good step)"
            if isinstance(labels, int)
            else f"{folder / CONFIG}: id2label / num_labels is not a number of labels"
        )


def _check_tokenizer(folder: Path) -> None:
    """The tokenizer's settings and one vocabulary file, each readable."""
    settings = folder / TOKENIZER_CONFIG
    if not settings.is_file():
        raise CheckpointError(f"{folder} has no tokenizer ({TOKENIZER_CONFIG} is missing)")
    _json_object(settings, "a tokenizer config")
    vocabularies = [folder / name for name in VOCABULARIES if (folder / name).is_file()]
    if not vocabularies:
        raise CheckpointError(
            f"{folder} has no tokenizer vocabulary (none of {', '.join(VOCABULARIES)})"
        )
    for path in vocabularies:
        if path.suffix == ".json":
            _json_object(path, "a vocabulary")


def _read_layout(folder: Path) -> TrainedLayout | None:
    """The `TrainedLayout` of a checkpoint `bgmcts train-prm` wrote (None for another)."""
    try:
        return TrainedLayout.read(folder)
    except CheckpointLayoutError as exc:
        raise CheckpointError(str(exc)) from None


# -- the weight files ---------------------------------------------------------------------


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of the folder: the shards its index names, or the one file."""
    index = folder / INDEX
    if index.is_file():
        weight_map = _json_object(index, "a weights index").get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) and "/" not in v and v for v in weight_map.values()
        ):
            raise CheckpointError(f"{index}: weight_map is not a map of tensor to file name")
        return [folder / name for name in sorted(set(weight_map.values()))]
    if (folder / WEIGHTS).is_file():
        return [folder / WEIGHTS]
    others = sorted(p.name for p in folder.glob("*.bin")) or sorted(
        p.name for p in folder.glob("*.safetensors")
    )
    if others:
        raise CheckpointError(
            f"{folder} has no {WEIGHTS} (nor its index), only {', '.join(others[:3])}: save "
            "the checkpoint as safetensors (save_pretrained's default), which can be "
            "checked before it is loaded"
        )
    raise CheckpointError(f"{folder} has no weights ({WEIGHTS} is missing)")


def read_tensors(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's weight files, each file checked whole."""
    tensors: dict[str, Tensor] = {}
    for path in weight_files(folder):
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (the weights index names it)")
        tensors.update(read_header(path))
    index = folder / INDEX
    if index.is_file():
        weight_map = _json_object(index, "a weights index")["weight_map"]
        for name, file in weight_map.items():
            if name not in tensors or tensors[name].file.name != file:
                raise CheckpointError(f"{folder / file} has no tensor {name}, which {INDEX} names")
    return tensors


def read_header(path: Path) -> dict[str, Tensor]:
    """The tensors one safetensors file's header describes; the file must be exactly as
    long as the header says (its data cut short, or more than it, is refused)."""
    try:
        with path.open("rb") as file:
            size = path.stat().st_size
            head = file.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if length is None or length > min(size - 8, _HEADER_LIMIT):
                raise CheckpointError(
                    f"{path} is cut short or not safetensors ({size} bytes, no whole header)"
                )
            raw = file.read(length)
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CheckpointError(f"{path} is not safetensors (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} is not safetensors (its header is not an object)")
    base = 8 + length
    tensors: dict[str, Tensor] = {}
    end_of_data = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensor = _entry(path, name, entry, base)
        tensors[name] = tensor
        end_of_data = max(end_of_data, tensor.end - base)
    if size < base + end_of_data:
        raise CheckpointError(
            f"{path} is cut short: {size:,} bytes, its header describes {base + end_of_data:,}"
        )
    if size > base + end_of_data:
        raise CheckpointError(
            f"{path} is {size:,} bytes, {size - base - end_of_data:,} more than its header "
            "describes (not one whole safetensors file)"
        )
    return tensors


def _entry(path: Path, name: str, entry: Any, base: int) -> Tensor:
    bad = f"{path}: the header's entry for {name} is not a tensor"
    if not isinstance(entry, dict):
        raise CheckpointError(bad)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in _BYTES or not isinstance(shape, list) or not isinstance(offsets, list):
        raise CheckpointError(bad)
    if not all(isinstance(n, int) and n >= 0 for n in (*shape, *offsets)) or len(offsets) != 2:
        raise CheckpointError(bad)
    start, end = offsets
    if end - start != math.prod(shape) * _BYTES[dtype]:
        raise CheckpointError(f"{path}: {name}'s data does not match its shape {shape}")
    return Tensor(path, dtype, tuple(shape), base + start, base + end)


# -- the tensors the architecture needs -----------------------------------------------------


def _check_needed(
    folder: Path, config: dict[str, Any], tensors: dict[str, Tensor], token_classifier: bool
) -> None:
    """Every tensor the model built from config.json loads, of its shape; a token
    classifier's head at least where the model cannot be built here."""
    needed = needed_tensors(folder, config)
    if needed is None:
        if token_classifier and not any(n.split(".")[0] in HEAD_NAMES for n in tensors):
            raise CheckpointError(
                f"{folder} has no classification head in its weights (no tensor under "
                f"{' or '.join(HEAD_NAMES)}): loaded, it would score with random weights"
            )
        return
    prefix, groups = needed
    missing: list[str] = []
    for group in groups:
        found = [(name, shape, _in_file(name, prefix, tensors)) for name, shape in group]
        present = [(name, shape, t) for name, shape, t in found if t is not None]
        if not present:
            missing.append(group[0][0])
            continue
        for name, shape, tensor in present:
            if tensor.shape != shape:
                raise CheckpointError(
                    f"{tensor.file}: {name} is {list(tensor.shape)}, but {CONFIG} gives it "
                    f"{list(shape)} (its sizes do not match the weights)"
                )
    if missing:
        head = [n for n in missing if not n.startswith(f"{prefix}.")]
        what = f"its head ({', '.join(head)})" if head else ", ".join(missing[:3])
        more = f" and {len(missing) - 3} more" if not head and len(missing) > 3 else ""
        raise CheckpointError(
            f"{folder} lacks {what}{more} in its weights, which its architecture needs: "
            "loaded, those would be random"
        )


def _in_file(name: str, prefix: str, tensors: dict[str, Tensor]) -> Tensor | None:
    """`name` in the file, also as a checkpoint of the bare base model names it (without
    the base model's prefix), which transformers loads into the wrapped model."""
    if name in tensors:
        return tensors[name]
    if prefix and name.startswith(f"{prefix}."):
        return tensors.get(name[len(prefix) + 1 :])
    return None


def needed_tensors(
    folder: Path, config: dict[str, Any]
) -> tuple[str, list[list[tuple[str, tuple[int, ...]]]]] | None:
    """The base model's prefix and the parameters of the model config.json describes, as
    groups of names sharing one tensor (tied weights: one of each group must be there),
    with their shapes; None where that model cannot be built here."""
    architectures = config.get("architectures") or []
    if len(architectures) != 1 or "quantization_config" in config:
        return None  # quantized tensors have other names and shapes than the model's
    try:
        import torch
        import transformers
    except ImportError:
        return None
    model_class = getattr(transformers, architectures[0], None)
    if model_class is None:
        return None  # remote code (Qwen2.5-Math-PRM's head): not built here
    try:
        from transformers import AutoConfig
        from transformers.utils import logging as transformers_logging

        verbosity = transformers_logging.get_verbosity()
        # a model built to be measured, not used: its warnings are noise
        transformers_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        try:
            model_config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
            with torch.device("meta"):
                model = model_class(model_config)
            if getattr(model_config, "tie_word_embeddings", False):
                model.tie_weights()
        finally:
            transformers_logging.set_verbosity(verbosity)
    except Exception as exc:  # a config transformers cannot build a model from
        raise CheckpointError(
            f"{folder / CONFIG} does not describe a {architectures[0]}: {first_line(exc)}"
        ) from None
    ignored = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_missing", None) or ()]
    groups: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if any(p.search(name) for p in ignored):
            continue
        groups.setdefault(id(parameter), []).append((name, tuple(parameter.shape)))
    return str(getattr(model, "base_model_prefix", "") or ""), list(groups.values())


# -- the values -----------------------------------------------------------------------------


def _check_finite(tensors: dict[str, Tensor]) -> None:
    """Every floating-point value finite, read from the bytes (no framework, no copies
    beyond a chunk at a time)."""
    import numpy as np

    by_file: dict[Path, list[tuple[str, Tensor]]] = {}
    for name, tensor in tensors.items():
        if tensor.dtype in _NOT_FINITE and tensor.end > tensor.start:
            by_file.setdefault(tensor.file, []).append((name, tensor))
    for path, named in by_file.items():
        data = np.memmap(path, dtype=np.uint8, mode="r")
        try:
            for name, tensor in named:
                bad = _not_finite(data, tensor)
                if bad:
                    raise CheckpointError(
                        f"{path}: {name} holds {bad:,} values that are NaN or infinite"
                    )
        finally:
            del data


def _not_finite(data: Any, tensor: Tensor) -> int:
    import numpy as np

    width = _BYTES[tensor.dtype]
    kind = np.dtype(f"<u{width}")
    mask = kind.type(_NOT_FINITE[tensor.dtype])
    count = (tensor.end - tensor.start) // width
    bad = 0
    for first in range(0, count, _CHUNK):
        n = min(_CHUNK, count - first)
        values = np.frombuffer(data, dtype=kind, count=n, offset=tensor.start + first * width)
        bad += int(np.count_nonzero((values & mask) == mask))
    return bad


__all__ = [
    "CONFIG",
    "HEAD_NAMES",
    "PRM_ARCHITECTURES",
    "Checkpoint",
    "CheckpointError",
    "Tensor",
    "needed_tensors",
    "position_ceiling",
    "positions",
    "read_header",
    "read_model_config",
    "read_tensors",
    "verify_checkpoint",
    "verify_prm",
    "weight_files",
]
