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
    with pytest.raises(ValueError) as e:
        rewrite_body("/v1/completions", {"asd_budget": 1, "custom_params": {"asd_budget": 2}}, S)
    assert str(e.value) == "asd_budget is given twice with different values: 1 (top level) and 2 (custom_params.asd_budget)"
    out = rewrite_body("/v1/completions", {"asd_budget": 2, "custom_params": {"asd_budget": 2}}, S)
    assert out["custom_params"] == {"asd_budget": 2.0}


def test_generate_gateway_form_sampling_params_custom_params():
    """``sampling_params.custom_params`` is the form smg forwards on /generate: validated the same way."""
    body = {"text": "hi", "sampling_params": {"custom_params": {"asd_budget": 8, "asd_rule": "local"}}}
    out = rewrite_body("/generate", body, S)
    assert out["sampling_params"] == {"custom_params": {"asd_budget": 8.0, "asd_rule": "local"}}
    with pytest.raises(ValueError, match=r"asd_budget must be a finite number in \[0, 64\], got -1"):
        rewrite_body("/generate", {"text": "hi", "sampling_params": {"custom_params": {"asd_budget": -1}}}, S)


GEN = {"temperature": 0, "max_new_tokens": 4}  # sampling_params of SGLang's own, kept as they are


@pytest.mark.parametrize("body, want", [
    # top level only: it applies to the request's sampling_params, created when none is given
    ({"text": "hi", "asd_budget": 8}, {"custom_params": {"asd_budget": 8.0}}),
    ({"text": "hi", "sampling_params": None, "asd_budget": 8}, {"custom_params": {"asd_budget": 8.0}}),
    ({"text": "hi", "sampling_params": dict(GEN), "asd_budget": 8, "asd_rule": "local"},
     {**GEN, "custom_params": {"asd_budget": 8.0, "asd_rule": "local"}}),
    # nested only, directly or in custom_params
    ({"text": "hi", "sampling_params": {**GEN, "asd_budget": 8}}, {**GEN, "custom_params": {"asd_budget": 8.0}}),
    ({"text": "hi", "sampling_params": {**GEN, "custom_params": {"asd_budget": 8, "other": 1}}},
     {**GEN, "custom_params": {"asd_budget": 8.0, "other": 1}}),
    # top level and nested, the same value (as validated: 8 and 8.0 agree)
    ({"text": "hi", "asd_budget": 8, "sampling_params": {"asd_budget": 8.0}}, {"custom_params": {"asd_budget": 8.0}}),
    ({"text": "hi", "asd_budget": 8, "sampling_params": {"asd_budget": 8, "custom_params": {"asd_budget": 8}}},
     {"custom_params": {"asd_budget": 8.0}}),
    # different fields at different places: merged
    ({"text": "hi", "asd_budget": 8, "sampling_params": {"asd_gate": 0.1, "custom_params": {"asd_rule": "local"}}},
     {"custom_params": {"asd_rule": "local", "asd_budget": 8.0, "asd_gate": 0.1}}),
    # the rule decides which parameters apply, wherever it is given
    ({"text": "hi", "asd_rule": "margin", "sampling_params": {"asd_margin": 0.05}},
     {"custom_params": {"asd_rule": "margin", "asd_margin": 0.05}}),
    # null is "not given", at every place
    ({"text": "hi", "asd_budget": None, "sampling_params": {"asd_budget": 4}}, {"custom_params": {"asd_budget": 4.0}}),
    ({"text": "hi", "asd_budget": 4, "sampling_params": {"asd_budget": None}}, {"custom_params": {"asd_budget": 4.0}}),
])
def test_generate_top_level_and_nested_fields(body, want):
    out = rewrite_body("/generate", body, S)
    assert out["sampling_params"] == want
    assert not {k for k in out if k.startswith("asd_")}, out  # nothing left at the top for SGLang to ignore


@pytest.mark.parametrize("body, message", [
    ({"text": "hi", "asd_budget": 8, "sampling_params": {"asd_budget": 4}},
     "asd_budget is given twice with different values: 8 (top level) and 4 (sampling_params.asd_budget)"),
    ({"text": "hi", "asd_budget": 8, "sampling_params": {"custom_params": {"asd_budget": 4}}},
     "asd_budget is given twice with different values: 8 (top level) and 4 (sampling_params.custom_params.asd_budget)"),
    ({"text": "hi", "sampling_params": {"asd_rule": "asd", "custom_params": {"asd_rule": "local"}}},
     "asd_rule is given twice with different values: 'asd' (sampling_params.asd_rule) and 'local' "
     "(sampling_params.custom_params.asd_rule)"),
    ({"text": ["a", "b"], "asd_gate": 0.1, "sampling_params": [{"asd_gate": 0.1}, {"asd_gate": 0.2}]},
     "asd_gate is given twice with different values: 0.1 (top level) and 0.2 (sampling_params[1].asd_gate)"),
    ({"text": "hi", "asd_rule": "margin", "asd_margin": 0.5, "sampling_params": {"asd_rule": "local"}},
     "asd_rule is given twice with different values: 'margin' (top level) and 'local' (sampling_params.asd_rule)"),
])
def test_generate_different_values_name_both_places(body, message):
    with pytest.raises(ValueError) as e:
        rewrite_body("/generate", body, S)
    assert str(e.value) == message


