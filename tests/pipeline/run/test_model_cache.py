"""`bgmcts prefetch-models`: the configs' Hub models and dataset, fetched into HF_HOME
from a real HTTP Hub (tests/hub_server.py), so a cluster's GPU pods find them there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from huggingface_hub import HfApi

from jobs import prefetch_models
from pipeline.config import load_run_config
from pipeline.run.model_cache import HubRepo, hub_repos
from tests.hub_server import HubServer

REPO = Path(__file__).resolve().parents[3]


def anchored(node: Any) -> Any:
    """The config with its repository-relative file paths made absolute."""
    if isinstance(node, dict):
        return {key: anchored(value) for key, value in node.items()}
    if isinstance(node, str) and node.startswith("configs/"):
        return str(REPO / node)
    return node


def config_with_models(tmp_path: Path, policy: str, scorer: str) -> Path:
    """configs/local-vllm.yaml with the two engines' models replaced."""
    config = anchored(yaml.safe_load((REPO / "configs" / "local-vllm.yaml").read_text()))
    config["policy"]["engine"]["model"] = policy
    config["scorer"]["engine"]["model"] = scorer
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_shipped_gpu_configs_name_their_models() -> None:
    configs = ["nightly.yaml", "math500-qwen2.5-7b.yaml", "math500-qwen2.5-7b-prm.yaml"]
    repos = hub_repos(load_run_config(REPO / "configs" / name) for name in configs)
    assert repos == [
        HubRepo("GenPRM/GenPRM-7B", "model"),
        HubRepo("Qwen/Qwen2.5-7B-Instruct", "model"),
        HubRepo("Qwen/Qwen2.5-Math-PRM-7B", "model"),
        HubRepo("nlile/hendrycks-MATH-benchmark", "dataset"),
    ]


def test_local_folders_and_the_embedded_model_are_not_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "org" / "ckpt").mkdir(parents=True)  # a local folder that looks like an id
    monkeypatch.chdir(tmp_path)
    config = config_with_models(tmp_path, "embedded", "org/ckpt")
    assert hub_repos([load_run_config(config)]) == []
    (tmp_path / "org" / "ckpt").rmdir()  # gone: now it can only be a Hub id
    assert hub_repos([load_run_config(config)]) == [HubRepo("org/ckpt", "model")]


def test_prefetch_fills_the_cache_from_the_hub(
    hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = HfApi(endpoint=hub.endpoint, token="hf_test")
    for repo in ("tiny-org/policy", "tiny-org/genprm"):
        api.create_repo(repo)
        api.upload_file(
            path_or_fileobj=b'{"model_type": "llama"}', path_in_repo="config.json", repo_id=repo
        )
    config = config_with_models(tmp_path, "tiny-org/policy", "tiny-org/genprm")

    assert prefetch_models.main([str(config)]) == 0

    out = capsys.readouterr().out
    for repo in ("tiny-org/policy", "tiny-org/genprm"):
        line = next(x for x in out.splitlines() if x.startswith(f"cached {repo}: "))
        folder = Path(line.split(": ", 1)[1])
        assert (folder / "config.json").read_text() == '{"model_type": "llama"}'
        assert folder.is_relative_to(os.environ["HF_HOME"])  # where the replicas look


def test_a_model_the_hub_does_not_have_is_one_line_and_exit_2(
    hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_with_models(tmp_path, "tiny-org/missing", "embedded")

    assert prefetch_models.main([str(config)]) == 2

    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "tiny-org/missing" in err[0]
