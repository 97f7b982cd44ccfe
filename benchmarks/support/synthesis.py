"""Running a run config: the benchmark's variant of a shipped config, and the real run of it.

A benchmark starts from one of configs/ (the embedded default, ``local.yaml``, or its
one-pass PRM twin) and changes a few fields: the problems, the budget, the search.  It
changes them on the typed config, not on the YAML's dictionaries, so a misspelt field or a
value of the wrong kind fails here, naming the field, before a run starts:

* `base_config` reads a shipped config into a `RunConfig`;
* `edited` is a copy of a config (or of any part of one) with some fields changed, checked
  as the run would check them;
* `kept_search` is the base config's sampling settings with another search algorithm,
  and `run_variant` the base config on other problems with another budget and search;
* `synthesize` runs ``python -m jobs.synthesize`` on a config (its log beside it), and
  `synthesize_once` does so unless an earlier run of the same benchmark finished it;
* `open_run` opens what a run wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel

from benchmarks.support.commands import REPO, run_module
from benchmarks.support.stages import MARKER, MARKER_TEXT, write_whole
from pipeline.config import RunConfig, parse_config, parse_run_config, read_yaml

if TYPE_CHECKING:
    from pipeline.store.run_folder import RunFolder

M = TypeVar("M", bound=BaseModel)
LOCAL = REPO / "configs" / "local.yaml"
LOCAL_PRM = REPO / "configs" / "local-prm.yaml"
# the prompt fields a config may give as a file to read (`actors.prompts.PromptConfig`)
PROMPT_FILES = ("policy_instruction_file", "prm_system_file")


def base_config(path: Path) -> RunConfig:
    """A shipped config, validated.  Its prompt files are read from the repository, not
    from wherever the benchmark was started (the configs name them from the root)."""
    data = read_yaml(path)
    for service in ("policy", "scorer"):
        prompts = data.get(service, {}).get("prompts", {})
        for key in PROMPT_FILES:
            if key in prompts:
                prompts[key] = str(REPO / prompts[key])
    return parse_run_config(data, str(path))


def edited(config: M, /, **changes: Any) -> M:
    """A copy of `config` (a run config or a part of one) with `changes`, validated like
    the config file it stands for.

    Each change is a field of `config`, given as a value, a dict or a model; pydantic's
    own ``model_copy(update=...)`` would take any name and any value unchecked.  Only the
    fields the config set and the changed ones are kept as set, so the config a run
    writes back (`write_config`) stays as short as the shipped one.
    """
    kind = type(config)
    unknown = sorted(set(changes) - set(kind.model_fields))
    if unknown:
        raise TypeError(f"{kind.__name__} has no field {', '.join(unknown)}")
    data = {**config.model_dump(exclude_unset=True), **changes}
    return parse_config(data, kind, kind.__name__)


def kept_search(config: RunConfig, **search: Any) -> dict[str, Any]:
    """The config's sampling settings (temperature, answer extraction, step length) with
    another search: only the algorithm and `search` change between a benchmark's arms."""
    kept = config.search
    return {
        "temperature": kept.temperature,
        "answer_extraction": kept.answer_extraction,
        "step_max_tokens": kept.step_max_tokens,
        **search,
    }


def run_variant(
    base: RunConfig,
    run_id: str,
    output_root: Path,
    *,
    source: dict[str, Any],
    count: int,
    budget: int,
    search: dict[str, Any],
) -> RunConfig:
    """`base` as one arm of a benchmark: `count` problems from `source`, budget B and
    `search` (on `kept_search`), everything else as shipped, but no more trees per actor
    than problems (the shipped configs have every one of their problems in flight)."""
    return edited(
        base,
        run_id=run_id,
        output_root=output_root,
        budget=budget,
        source=source,
        search=kept_search(base, **search),
        trees_per_actor=min(base.trees_per_actor, count),
    )


def quick_or_scored_by(config: RunConfig, quick: bool, checkpoint: Path | None) -> RunConfig:
    """`config` as a benchmark's stage runs it: 4 problems at B=100 with `quick` (a smoke
    test of the benchmark), and its scorer's model `checkpoint` when one is given (a
    one-pass PRM the benchmark trained)."""
    if quick:
        source = {**config.source.model_dump(exclude_unset=True), "count": 4}
        config = edited(config, budget=100, source=source, trees_per_actor=4)
    if checkpoint is not None:
        engine = {**config.scorer.engine.model_dump(exclude_unset=True), "model": str(checkpoint)}
        scorer = {**config.scorer.model_dump(exclude_unset=True), "engine": engine}
        config = edited(config, scorer=scorer)
    return config


def write_config(config: RunConfig, path: Path) -> Path:
    """The config as the YAML file ``jobs.synthesize --config`` reads."""
    data = config.model_dump(mode="json", exclude_unset=True)
    return write_whole(path, yaml.safe_dump(data, sort_keys=False))


def synthesize(config: RunConfig, work: Path, name: str) -> float:
    """One ``python -m jobs.synthesize`` run of `config` (written to ``work/<name>.yaml``),
    its log in ``work/<name>.log``; its wall seconds.  A failed run raises with the log's
    tail; a run folder left by an interrupted one is resumed by the pipeline itself."""
    path = write_config(config, work / f"{name}.yaml")
    seconds = run_module("jobs.synthesize", ["--config", str(path)], work / f"{name}.log")
    print(f"[synth] {name}: exit 0 in {seconds:.0f} s", file=sys.stderr)
    return seconds


def synthesize_once(config: RunConfig, work: Path) -> None:
    """`synthesize` unless the ``work/<run id>.done`` marker says it already finished, so
    that a benchmark interrupted later does not search again."""
    name = config.resolved_run_id
    marker = work / f"{name}{MARKER}"
    if marker.is_file():
        print(f"[synth] {name}: done before, reused", flush=True)
        return
    synthesize(config, work, name)
    write_whole(marker, MARKER_TEXT)


def open_run(config: RunConfig) -> RunFolder:
    """What `config`'s run wrote (its tables, read with ``.read(kind)``)."""
    from pipeline.store.run_folder import RunFolder

    return RunFolder.open(config.output_root, config.resolved_run_id)
