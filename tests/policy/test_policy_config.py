"""ASDConfig, its defaults, and the per-field validators (messages the HTTP layer returns)."""

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


def test_tightened_takes_request_overrides_no_looser_than_the_server():
    server = ASDConfig(gate=0.25, max_exceptions_per_block=2)
    assert server.tightened() == server
    assert server.tightened(gate=0.1, max_exceptions_per_block=0) == ASDConfig(0.1, 0)
    assert not server.tightened(max_exceptions_per_block=0).allows_exceptions and server.allows_exceptions
    with pytest.raises(ValueError, match=r"^asd_gate must be a finite number in \[0, 0.25\], got 0.5$"):
        server.tightened(gate=0.5)
    with pytest.raises(ValueError, match=r"^asd_max_exceptions_per_block must be an integer in \[0, 2\], got 3$"):
        server.tightened(max_exceptions_per_block=3)


def test_the_defaults_are_defined_once():
    assert (ASDConfig().gate, ASDConfig().max_exceptions_per_block) == (
        config_module.DEFAULT_GATE, config_module.DEFAULT_MAX_EXCEPTIONS_PER_BLOCK)
    assert ASDConfig(gate=0).gate == 0.0 and isinstance(ASDConfig(gate=0).gate, float)


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


def test_numbers_no_type_holds_are_refused_with_their_size():
    from sglang_asd.policy.config import MAX_COUNT, check_count, check_number

    for value in (10**400, -(10**400)):
        with pytest.raises(ValueError, match=r"^b must be a finite number >= 0, got an integer of 401 digits$"):
            check_number("b", value)
    with pytest.raises(ValueError, match=r"^c must be an integer in \[0, 2147483647\], got an integer of 401 digits$"):
        check_count("c", 10**400)
    with pytest.raises(ValueError, match=r"^c must be an integer in \[0, 2147483647\], got 2147483648$"):
        check_count("c", MAX_COUNT + 1)
    assert check_count("c", MAX_COUNT) == MAX_COUNT and check_number("b", 10**300) == 1e300
