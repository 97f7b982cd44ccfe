"""Every config in configs/ validates, and every `configs/<name>.yaml` the README and docs
name is shipped (a recipe that points at a missing config fails here, not on a cluster)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config import load_config, load_run_config
from pipeline.evaluation.config import EvalConfig
from pipeline.problems.decontamination import DecontaminationConfig
from pipeline.problems.sources import JsonlSource

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path: Path) -> None:
    if path.name.startswith("eval-"):
        load_config(path, EvalConfig)
    else:
        load_run_config(path)


def test_every_config_the_docs_name_is_shipped() -> None:
    named = {}
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for name in re.findall(r"configs/([\w.-]+\.yaml)", doc.read_text(encoding="utf-8")):
            named.setdefault(name, doc.relative_to(REPO))
    # a config a test writes for itself, and the README's placeholder for "your config"
    for example in ("rehearsal.yaml", "other.yaml"):
        named.pop(example, None)
    missing = {
        name: str(doc) for name, doc in named.items() if not (REPO / "configs" / name).is_file()
    }
    assert not missing, missing


def test_the_data_value_recipe_trains_on_math_train_with_default_decontamination() -> None:
    """docs/data-value.md's GPU recipe: the MATH train split, checked against MATH500 and
    GSM8K test (the default), so the rows can train a model evaluated on MATH500."""
    config = load_run_config(REPO / "configs" / "math-train-r1.yaml")
    assert isinstance(config.source, JsonlSource)
    assert config.source.path == Path("data/math-train.jsonl")
    assert config.records.decontamination == DecontaminationConfig()
    assert set(config.records.decontamination.benchmarks) == {"math500", "gsm8k_test"}
    evaluation = load_config(REPO / "configs" / "eval-math500-r1.yaml", EvalConfig)
    assert evaluation.environment.policy.engine.model == "/mnt/checkpoints/ckpt-r1"
