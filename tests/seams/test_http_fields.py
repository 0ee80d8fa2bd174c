"""The HTTP field rules: where asd_* may appear, how they are validated, where they end up."""

import math

import pytest

from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.frontend.http_api import rewrite_body

S = ASDServerSettings(max_budget=64)


def test_generate_fields_move_into_custom_params():
    body = {"text": "hi", "sampling_params": {"temperature": 0, "asd_budget": 8, "asd_gate": 0.1}}
    out = rewrite_body("/generate", body, S)
    assert out["sampling_params"] == {"temperature": 0, "custom_params": {"asd_budget": 8.0, "asd_gate": 0.1}}


def test_generate_batch_of_sampling_params():
    body = {"text": ["a", "b"], "sampling_params": [{"asd_budget": 1}, {"temperature": 0}]}
    out = rewrite_body("/generate", body, S)
    assert out["sampling_params"][0] == {"custom_params": {"asd_budget": 1.0}}
    assert out["sampling_params"][1] == {"temperature": 0}


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_openai_top_level_and_custom_params(path):
    out = rewrite_body(path, {"prompt": "x", "asd_budget": 2, "custom_params": {"other": 1}}, S)
    assert out == {"prompt": "x", "custom_params": {"other": 1, "asd_budget": 2.0}}
    out = rewrite_body(path, {"prompt": "x", "custom_params": {"asd_max_exceptions_per_block": 1}}, S)
    assert out["custom_params"] == {"asd_max_exceptions_per_block": 1}


def test_untouched_without_fields():
    body = {"text": "hi", "sampling_params": {"temperature": 0.5}}
    assert rewrite_body("/generate", dict(body), S) == body


@pytest.mark.parametrize(
    "value, fragment",
    [(-1, "got -1"), (math.nan, "got nan"), (math.inf, "got inf"), ("8", "got '8'"), (True, "got True"),
     ([8], "got [8]"), (65, "got 65"), (None, None)],
)
def test_bad_budget_names_field_and_value(value, fragment):
    body = {"prompt": "x", "asd_budget": value}
    if fragment is None:  # null means "not given"
        assert "custom_params" not in rewrite_body("/v1/completions", body, S)
        return
    with pytest.raises(ValueError) as e:
        rewrite_body("/v1/completions", body, S)
    assert "asd_budget" in str(e.value) and fragment in str(e.value)


def test_gate_and_cap_may_only_tighten():
    with pytest.raises(ValueError, match="asd_gate"):
        rewrite_body("/generate", {"sampling_params": {"asd_gate": 0.5}}, S)
    with pytest.raises(ValueError, match="asd_max_exceptions_per_block"):
        rewrite_body("/generate", {"sampling_params": {"asd_max_exceptions_per_block": 3}}, S)
    with pytest.raises(ValueError, match="asd_max_exceptions_per_block"):
        rewrite_body("/generate", {"sampling_params": {"asd_max_exceptions_per_block": 1.5}}, S)


def test_conflicting_duplicates_rejected():
    with pytest.raises(ValueError, match="given twice"):
        rewrite_body("/v1/completions", {"asd_budget": 1, "custom_params": {"asd_budget": 2}}, S)
    out = rewrite_body("/v1/completions", {"asd_budget": 2, "custom_params": {"asd_budget": 2}}, S)
    assert out["custom_params"] == {"asd_budget": 2.0}


def test_custom_params_must_be_object():
    with pytest.raises(ValueError, match="custom_params must be an object"):
        rewrite_body("/v1/completions", {"asd_budget": 1, "custom_params": [1]}, S)
