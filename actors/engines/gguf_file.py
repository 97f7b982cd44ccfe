"""Whether a GGUF file is whole, and what its header says, read before llama.cpp loads it.

A GGUF cut short (a copy or download interrupted) is refused by llama.cpp only inside the
replica that loads it, as "Failed to init server", after Ray and Serve have started; the
run then ends with Serve's "Deploying application policy failed".  `read_gguf` reads the
header here, before anything starts, and raises `GGUFError`, one line naming the file and
what is wrong: not GGUF, its header cut short, or its tensors reaching past the end of
the file.  The header also says what the run's checks need: the model's trained context
and the size of its KV cache per token (`GGUFInfo`).

The header is walked here rather than with `gguf.GGUFReader`: the reader builds a numpy
view per element of every array, and SmolLM2's three 49,152-entry vocabulary arrays took
it 4-9 s on this project's 2-core machine; walking them takes a fraction of a second.
The GGML types' sizes come from the `gguf` package (`GGML_QUANT_SIZES`), llama.cpp's own.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NESTING = 8  # arrays of arrays: llama.cpp writes none deeper than 2
# GGUF's value types (gguf.GGUFValueType): the fixed-size ones by struct format, then
# STRING (8) and ARRAY (9).
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """A file that is not one whole GGUF; the message is one line naming it."""


@dataclass(frozen=True)
class GGUFInfo:
    """What a whole GGUF's header says: its scalar metadata (arrays left out) and size."""

    path: Path
    metadata: dict[str, Any]
    tensors: int
    size: int

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def _number(self, key: str) -> int | None:
        value = self.metadata.get(f"{self.architecture}.{key}")
        return int(value) if isinstance(value, int | float) and value > 0 else None

    @property
    def trained_context(self) -> int | None:
        """The context the model was trained with (`<arch>.context_length`); None: unsaid."""
        return self._number("context_length")

    def kv_bytes_per_token(self, element_bytes: int = 2) -> int | None:
        """Bytes of llama.cpp's KV cache per token of context (its default cache type,
        f16: 2 bytes an element): per layer, the keys and values of every KV head; None
        where the header does not say (a recurrent model, a per-layer head count)."""
        layers = self._number("block_count")
        embedding = self._number("embedding_length")
        heads = self._number("attention.head_count")
        kv_heads = self._number("attention.head_count_kv") or heads
        if layers is None or embedding is None or heads is None or kv_heads is None:
            return None
        key = self._number("attention.key_length") or embedding // heads
        value = self._number("attention.value_length") or embedding // heads
        return layers * kv_heads * (key + value) * element_bytes


class _Header:
    """A cursor over the file's bytes; reading past the end is a GGUFError."""

    def __init__(self, path: Path, data: mmap.mmap, order: str) -> None:
        self.path, self.data, self.order, self.at = path, data, order, 0

    def take(self, count: int) -> bytes:
        end = self.at + count
        if count < 0 or end > len(self.data):
            raise GGUFError(
                f"{self.path} is cut short: its header runs past the end of the file "
                f"({len(self.data):,} bytes)"
            )
        chunk = self.data[self.at : end]
        self.at = end
        return chunk

    def count(self, least_bytes: int) -> int:
        """A count of items of at least `least_bytes` each; one the rest of the file
        cannot hold is refused before anything loops over it (garbage after the magic)."""
        count = int(self.number("Q"))
        if count * least_bytes > len(self.data) - self.at:
            self.take(count * least_bytes)  # raises: past the end
        return count

    def number(self, fmt: str) -> Any:
        return struct.unpack(self.order + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.number("Q")).decode("utf-8", errors="replace")

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.number(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY or depth > MAX_NESTING:
            what = "arrays nested too deep" if kind == _ARRAY else f"a value of unknown type {kind}"
            raise GGUFError(f"{self.path}: its header holds {what} (not GGUF)")
        item = self.number("I")
        count = self.count(struct.calcsize(_SCALARS[item]) if item in _SCALARS else 8)
        if item in _SCALARS:  # skipped whole: no check reads an array's values
            self.take(count * struct.calcsize(_SCALARS[item]))
        else:
            for _ in range(count):
                self.value(item, depth + 1)
        return None


def read_gguf(path: str | Path) -> GGUFInfo:
    """The header of the GGUF at `path`, the file checked whole; raises `GGUFError`."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            size = path.stat().st_size
            if size < 24:
                raise GGUFError(f"{path} is not a GGUF file ({size} bytes)")
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _read(path, data, size)
    except OSError as exc:
        raise GGUFError(f"{path} cannot be read ({exc.strerror or exc})") from None


def _read(path: Path, data: mmap.mmap, size: int) -> GGUFInfo:
    if data[:4] != MAGIC:
        raise GGUFError(f"{path} is not a GGUF file (it does not start with {MAGIC!r})")
    # a big-endian file's version reads as a huge number in little-endian
    order = "<" if struct.unpack("<I", data[4:8])[0] < 0x10000 else ">"
    header = _Header(path, data, order)
    header.take(4)
    version = header.number("I")
    if version < 2:
        raise GGUFError(f"{path} is GGUF version {version}, which llama.cpp no longer reads")
    # a tensor's info is at least 24 bytes, a key and its type 12
    tensors, keys = header.count(24), header.count(12)
    metadata: dict[str, Any] = {}
    for _ in range(keys):
        key = header.string()
        value = header.value(header.number("I"))
        if value is not None:
            metadata[key] = value
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment < 1:
        raise GGUFError(f"{path}: general.alignment is {alignment!r}, not a number of bytes")
    layout = [_tensor(header) for _ in range(tensors)]
    start = -(-header.at // alignment) * alignment  # the data section, aligned
    end = max((start + offset + length for offset, length in layout), default=start)
    if end > size:
        raise GGUFError(f"{path} is cut short: {size:,} bytes, its tensors need {end:,}")
    return GGUFInfo(path, metadata, tensors, size)


def _tensor(header: _Header) -> tuple[int, int]:
    """One tensor's data offset (in the data section) and its bytes (0 where its type is
    one this `gguf` package does not know: a newer llama.cpp's, not checked)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    name = header.string()
    rank = header.number("I")
    if rank > MAX_DIMS:
        raise GGUFError(f"{header.path}: tensor {name[:60]!r} has {rank} dimensions (not GGUF)")
    dims = [header.number("Q") for _ in range(rank)]
    kind, offset = header.number("I"), header.number("Q")
    try:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        return offset, 0
    elements = 1
    for dim in dims:
        elements *= dim
    return offset, elements // block * block_bytes


def gguf_fault(path: Path) -> str | None:
    """What keeps `path` from being one whole GGUF file (cut short, not GGUF), or None."""
    try:
        read_gguf(path)
    except GGUFError as exc:
        return str(exc)
    return None


__all__ = ["GGUFError", "GGUFInfo", "gguf_fault", "read_gguf"]
