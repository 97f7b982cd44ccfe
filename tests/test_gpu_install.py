"""The GPU image's install resolves: the project with the `prm-gpu` extra (vLLM, and what
`bgmcts train-prm` needs beside it), as the Dockerfile installs it.

No GPU and no Docker here, so this asks pip's resolver (`pip install --dry-run`, which
reads the packages' metadata from the index and installs nothing) for the same set of
requirements: the base dependencies and every requirement the extra includes.  It needs
the package index, as every install does.  The `prm` extra (CPU torch 2.13, transformers
5.23) cannot resolve beside vLLM's pins, which is why training on a GPU node has this
extra of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.test_manifests import with_included_extras

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirements(extra: str) -> list[str]:
    """What `pip install '.[extra]'` asks for: the base dependencies and the requirements
    of the extra and of the project's own extras it includes (`with_included_extras`)."""
    own = f"{PROJECT['name']}["
    optional = PROJECT["optional-dependencies"]
    extras = sorted(with_included_extras({extra}))
    return [*PROJECT["dependencies"]] + [
        r for name in extras for r in optional[name] if not r.startswith(own)
    ]


def test_the_training_extra_leaves_torch_and_transformers_to_vllm() -> None:
    pinned = {r.split("==")[0].split("[")[0] for r in requirements("prm-gpu")}
    assert {"vllm", "gguf", "accelerate"} <= pinned
    assert not {"torch", "transformers"} & pinned  # vLLM's pins decide them


@pytest.mark.integration
def test_the_gpu_image_install_resolves(tmp_path: Path) -> None:
    listed = tmp_path / "requirements.txt"
    listed.write_text("\n".join(requirements("prm-gpu")) + "\n")
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    done = subprocess.run(
        [*pip, "--quiet", "--report", str(report), "-r", str(listed)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    vllm = next(r for r in PROJECT["optional-dependencies"]["gpu"] if r.startswith("vllm"))
    assert chosen["vllm"] == vllm.split("==")[1]
    # torch and transformers are present, chosen to agree with vLLM's own pins
    assert {"torch", "transformers", "accelerate", "gguf"} <= set(chosen)
