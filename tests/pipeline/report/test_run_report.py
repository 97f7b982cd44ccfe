"""The run report's wording of the policy's prompt tokens (no Ray, no Parquet needed)."""

from __future__ import annotations

from dataclasses import fields

from pipeline.report.run_report import ReportNumbers, _policy_input


def _numbers(**values: int) -> ReportNumbers:
    zero = {f.name: 0 for f in fields(ReportNumbers)}
    return ReportNumbers(**(zero | {"currency": None} | values))  # type: ignore[arg-type]


def test_prompt_tokens_are_shown_and_an_engine_that_reports_none_is_named() -> None:
    assert _policy_input(_numbers(policy_output_tokens=965, policy_input_tokens=5409)) == "5,409"
    assert _policy_input(_numbers(policy_output_tokens=965)) == "not reported by the engine"
    assert _policy_input(_numbers()) == "0"  # nothing generated, nothing sent
