"""ASDConfig, its fingerprint, and the per-request validators (messages the HTTP layer returns)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sglang_asd.policy.config as config_module
from sglang_asd.policy import RULE_VERSION, ASDConfig, validate_budget, validate_cap, validate_gate


def test_defaults_are_the_reference_configuration():
    config = ASDConfig()
    assert (config.gate, config.max_exceptions_per_block) == (0.25, 2)
    assert RULE_VERSION == "asd-1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.gate = 1.0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(gate=-1), "gate must be a finite number >= 0, got -1"),
        (dict(gate=math.nan), "gate must be a finite number >= 0, got nan"),
        (dict(gate=math.inf), "gate must be a finite number >= 0, got inf"),
        (dict(gate="0.25"), "gate must be a finite number >= 0, got '0.25'"),
        (dict(gate=True), "gate must be a finite number >= 0, got True"),
        (dict(gate=None), "gate must be a finite number >= 0, got None"),
        (dict(max_exceptions_per_block=-1), "max_exceptions_per_block must be an integer >= 0, got -1"),
        (dict(max_exceptions_per_block=2.0), "max_exceptions_per_block must be an integer >= 0, got 2.0"),
        (dict(max_exceptions_per_block=True), "max_exceptions_per_block must be an integer >= 0, got True"),
    ],
)
def test_invalid_config_is_rejected_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError) as excinfo:
        ASDConfig(**kwargs)
    assert str(excinfo.value) == message


def test_from_mapping_is_strict():
    assert ASDConfig.from_mapping({}) == ASDConfig()
    assert ASDConfig.from_mapping({"gate": 0.5, "max_exceptions_per_block": 3}) == ASDConfig(0.5, 3)
    with pytest.raises(ValueError, match=r"unknown ASD config keys \['budget', 'gat'\]"):
        ASDConfig.from_mapping({"gat": 0.5, "budget": 8})
    with pytest.raises(ValueError, match="gate must be"):
        ASDConfig.from_mapping({"gate": -0.5})


def test_fingerprint_is_stable_and_covers_rule_and_parameters(monkeypatch):
    assert ASDConfig().fingerprint == "aa36853f5eef7305"  # pinned: changes only on purpose
    assert ASDConfig(gate=0).fingerprint == ASDConfig(gate=0.0).fingerprint
    assert len({ASDConfig().fingerprint, ASDConfig(gate=0.5).fingerprint,
                ASDConfig(max_exceptions_per_block=3).fingerprint}) == 3
    monkeypatch.setattr(config_module, "RULE_VERSION", "asd-2")
    assert ASDConfig().fingerprint != "aa36853f5eef7305"


@pytest.mark.parametrize(
    "value,message",
    [
        (-1, "asd_budget must be a finite number in [0, 64], got -1"),
        (64.5, "asd_budget must be a finite number in [0, 64], got 64.5"),
        (math.nan, "asd_budget must be a finite number in [0, 64], got nan"),
        (math.inf, "asd_budget must be a finite number in [0, 64], got inf"),
        ("8", "asd_budget must be a finite number in [0, 64], got '8'"),
        (True, "asd_budget must be a finite number in [0, 64], got True"),
        (None, "asd_budget must be a finite number in [0, 64], got None"),
    ],
)
def test_validate_budget_messages(value, message):
    with pytest.raises(ValueError) as excinfo:
        validate_budget(value, 64)
    assert str(excinfo.value) == message


def test_validate_gate_and_cap_messages():
    with pytest.raises(ValueError) as excinfo:
        validate_gate(0.5, 0.25)
    assert str(excinfo.value) == "asd_gate must be a finite number in [0, 0.25], got 0.5"
    with pytest.raises(ValueError) as excinfo:
        validate_cap(3, 2)
    assert str(excinfo.value) == "asd_max_exceptions_per_block must be an integer in [0, 2], got 3"
    for bad in (-1, 1.0, True, "1", None):
        with pytest.raises(ValueError, match="asd_max_exceptions_per_block must be an integer in"):
            validate_cap(bad, 2)
    assert validate_gate(0, 0.25) == 0.0 and validate_cap(0, 2) == 0 and validate_cap(2, 2) == 2


@settings(max_examples=300, deadline=None, derandomize=True)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-100, 100)),
       upper=st.sampled_from([0.0, 0.25, 8.0, 64.0]))
def test_validate_budget_accepts_exactly_finite_values_in_range(value, upper):
    ok = math.isfinite(value) and 0 <= value <= upper
    if ok:
        result = validate_budget(value, upper)
        assert result == value and isinstance(result, float)
    else:
        with pytest.raises(ValueError, match=r"^asd_budget must be a finite number in \["):
            validate_budget(value, upper)
