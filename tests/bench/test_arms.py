"""Arms: the --budgets shorthand, the --arms syntax and its errors."""

import pytest

from sglang_asd.bench import arms
from sglang_asd.bench.arms import Arm


def test_budgets_shorthand_makes_strict_first_and_b_labels():
    got = arms.resolve_arms("0,2,8,0.5", None, "0,8")
    assert [(a.label, a.fields) for a in got] == [("strict", {"asd_budget": 0.0}), ("b2", {"asd_budget": 2.0}),
                                                  ("b8", {"asd_budget": 8.0}), ("b0.5", {"asd_budget": 0.5})]
    assert [a.label for a in arms.resolve_arms(None, None, "0,8")] == ["strict", "b8"]
    assert [a.label for a in arms.resolve_arms("8", None, "0")] == ["strict", "b8"]  # strict is always there


def test_arms_syntax_numbers_ints_and_words():
    got = arms.resolve_arms("0,8", "b8g05:asd_budget=8,asd_gate=0.5; margin1:asd_rule=margin,asd_margin=1.0,"
                                   "asd_max_exceptions_per_block=1", "0")
    b8g05, margin = got[2], got[3]
    assert b8g05.label == "b8g05" and b8g05.fields == {"asd_budget": 8, "asd_gate": 0.5} and b8g05.budget == 8.0
    assert margin.fields == {"asd_rule": "margin", "asd_margin": 1.0, "asd_max_exceptions_per_block": 1}
    assert isinstance(margin.fields["asd_max_exceptions_per_block"], int)  # counts must reach the server as ints
    assert margin.budget is None
    assert arms.describe(b8g05) == "asd_budget=8, asd_gate=0.5"
    assert arms.describe(arms.PLAIN_ARM) == "no speculative decoding"


def test_arm_round_trips_through_dict():
    a = Arm("b8g05", {"asd_budget": 8, "asd_gate": 0.5})
    assert Arm.from_dict(a.to_dict()) == a
    assert arms.STRICT_ARM.is_strict and not a.is_strict and not arms.PLAIN_ARM.is_strict


@pytest.mark.parametrize("spec,message", [
    ("b8", "an arm is LABEL:FIELD=VALUE"),
    ("b8:", "an arm is LABEL:FIELD=VALUE"),
    ("b8:asd_budget", "a field is FIELD=VALUE, got 'asd_budget'"),
    ("b8:temperature=0.7", "field names must be asd_\\* in lower case, got 'temperature'"),
    ("b8:asd_budget=", "arm b8: field asd_budget has no value"),
    ("b8:asd_budget=inf", "arm b8: field asd_budget must be a finite number"),
    ("b8:asd_budget=8,asd_budget=9", "field asd_budget given twice"),
    ("b 8:asd_budget=8", "arm label must be"),
    ("plain:asd_budget=8", "reserved for the server without speculative decoding"),
    (" ; ", "--arms must list at least one"),
])
def test_bad_arms_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        arms.parse_arms(spec)


def test_duplicate_labels_and_duplicate_fields_are_errors():
    with pytest.raises(ValueError, match="arm label 'b8' is used twice"):
        arms.resolve_arms("0,8", "b8:asd_budget=8,asd_gate=0.1", "0")
    with pytest.raises(ValueError, match="arms 'b8' and 'eight' send the same fields"):
        arms.resolve_arms("0,8", "eight:asd_budget=8", "0")
    with pytest.raises(ValueError, match="arms 'strict' and 'zero' send the same fields"):
        arms.resolve_arms(None, "zero:asd_budget=0", "0")
    with pytest.raises(ValueError, match="budgets must be"):
        arms.resolve_arms("0,-1", None, "0")


def test_rules_shorthand_sweeps_each_rule_over_its_knob():
    got = arms.resolve_arms(None, None, "0,8", rules="asd=2|8, local=0.5, margin=1, threshold=0.25|1")
    assert [a.label for a in got] == ["strict", "asd2", "asd8", "local0.5", "margin1", "threshold0.25", "threshold1"]
    by = {a.label: dict(a.fields) for a in got}
    assert by["asd8"] == {"asd_rule": "asd", "asd_budget": 8.0}
    assert by["local0.5"] == {"asd_rule": "local", "asd_budget": 0.5}
    assert by["margin1"] == {"asd_rule": "margin", "asd_budget": 8.0, "asd_margin": 1.0}
    assert by["threshold1"] == {"asd_rule": "threshold", "asd_budget": 8.0, "asd_threshold": 1.0}
    assert [a.label for a in arms.rule_arms("asd,margin")] == ["asd", "margin"]  # the server's parameters
    for bad, message in (("fuzzy=1", "a rule is one of"), ("margin=x", "margin takes numbers"), (" , ", "at least one")):
        with pytest.raises(ValueError, match=message):
            arms.rule_arms(bad)


def test_scope_fields_in_arms():
    """Scope fields travel as the server reads them: the prefix an integer, spans a list."""
    (a, b) = arms.parse_arms("b8p16:asd_budget=8,asd_strict_prefix=16,asd_scope=reasoning;"
                             "b8s:asd_budget=8,asd_strict_spans=tool_call+<a>|</a>")
    assert a.fields == {"asd_budget": 8, "asd_strict_prefix": 16, "asd_scope": "reasoning"}
    assert isinstance(a.fields["asd_strict_prefix"], int)
    assert b.fields == {"asd_budget": 8, "asd_strict_spans": ["tool_call", ["<a>", "</a>"]]}
    assert Arm.from_dict(b.to_dict()) == b
    with pytest.raises(ValueError, match="asd_strict_spans is SPAN"):
        arms.parse_arm("x:asd_strict_spans=<a>|")
