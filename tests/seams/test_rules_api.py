"""Rules per request: server flags, request fields (400 messages), receipts, per-rule metrics."""

import math
from types import SimpleNamespace

import pytest
import torch

from sglang_asd.policy import ASDConfig
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.server_settings import ASDServerSettings, split_argv
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.sglang_seams.frontend.http_api import rewrite_body

S = ASDServerSettings.from_mapping({"max_budget": 64, "margin": 2.0, "threshold": 1.0})


def test_server_flags_for_rules():
    s, rest = split_argv(["--asd-rule", "local", "--asd-allowed-rules", "asd,local", "--asd-margin", "3",
                          "--asd-threshold=0.25", "--port", "1"])
    assert (s.config.rule, s.allowed_rules, s.config.margin, s.config.threshold) == ("local", ("asd", "local"), 3.0, 0.25)
    assert rest == ["--port", "1"]
    assert ASDServerSettings().allowed_rules == ("asd", "local", "margin", "threshold")
    with pytest.raises(ValueError, match=r"^asd_rule must be one of asd_allowed_rules \(asd\), got 'margin'$"):
        split_argv(["--asd-rule", "margin", "--asd-allowed-rules", "asd"])
    with pytest.raises(ValueError, match=r"^asd_rule must be one of asd, local, margin, threshold, got 'mars'$"):
        split_argv(["--asd-rule", "mars"])
    with pytest.raises(ValueError, match=r"^asd_margin must be a finite number >= 0, got -1.0$"):
        split_argv(["--asd-margin", "-1"])


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_rule_fields_are_validated_and_moved_on_every_route(path):
    fields = {"asd_budget": 4, "asd_rule": "margin", "asd_margin": 0.5}
    body = {"text": "x", "sampling_params": dict(fields)} if path == "/generate" else {"prompt": "x", **fields}
    out = rewrite_body(path, body, S)
    holder = out["sampling_params"] if path == "/generate" else out
    assert holder["custom_params"] == {"asd_budget": 4.0, "asd_rule": "margin", "asd_margin": 0.5}


@pytest.mark.parametrize("fields,message", [
    ({"asd_rule": "fuzzy"}, "asd_rule must be one of asd, local, margin, threshold, got 'fuzzy'"),
    ({"asd_rule": 3}, "asd_rule must be one of asd, local, margin, threshold, got 3"),
    ({"asd_rule": "margin", "asd_margin": 2.5}, "asd_margin must be a finite number in [0, 2], got 2.5"),
    ({"asd_rule": "margin", "asd_margin": math.nan}, "asd_margin must be a finite number in [0, 2], got nan"),
    ({"asd_rule": "threshold", "asd_threshold": -1}, "asd_threshold must be a finite number in [0, 1], got -1"),
    ({"asd_rule": "threshold", "asd_threshold": "0.5"}, "asd_threshold must be a finite number in [0, 1], got '0.5'"),
    ({"asd_margin": 0.5}, "asd_margin does not apply to asd_rule=asd (its parameters: asd_gate, "
                          "asd_max_exceptions_per_block)"),
    ({"asd_rule": "threshold", "asd_gate": 0.1}, "asd_gate does not apply to asd_rule=threshold (its parameters: "
                                                 "asd_threshold)"),
])
def test_bad_rule_fields_name_the_field_and_the_value(fields, message):
    with pytest.raises(ValueError) as e:
        rewrite_body("/v1/chat/completions", {"messages": [], **fields}, S)
    assert str(e.value) == message


def test_a_server_may_forbid_rules():
    strict_server = ASDServerSettings(allowed_rules=("asd",))
    with pytest.raises(ValueError, match=r"^asd_rule must be one of asd, got 'threshold'$"):
        rewrite_body("/generate", {"sampling_params": {"asd_rule": "threshold"}}, strict_server)
    assert rewrite_body("/generate", {"sampling_params": {"asd_rule": "asd"}}, strict_server)


def test_request_choice_per_rule():
    s = ASDServerSettings(default_budget=1.0, config=ASDConfig(margin=2.0), allowed_rules="asd,margin,threshold")
    assert RequestASD.from_custom_params({"asd_rule": "margin"}, s) == RequestASD(1.0, ASDConfig(rule="margin", margin=2.0))
    assert RequestASD.from_custom_params({"asd_rule": "threshold", "asd_threshold": 0}, s).is_strict
    assert RequestASD.from_custom_params({"asd_rule": "margin", "asd_budget": 0}, s).is_strict
    assert not RequestASD.from_custom_params({"asd_rule": "margin"}, s).is_strict
    with pytest.raises(ValueError, match="asd_rule must be one of asd, margin, threshold, got 'local'"):
        RequestASD.from_custom_params({"asd_rule": "local"}, s)


