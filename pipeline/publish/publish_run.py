"""Publishing a finished run folder: the card facts come from its manifest and Parquet.

Used right after a run (`publish.repo` set in the config) and later, on its own,
by `python -m jobs.publish --run-dir ...` (the retry command a failed publish prints).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.config import RunConfig
from pipeline.problems.decontamination import describe_rule
from pipeline.publish.hub import CardInfo, PublishResult, publish_run
from pipeline.report.run_report import REPORT_FILES, REPORT_MD
from pipeline.run.summary import RunSummary, refresh_run_report
from pipeline.store.filesystem import is_remote
from pipeline.store.run_folder import local_run_dir


def card_info(config: dict[str, Any], summary: RunSummary, report: Sequence[Path] = ()) -> CardInfo:
    """What the dataset card states, from a (redacted) config dump and the run's totals."""

    def model(service: str) -> str | None:
        engine = (config.get(service) or {}).get("engine") or {}
        value = engine.get("model")
        return None if value is None else str(value)

    search = config.get("search") or {}
    rule = ((config.get("records") or {}).get("decontamination")) or {}
    return CardInfo(
        config=config,
        models=[m for m in (model("policy"), model("scorer")) if m],
        budget={"B": config.get("budget"), "algorithm": search.get("algorithm")},
        answered_precision=summary.precision,
        report_markdown=next(
            (p.read_text() for p in report if p.name == REPORT_MD and p.is_file()), None
        ),
        report_files=[p for p in report if p.suffix == ".png"],
        decontaminated=dict(summary.contaminated),
        decontamination_rule=decontamination_rule(rule),
    )


def decontamination_rule(rule: dict[str, Any]) -> str | None:
    """One sentence on how the run was decontaminated (from its config dump)."""
    return describe_rule(rule) if rule else None


def publish_run_dir(
    run_dir: str | Path,
    repo: str,
    *,
    run_id: str | None = None,
    token_env: str = "HF_TOKEN",
    private: bool = True,
    endpoint: str | None = None,
) -> PublishResult:
    """Push `run_dir`'s Parquet (every record type) to `repo`; raises `HubPublishError`.

    `run_dir` may be a bucket's run (s3://.../run=<id>): its committed parts are read
    through a local copy, and the fresh report is written back next to them.
    """
    source = run_dir if is_remote(str(run_dir)) else None
    with local_run_dir(run_dir, write_back=REPORT_FILES) as local:
        summary, config, report = refresh_run_report(local)
        return publish_run(
            local,
            repo,
            run_id=run_id or summary.run_id,
            token_env=token_env,
            private=private,
            endpoint=endpoint,
            card_info=card_info(config, summary, report),
            source_dir=source,
        )


def publish_configured(config: RunConfig, run_dir: Path | str) -> PublishResult:
    """Publish a run the way its config's `publish` section says."""
    publish = config.publish
    if publish.repo is None:
        raise ValueError("publish.repo is not set")
    return publish_run_dir(
        run_dir,
        publish.repo,
        run_id=config.resolved_run_id,
        token_env=publish.token_env,
        private=publish.private,
        endpoint=publish.endpoint,
    )
