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


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line (beside huggingface_hub's own progress bars, where it shows
    them), with no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("under", ["", "sub"])
def test_an_hf_home_that_is_a_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, under: str
) -> None:
    """It was a raw NotADirectoryError with exit 1; nothing is asked of the Hub."""
    import huggingface_hub.constants as hf_constants

    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    home = afile / under if under else afile
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(home / "hub"))
    config = config_with_models(tmp_path, "tiny-org/policy", "embedded")
    assert prefetch_models.main([str(config)]) == 2
    assert _one_error_line(capsys) == (
        f"error: HF_HOME (the Hugging Face cache): {afile} is a file, not a folder"
    )
    assert prefetch_models.main([str(config), "--list"]) == 0  # lists, writes nothing


def test_an_hf_hub_cache_that_cannot_be_made_names_its_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """/proc takes no new folders, not even from root (the tests may run as root)."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_CACHE", "/proc/bgmcts-hub")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", "/proc/bgmcts-hub")
    config = config_with_models(tmp_path, "tiny-org/policy", "embedded")
    assert prefetch_models.main([str(config)]) == 2
    assert _one_error_line(capsys).startswith(
        "error: HF_HUB_CACHE (the Hugging Face cache): /proc/bgmcts-hub cannot be made ("
    )


def test_a_cache_that_fails_during_the_download_is_one_line_and_exit_2(
    hub: HubServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cache is there, but the repository's own folder in it is a file (as a full disk
    or a change under the download fails it): one line naming the path, exit 2."""
    api = HfApi(endpoint=hub.endpoint, token="hf_test")
    api.create_repo("tiny-org/policy")
    api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id="tiny-org/policy")
    cache = Path(os.environ["HF_HUB_CACHE"])
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "models--tiny-org--policy").write_text("in the way\n")
    config = config_with_models(tmp_path, "tiny-org/policy", "embedded")
    assert prefetch_models.main([str(config)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: model tiny-org/policy: HF_HUB_CACHE: "), line
    assert str(cache / "models--tiny-org--policy") in line and "cannot be written" in line