def test_generate_top_level_applies_to_every_sampling_params_of_a_batch():
    body = {"text": ["a", "b", "c"], "asd_budget": 4,
            "sampling_params": [dict(GEN), {"asd_budget": 4, "temperature": 0}, {"custom_params": {"asd_gate": 0.1}}]}
    out = rewrite_body("/generate", body, S)
    assert out["sampling_params"] == [{**GEN, "custom_params": {"asd_budget": 4.0}},
                                      {"temperature": 0, "custom_params": {"asd_budget": 4.0}},
                                      {"custom_params": {"asd_gate": 0.1, "asd_budget": 4.0}}]
    assert "asd_budget" not in out
    # a batch without a top-level field: each sampling_params keeps its own
    out = rewrite_body("/generate", {"text": ["a", "b"], "sampling_params": [{"asd_budget": 1}, {"asd_budget": 2}]}, S)
    assert [p["custom_params"]["asd_budget"] for p in out["sampling_params"]] == [1.0, 2.0]


@pytest.mark.parametrize("body, fragment", [
    ({"text": "hi", "asd_budget": -1}, "asd_budget must be a finite number in [0, 64], got -1"),
    ({"text": "hi", "asd_budget": True}, "got True"),
    ({"text": "hi", "asd_budget": "8", "sampling_params": dict(GEN)}, "got '8'"),
    ({"text": ["a"], "asd_budget": 65, "sampling_params": [dict(GEN)]}, "got 65"),
    ({"text": "hi", "asd_rule": "fuzzy"}, "asd_rule must be one of asd, local, margin, threshold, fly, fly-bounded, got 'fuzzy'"),
    ({"text": "hi", "asd_gate": 0.5}, "asd_gate"),
    ({"text": "hi", "asd_margin": 0.1}, "asd_margin does not apply to asd_rule=asd"),
    # a bad value is refused as such, at whichever place, also when the other place holds a good one
    ({"text": "hi", "asd_budget": 8, "sampling_params": {"asd_budget": math.nan}}, "asd_budget must be a finite number"),
    ({"text": "hi", "asd_budget": math.inf, "sampling_params": {"asd_budget": 8}}, "got inf"),
    ({"text": "hi", "asd_budget": True, "sampling_params": {"asd_budget": 1}}, "got True"),
    ({"text": "hi", "asd_budget": 1, "sampling_params": {"asd_budget": True}}, "got True"),
    # the top level is validated even where SGLang will refuse the sampling_params itself
    ({"text": "hi", "asd_budget": -1, "sampling_params": "greedy"}, "got -1"),
    ({"text": [], "asd_budget": -1, "sampling_params": []}, "got -1"),
])
def test_generate_bad_values_are_refused_naming_the_field(body, fragment):
    with pytest.raises(ValueError) as e:
        rewrite_body("/generate", body, S)
    assert fragment in str(e.value) and str(e.value).startswith("asd_"), str(e.value)


def test_generate_has_no_top_level_custom_params():
    """SGLang's ``GenerateReqInput`` has no ``custom_params`` (it would ignore one, and smg forwards it):
    an ASD field there is refused, anything else in it is SGLang's."""
    with pytest.raises(ValueError) as e:
        rewrite_body("/generate", {"text": "hi", "custom_params": {"asd_gate": 0.1}}, S)
    assert str(e.value) == ("custom_params is not a /generate field: send asd_gate at the top level or in "
                            "sampling_params, got custom_params.asd_gate=0.1")
    assert rewrite_body("/generate", {"text": "hi", "custom_params": {"other": 1}}, S) == {"text": "hi", "custom_params": {"other": 1}}


def test_generate_sampling_params_custom_params_must_be_object():
    with pytest.raises(ValueError, match=r"sampling_params\.custom_params must be an object, got 'x'"):
        rewrite_body("/generate", {"text": "hi", "asd_budget": 1, "sampling_params": {"custom_params": "x"}}, S)


