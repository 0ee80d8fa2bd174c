import pytest

from sglang_asd.policy import ASDConfig
from sglang_asd.sglang_seams.state.request_ledger import REASON_SAMPLING, RequestASD, RequestLedger
from sglang_asd.server_settings import ASDServerSettings, split_argv

REF = ASDConfig(gate=0.25, max_exceptions_per_block=2)


def test_split_argv_takes_only_asd_flags():
    settings, rest = split_argv(["--model-path", "m", "--asd-default-budget", "8", "--asd-gate=0.1", "--port", "1"])
    assert settings.default_budget == 8.0 and settings.config.gate == 0.1
    assert rest == ["--model-path", "m", "--port", "1"]
    assert not settings.standalone_draft_fix
    assert split_argv(["--asd-standalone-draft-fix"])[0].standalone_draft_fix


def test_settings_from_mapping_is_strict():
    s = ASDServerSettings.from_mapping({"asd-default-budget": 2, "max_budget": 4})
    assert (s.default_budget, s.max_budget) == (2, 4)
    with pytest.raises(ValueError, match="unknown ASD setting"):
        ASDServerSettings.from_mapping({"asd-budjet": 2})
    with pytest.raises(ValueError, match="asd_default_budget must be <= asd_max_budget"):
        ASDServerSettings(default_budget=10, max_budget=5)
    with pytest.raises(ValueError, match="asd_gate must be a finite number >= 0, got -1"):
        ASDServerSettings.from_mapping({"gate": -1})
    with pytest.raises(ValueError, match="asd_max_exceptions_per_block must be an integer >= 0, got 1.5"):
        ASDServerSettings.from_mapping({"asd-max-exceptions-per-block": 1.5})
    assert ASDServerSettings.from_mapping({"asd_gate": 0.5}).config == ASDConfig(0.5, 2)


def test_request_defaults_and_overrides():
    s = ASDServerSettings(default_budget=1.5, max_budget=8, config=REF)
    assert RequestASD.from_custom_params(None, s) == RequestASD(1.5, REF)
    assert RequestASD.from_custom_params({"asd_budget": 4, "asd_gate": 0.1}, s) == RequestASD(4.0, ASDConfig(0.1, 2))
    assert RequestASD.from_custom_params({"asd_max_exceptions_per_block": 0}, s).is_strict
    assert RequestASD.from_custom_params({"asd_budget": 0}, s).is_strict
    with pytest.raises(ValueError, match="asd_budget"):
        RequestASD.from_custom_params({"asd_budget": 9}, s)


def test_ledger_receipt_caps_events_but_keeps_counts():
    led = RequestLedger(choice=RequestASD(8.0, REF), max_events=2)
    for pos in range(3):
        led.record(pos=pos, draft=10 + pos, target=20 + pos, regret=0.5)
    r = led.receipt()
    assert r["applied"] and r["exceptions"] == 3 and r["spent"] == 1.5 and r["remaining"] == 6.5
    assert [e["pos"] for e in r["events"]] == [0, 1] and r["events_truncated"]


def test_receipt_says_why_not_applied():
    r = RequestLedger(choice=RequestASD(8.0, REF), reason=REASON_SAMPLING).receipt()
    assert r["applied"] is False and r["reason"] == "sampling"
