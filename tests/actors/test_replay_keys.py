"""What decides a recorded score's key: a scorer's own settings change it, another kind's
do not, and a GenPRM run's keys are what they were before the one-pass kind existed (a
rerun of an older run still replays)."""

from __future__ import annotations

import hashlib
import json

from actors.config import ScorerConfig
from actors.replay import score_key, service_salt
from search.protocols import ScoreRequest
from tests.actors.test_scorer_kinds import StepConfig


def _salt_before_one_pass(service: ScorerConfig) -> str:
    """`service_salt` as it was written before the one-pass kind (its fields then)."""
    fields = {"engine", "prompts", "genprm", "kind"}
    text = json.dumps(["service", service.model_dump(mode="json", include=fields)])
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def test_a_scorer_salt_holds_only_its_own_kinds_settings() -> None:
    genprm = ScorerConfig()
    assert service_salt(genprm) == _salt_before_one_pass(genprm)
    assert service_salt(genprm) == service_salt(ScorerConfig(one_pass={"node_value": "min"}))
    assert service_salt(genprm) != service_salt(ScorerConfig(genprm={"samples": 2}))

    one_pass = ScorerConfig(kind="one_pass", engine=StepConfig())
    assert service_salt(one_pass) != service_salt(
        genprm.model_copy(update={"engine": StepConfig()})
    )
    for change in (
        {"node_value": "min"},
        {"step_separator": "<extra_0>"},
        {"steps": "step_labels"},
    ):
        other = one_pass.model_copy(
            update={"one_pass": one_pass.one_pass.model_copy(update=change)}
        )
        assert service_salt(other) != service_salt(one_pass), change
    samples = one_pass.model_copy(
        update={"genprm": one_pass.genprm.model_copy(update={"samples": 3})}
    )
    assert service_salt(samples) == service_salt(one_pass)  # GenPRM's settings score nothing here


def test_where_an_answer_ends_joins_the_key_only_when_set() -> None:
    request = ScoreRequest("p", (" a", "\nStep 2: $\\boxed{2}$. More"), None, True, "2", False, 9.0)
    old = hashlib.blake2b(
        json.dumps(
            [
                "s",
                "",
                "p",
                [" a", "\nStep 2: $\\boxed{2}$. More"],
                None,
                True,
                "2",
                False,
                9.0,
                False,
            ],
            ensure_ascii=False,
        ).encode("utf-8"),
        digest_size=16,
    ).hexdigest()
    assert score_key(request) == old
    with_end = ScoreRequest("p", request.path, None, True, "2", False, 9.0, answer_end=19)
    assert score_key(with_end) != score_key(request)