def test_custom_params_must_be_object():
    with pytest.raises(ValueError, match="custom_params must be an object"):
        rewrite_body("/v1/completions", {"asd_budget": 1, "custom_params": [1]}, S)


HUGE = 10**400  # no float holds it (float(HUGE) overflows), and no int64 or int32 either
FIELDS = ["asd_budget", "asd_gate", "asd_margin", "asd_threshold", "asd_max_exceptions_per_block"]
ROUTES = ["/generate", "/v1/completions", "/v1/chat/completions"]
RULE_OF = {"asd_margin": "margin", "asd_threshold": "threshold"}  # a parameter only its rule reads


def _body(path, field, value, nested=False):
    fields = {field: value, **({"asd_rule": RULE_OF[field]} if field in RULE_OF else {})}
    if path == "/generate":
        return {"text": "x", "sampling_params": fields}
    return {"prompt": "x", "custom_params": fields} if nested else {"prompt": "x", **fields}


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("field, value", [*[(f, v) for f in FIELDS for v in (HUGE, -HUGE, 1e308 * 10)],
                                          ("asd_max_exceptions_per_block", 2**63)])
def test_a_number_no_type_holds_is_refused_naming_the_field(path, field, value):
    for nested in (False, True):
        with pytest.raises(ValueError) as e:
            rewrite_body(path, _body(path, field, value, nested), ASDServerSettings(max_budget=1e300))
        message = str(e.value)
        assert message.startswith(field + " must be"), message
        assert len(message) < 200, message  # the value is described, not printed digit by digit
        if value in (HUGE, -HUGE):
            assert message.endswith("got an integer of 401 digits"), message


def _asgi(path: str, raw: bytes):
    """Run the middleware on one request; returns (status, body) of the answer, or (None, forwarded body)."""
    import asyncio
    import json

    from sglang_asd.sglang_seams.frontend.http_api import ASDRequestMiddleware

    sent, forwarded = [], []

    async def app(scope, receive, send):
        forwarded.append((await receive())["body"])

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    asyncio.run(ASDRequestMiddleware(app)(scope, receive, send))
    if forwarded:
        return None, forwarded[0]
    return sent[0]["status"], json.loads(sent[1]["body"])


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("field", ["asd_budget", "asd_max_exceptions_per_block"])
def test_an_integer_literal_python_will_not_parse_is_a_400_naming_the_field(path, field):
    digits = "9" * 5000  # over Python's limit on digits converted from text: json.loads refuses the body
    raw = (f'{{"text": "x", "sampling_params": {{"{field}": {digits}}}}}' if path == "/generate"
           else f'{{"prompt": "x", "{field}": {digits}}}').encode()
    status, body = _asgi(path, raw)
    message = body["error"] if path == "/generate" else body["message"]
    assert status == 400 and message.startswith(field + " must be") and "an integer of 5000 digits" in message


def test_a_long_integer_elsewhere_is_sglangs_to_answer():
    raw = ('{"text": "x", "sampling_params": {"max_new_tokens": ' + "9" * 5000 + ', "asd_budget": 1}}').encode()
    status, forwarded = _asgi("/generate", raw)
    assert status is None and forwarded == raw  # passed on untouched: SGLang refuses its own field


def test_the_middleware_moves_fields_and_refuses_bad_ones():
    status, forwarded = _asgi("/v1/completions", b'{"prompt": "x", "asd_budget": 2}')
    assert status is None and b'"custom_params": {"asd_budget": 2.0}' in forwarded
    status, body = _asgi("/v1/completions", b'{"prompt": "x", "asd_budget": -2}')
    assert status == 400 and body["message"].startswith("asd_budget must be a finite number") and "got -2" in body["message"]


def test_the_middleware_on_generate_top_level_fields():
    """What SGLang's ``bench_serving --backend sglang --extra-request-body '{"asd_budget": 8}'`` sends."""
    import json

    raw = json.dumps({"text": "x", "sampling_params": {"temperature": 0.0, "max_new_tokens": 4}, "stream": True,
                      "asd_budget": 8}).encode()
    status, forwarded = _asgi("/generate", raw)
    assert status is None and json.loads(forwarded) == {
        "text": "x", "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "custom_params": {"asd_budget": 8.0}},
        "stream": True}
    raw = b'{"text": "x", "sampling_params": {"asd_budget": 4}, "asd_budget": 8}'
    status, body = _asgi("/generate", raw)
    assert status == 400 and body == {
        "error": "asd_budget is given twice with different values: 8 (top level) and 4 (sampling_params.asd_budget)"}
