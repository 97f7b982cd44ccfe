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


def test_the_totals_name_the_scorer_kind_and_a_one_pass_prm_writes_nothing() -> None:
    from pipeline.report.run_report import _optional_sections, _totals_rows, scorer_from_config

    numbers = _numbers(prm_input_tokens=12_345)
    one_pass = dict(_totals_rows(numbers, "one_pass"))
    assert one_pass["scorer"] == "one_pass (a one-pass PRM: reads each path once, decodes nothing)"
    assert one_pass["PRM input / output tokens"] == "12,345 / 0 (a one-pass PRM decodes nothing)"
    genprm = dict(_totals_rows(_numbers(prm_input_tokens=5, prm_output_tokens=7), "genprm"))
    assert genprm["scorer"].startswith("genprm (GenPRM")
    assert genprm["PRM input / output tokens"] == "5 / 7"
    assert "scorer" not in dict(_totals_rows(numbers))  # a folder without its config
    intro = _optional_sections(None, "| table |", "one_pass")[1]
    assert intro.endswith("the total is policy output + PRM input.")
    assert scorer_from_config({}) is None
    assert scorer_from_config({"scorer": {"kind": "one_pass"}}) == "one_pass"
    assert scorer_from_config({"budget": 3}) == "genprm"  # the default kind