def test_receipts_name_the_rule_and_its_parameters_and_claim_no_unenforced_remaining():
    def receipt(config, budget=4.0):
        led = RequestLedger(choice=RequestASD(budget, config))
        led.record(pos=3, draft=11, target=21, regret=2.5)
        led.record(pos=9, draft=12, target=22, regret=2.5)
        return led.receipt()

    asd = receipt(ASDConfig())
    assert (asd["rule"], asd["spent"], asd["remaining"], asd["gate"], asd["max_exceptions_per_block"]) == (
        "asd-1", 5.0, 0.0, 0.25, 2)  # host mirror clamps at 0 (the device never lets spent pass B)
    local = receipt(ASDConfig(rule="local", gate=0.125))
    assert (local["rule"], local["spent"], local["remaining"], local["gate"]) == ("local-1", 5.0, None, 0.125)
    margin = receipt(ASDConfig(rule="margin", margin=0.5))
    assert (margin["rule"], margin["spent"], margin["remaining"], margin["margin"]) == ("margin-1", 5.0, None, 0.5)
    assert "gate" not in margin and "max_exceptions_per_block" not in margin and "threshold" not in margin
    threshold = receipt(ASDConfig(rule="threshold", threshold=0.75))
    assert (threshold["rule"], threshold["threshold"], threshold["remaining"]) == ("threshold-1", 0.75, None)
    assert list(asd) == ["applied", "reason", "rule", "budget", "spent", "remaining", "gate", "max_exceptions_per_block",
                         "exceptions", "suffix_tokens", "events", "events_truncated", "scope"]
    assert asd["scope"] == {"strict_prefix": 0, "scope": "all", "strict_spans": [], "skipped": 0}


def test_device_remaining_at_admission():
    asd = RequestLedger(choice=RequestASD(4.0, ASDConfig()), spent=1.5)
    local = RequestLedger(choice=RequestASD(4.0, ASDConfig(rule="local")), spent=1.5)
    assert (asd.device_remaining, local.device_remaining) == (2.5, 4.0)


class _Counter:
    def __init__(self):
        self.values = {}

    def labels(self, **labels):
        key = tuple(sorted(labels.items()))
        counter = self

        class _Child:
            def inc(self, n=1):
                counter.values[key] = counter.values.get(key, 0) + n

            def set(self, n):
                counter.values[key] = n

        return _Child()


def test_round_metrics_carry_the_rule(monkeypatch):
    from sglang_asd.sglang_seams.state.metrics import ASDMetrics

    monkeypatch.setattr(runtime, "_RUNTIME", None)
    rt = runtime.set_runtime(ASDServerSettings())
    metrics = ASDMetrics.__new__(ASDMetrics)
    metrics._labels = {"model_name": "m"}
    metrics.exceptions, metrics.regret, metrics.suffix, metrics.exhausted, metrics.requests = (
        _Counter(), _Counter(), _Counter(), _Counter(), _Counter())
    rt.metrics = metrics
    reqs = [SimpleNamespace(asd_ledger=RequestLedger(choice=RequestASD(8.0, ASDConfig(rule=r))))
            for r in ("asd", "margin", "margin")]
    out = ASDRoundOutput(
        active=torch.tensor([True, True, True]),
        exception_mask=torch.tensor([[True, False], [True, True], [False, True]]),
        suffix_mask=torch.tensor([[False, True], [False, False], [False, False]]),
        exception_regret=torch.tensor([[0.5, 0.0], [0.25, 0.25], [0.0, 1.0]]),
        draft_token=torch.zeros((3, 2), dtype=torch.int64), target_token=torch.ones((3, 2), dtype=torch.int64))
    commits = [SimpleNamespace(output_index=0, token_ids=(1, 2, 3))] * 3
    out.consume(SimpleNamespace(reqs=reqs), commits)
    by_rule = {dict(k)["rule"]: v for k, v in metrics.exceptions.values.items()}
    assert by_rule == {"asd": 1, "margin": 3}
    assert {dict(k)["rule"]: v for k, v in metrics.regret.values.items()} == {"asd": 0.5, "margin": 1.5}
    assert reqs[1].asd_ledger.receipt()["spent"] == 0.5 and reqs[1].asd_ledger.receipt()["remaining"] is None
    metrics.observe_finished(8.0, None, rule="margin")  # no ledger: never "exhausted"
    metrics.observe_finished(8.0, 0.0, rule="asd")
    assert list(metrics.exhausted.values.values()) == [1]


ODD_VALUES = [None, True, -1, 0, 1, 2**70, 1.5, math.nan, math.inf, "x", "1", [], [1], {"a": 1}, 10**400, object()]


@pytest.mark.parametrize("rule", [None, "asd", "local", "margin", "threshold"])
def test_the_scheduler_reads_any_custom_params_with_at_most_a_value_error(rule):
    """The scheduler serves a request whose ``custom_params`` the HTTP layer would refuse (a direct engine
    call) strictly, catching ValueError: nothing else may escape, whatever the values' types."""
    from sglang_asd.sglang_seams.state.request_ledger import REQUEST_KEYS

    for key in REQUEST_KEYS:
        for value in ODD_VALUES:
            params = {key: value} if rule is None or key == "asd_rule" else {key: value, "asd_rule": rule}
            try:
                RequestASD.from_custom_params(params, S)
            except ValueError:
                pass
    for params in ([1], "asd_budget", 3):
        with pytest.raises(ValueError, match="custom_params must be an object"):
            RequestASD.from_custom_params(params, S)
