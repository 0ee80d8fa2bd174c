"""Ledger: budget, spent, remaining, events; 0 <= spent <= budget at every moment."""

from __future__ import annotations

import math

import pytest

from sglang_asd.policy import ExceptionEvent, Ledger


def test_ledger_accounts_and_records_events():
    ledger = Ledger(budget=8.0)
    assert (ledger.budget, ledger.spent, ledger.remaining, ledger.num_exceptions) == (8.0, 0.0, 8.0, 0)
    block = ledger.charge([ExceptionEvent(1, 11, 21, 0.625), ExceptionEvent(3, 13, 23, 0.25)])
    assert block == 0.875
    assert (ledger.spent, ledger.remaining, ledger.num_exceptions) == (0.875, 7.125, 2)
    assert ledger.events[1] == ExceptionEvent(position=3, draft_token=13, target_token=23, regret=0.25)
    assert ledger.charge([]) == 0.0 and ledger.spent == 0.875


@pytest.mark.parametrize(
    "budget,spent,message",
    [
        (-1, 0, "budget must be a finite number >= 0, got -1"),
        (math.inf, 0, "budget must be a finite number >= 0, got inf"),
        (8, math.nan, "spent must be a finite number >= 0, got nan"),
        (True, 0, "budget must be a finite number >= 0, got True"),
        (1.0, 2.0, "spent must be <= budget (1.0), got 2.0"),
    ],
)
def test_invalid_ledgers_are_rejected(budget, spent, message):
    with pytest.raises(ValueError) as excinfo:
        Ledger(budget=budget, spent=spent)
    assert str(excinfo.value) == message


def test_overspending_and_bad_regrets_raise_and_leave_the_ledger_unchanged():
    ledger = Ledger(budget=1.0, spent=0.5)
    with pytest.raises(ValueError, match="exceeds the remaining budget"):
        ledger.charge([ExceptionEvent(0, 1, 2, 0.25), ExceptionEvent(1, 1, 2, 0.5)])
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="exception regret must be a finite number >= 0"):
            ledger.charge([ExceptionEvent(0, 1, 2, bad)])
    assert (ledger.spent, ledger.num_exceptions) == (0.5, 0)
    with pytest.raises(AttributeError):
        ledger.spent = 0.0  # read-only: only charge() moves it


def test_spent_is_clamped_to_budget_against_rounding():
    # The rule admits a block when block <= budget - spent; in floats spent + block can then
    # round above the budget (0.07 + (0.9 - 0.07) == 0.9000000000000001). spent must not.
    ledger = Ledger(budget=0.9, spent=0.07)
    block = ledger.remaining
    assert 0.07 + block > 0.9
    ledger.charge([ExceptionEvent(0, 1, 2, block)])
    assert ledger.spent == ledger.budget == 0.9 and ledger.remaining == 0.0
