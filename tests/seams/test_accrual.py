"""Budgets that accrue with output (``asd_budget_per_token``, ``asd_budget_burst``).

Pure: the accrual arithmetic of the reference ledger and the request fields' validation (the
scheduler's, the HTTP layer's and the server flags'). Step level, on CPU tensors: the real verify
step (``open``, ``decide_chain``, ``settle``) over random rounds, where every exception's cumulative
spent is checked against rate x (its output position) + burst, rows of different rates side by
side; the device columns under the overlap scheduler's order; no host sync. Receipts: the host
ledger's per-event check, including a planted overdraft that it must report.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch

from sglang_asd.policy import Accrual, ASDConfig, ExceptionEvent, Ledger, select_chain
from sglang_asd.server_settings import ASDServerSettings, split_argv
from sglang_asd.sglang_seams.frontend.http_api import rewrite_body
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.sglang_seams.step import verify_step
from sglang_asd.testing.rounds import make_round
from tests.host_sync import forbid_host_sync

SETTINGS = ASDServerSettings()
RULE = ASDConfig(gate=0.25, max_exceptions_per_block=2)


# --- pure: the reference ledger -------------------------------------------------------------------


def test_accrual_limit_is_the_smaller_of_the_total_and_the_accrued_allowance():
    ledger = Ledger(8.0, accrual=Accrual(rate=0.1, burst=0.5))
    assert ledger.limit(0) == pytest.approx(0.5)
    assert ledger.limit(10) == pytest.approx(1.5)
    assert ledger.limit(1000) == 8.0  # the hard total binds once the allowance passes it
    ledger.charge([ExceptionEvent(3, 1, 2, 1.2)], produced=10)
    assert ledger.spent == pytest.approx(1.2)
    assert ledger.limit(10) == pytest.approx(0.3)
    assert ledger.limit(11) == pytest.approx(0.4)
    assert ledger.limit(0) == 0.0  # never below 0
    with pytest.raises(ValueError, match=r"exceeds the ledger's limit \(budget and accrual\)"):
        ledger.charge([ExceptionEvent(0, 1, 2, 0.35)], produced=10)
    assert ledger.spent == pytest.approx(1.2), "a refused block leaves the ledger unchanged"


def test_rate_zero_and_burst_zero_admit_nothing_and_a_burst_alone_is_a_fixed_budget():
    strict = Ledger(8.0, accrual=Accrual(0.0, 0.0))
    assert [strict.limit(n) for n in (0, 1, 10_000)] == [0.0, 0.0, 0.0]
    fixed = Ledger(8.0, accrual=Accrual(0.0, 2.0))
    assert [fixed.limit(n) for n in (0, 10_000)] == [2.0, 2.0]
    with pytest.raises(ValueError, match="asd_budget_per_token must be a finite number >= 0, got -0.1"):
        Accrual(-0.1)
    with pytest.raises(ValueError, match="asd_budget_burst must be a finite number >= 0, got inf"):
        Accrual(0.1, math.inf)
    with pytest.raises(ValueError, match="an accrual needs a bounded ledger"):
        Ledger(8.0, bounded=False, accrual=Accrual(0.1))


def test_select_chain_stops_at_the_accrual_and_spends_more_once_output_grew():
    """The same block: refused early in the output (allowance 0.1 x 2), accepted later (0.1 x 20)."""
    draft, argmax, regret = [5, 6], [9, 6, 7], [0.5, 0.0]  # one exception of regret 0.5, then an exact token
    early = select_chain(draft, argmax, regret, Ledger(8.0, accrual=Accrual(0.1)), RULE, produced=2)
    assert early.accepted == () and early.spent == 0.0
    late = select_chain(draft, argmax, regret, Ledger(8.0, accrual=Accrual(0.1)), RULE, produced=20)
    assert late.accepted == (5, 6) and late.exceptions == (0,) and late.spent == 0.5
    unbounded_rate = select_chain(draft, argmax, regret, Ledger(8.0), RULE, produced=2)
    assert unbounded_rate.accepted == (5, 6), "without an accrual only the total binds"


# --- pure: the request fields -----------------------------------------------------------------------


def _choice(params, settings=SETTINGS):
    return RequestASD.from_custom_params(params, settings)


def test_a_rate_alone_opts_in_with_the_servers_maximum_as_its_total():
    c = _choice({"asd_budget_per_token": 0.02})
    assert (c.budget, c.rate, c.burst, c.is_strict) == (SETTINGS.max_budget, 0.02, 0.0, False)
    c = _choice({"asd_budget_per_token": 0.02, "asd_budget": 4, "asd_budget_burst": 0.5})
    assert (c.budget, c.rate, c.burst) == (4.0, 0.02, 0.5)
    # the server's default budget, when set, is the total of a request that sends only a rate
    c = _choice({"asd_budget_per_token": 0.02}, ASDServerSettings(default_budget=8.0))
    assert c.budget == 8.0
    # no rate anywhere: as before
    c = _choice({"asd_budget": 4})
    assert (c.rate, c.burst) == (None, 0.0)


def test_rate_zero_without_a_budget_is_strict_like_budget_zero():
    c = _choice({"asd_budget_per_token": 0})
    assert c.is_strict and c.is_sampled_strict
    assert not _choice({"asd_budget_per_token": 0, "asd_budget_burst": 1}).is_strict  # a fixed budget of 1


def test_server_defaults_apply_and_requests_only_tighten_the_maximum_rate():
    settings, rest = split_argv(["--asd-budget-per-token", "0.05", "--asd-budget-burst", "1",
                                 "--asd-max-budget-per-token", "0.1", "--port", "1"])
    assert rest == ["--port", "1"]
    c = _choice({}, settings)
    assert (c.budget, c.rate, c.burst) == (settings.max_budget, 0.05, 1.0)
    assert _choice({"asd_budget_burst": 0.5}, settings).burst == 0.5  # the server's rate goes with it
    with pytest.raises(ValueError, match=r"^asd_budget_per_token must be a finite number in \[0, 0.1\], got 0.2$"):
        _choice({"asd_budget_per_token": 0.2}, settings)
    # margin has no request ledger: the server's default rate does not apply to its greedy requests
    margin = _choice({"asd_rule": "margin", "asd_budget": 8}, settings)
    assert margin.rate == 0.05 and not RequestLedger(choice=margin).accrues
    assert RequestLedger(choice=margin, sampled=True).accrues, "its sampled requests have a ledger"


@pytest.mark.parametrize("params, message", [
    ({"asd_budget_per_token": -1}, "asd_budget_per_token must be a finite number in [0, 1], got -1"),
    ({"asd_budget_per_token": "0.1"}, "asd_budget_per_token must be a finite number in [0, 1], got '0.1'"),
    ({"asd_budget_per_token": True}, "asd_budget_per_token must be a finite number in [0, 1], got True"),
    ({"asd_budget_per_token": float("nan")}, "asd_budget_per_token must be a finite number in [0, 1], got nan"),
    ({"asd_budget_per_token": 0.1, "asd_budget_burst": 65},
     "asd_budget_burst must be a finite number in [0, 64], got 65"),
    ({"asd_budget_burst": 1}, "asd_budget_burst needs a per-token rate: send asd_budget_per_token too (this server "
                              "sets no --asd-budget-per-token), got asd_budget_burst=1"),
    ({"asd_budget_per_token": 0.1, "asd_rule": "threshold"},
     "asd_budget_per_token does not apply to asd_rule=threshold (a rule without a request ledger; its parameters: "
     "asd_threshold)"),
])
def test_bad_fields_are_refused_naming_the_field_and_value(params, message):
    with pytest.raises(ValueError) as e:
        _choice(params)
    assert str(e.value) == message
    for path, body in (("/generate", {"text": "x", **params}), ("/v1/completions", {"prompt": "x", **params}),
                       ("/v1/chat/completions", {"messages": [], "custom_params": dict(params)})):
        with pytest.raises(ValueError) as e:
            rewrite_body(path, body, SETTINGS)
        assert str(e.value) == message, path


def test_fields_move_into_custom_params_on_every_route_and_conflicts_name_both_places():
    body = rewrite_body("/generate", {"text": "x", "asd_budget_per_token": 0.02,
                                      "sampling_params": {"asd_budget_burst": 1}}, SETTINGS)
    assert body["sampling_params"]["custom_params"] == {"asd_budget_per_token": 0.02, "asd_budget_burst": 1.0}
    body = rewrite_body("/v1/chat/completions", {"messages": [], "asd_budget_per_token": 0.02}, SETTINGS)
    assert body["custom_params"] == {"asd_budget_per_token": 0.02}
    with pytest.raises(ValueError, match=r"^asd_budget_per_token is given twice with different values: 0.02 \(top "
                                         r"level\) and 0.03 \(custom_params.asd_budget_per_token\)$"):
        rewrite_body("/v1/completions", {"asd_budget_per_token": 0.02,
                                         "custom_params": {"asd_budget_per_token": 0.03}}, SETTINGS)


def test_server_flags_are_refused_at_start_up_naming_the_flag():
    for argv, message in (
            (["--asd-budget-per-token", "2"], "asd_budget_per_token must be a finite number in [0, 1], got 2.0"),
            (["--asd-budget-per-token", "0.5", "--asd-max-budget-per-token", "0.1"],
             "asd_budget_per_token must be a finite number in [0, 0.1], got 0.5"),
            (["--asd-budget-burst", "100"], "asd_budget_burst must be a finite number in [0, 64], got 100.0"),
            (["--asd-max-budget-per-token", "-1"], "asd_max_budget_per_token must be a finite number >= 0, got -1.0")):
        with pytest.raises(ValueError) as e:
            split_argv(argv)
        assert str(e.value) == message


# --- receipts: the host ledger's check ------------------------------------------------------------


def test_receipt_carries_each_events_spent_and_allowance_and_reports_an_overdraft():
    ledger = RequestLedger(choice=_choice({"asd_budget_per_token": 0.1, "asd_budget_burst": 0.2}), max_events=2)
    ledger.record(5, 1, 2, 0.5)  # allowance 0.1 x 5 + 0.2 = 0.7
    ledger.record(9, 1, 2, 0.4)  # cumulative 0.9 <= 1.1
    ledger.record(12, 1, 2, 0.3)  # not listed (max_events 2), still checked: 1.2 <= 1.4
    r = ledger.receipt()
    assert [(e["spent"], e["allowance"]) for e in r["events"]] == [(0.5, 0.7), (0.9, 1.1)]
    assert r["events_truncated"] and r["accrual_held"] is True
    assert r["accrual_min_headroom"] == pytest.approx(0.2)
    assert (r["budget_per_token"], r["budget_burst"], r["budget"]) == (0.1, 0.2, SETTINGS.max_budget)
    ledger.record(13, 1, 2, 0.5)  # 1.7 > 1.5: an overdraft the device would never admit, planted here
    r = ledger.receipt()
    assert r["accrual_held"] is False and r["accrual_min_headroom"] == pytest.approx(-0.2)


def test_sampled_receipt_checks_the_accrual_per_relaxed_node():
    ledger = RequestLedger(choice=_choice({"asd_budget_per_token": 0.01}), sampled=True)
    ledger.record_relaxed(10, 7, 0.4, 0.6, 0.05, True)
    r = ledger.receipt()
    assert r["rule"] == "asd-sampled-1" and r["accrual_held"] is True
    assert (r["events"][0]["spent"], r["events"][0]["allowance"]) == (0.05, 0.1)


def test_receipts_without_a_rate_are_unchanged():
    r = RequestLedger(choice=_choice({"asd_budget": 4})).receipt()
    assert not {"budget_per_token", "budget_burst", "accrual_held", "accrual_min_headroom"} & set(r)


# --- step level: the real verify step over random rounds ------------------------------------------

# (budget, rate, burst) per row: rows of different rates side by side, one with a burst, one with a
# tight total, one without a rate (the accrual must not bind it), one at rate 0 and burst 0.
ROWS = [(64.0, 0.01, 0.0), (64.0, 0.05, 0.0), (64.0, 0.2, 0.0), (64.0, 0.02, 1.0), (1.5, 0.3, 0.5),
        (64.0, None, 0.0), (64.0, 0.0, 0.0)]
K = 4
W = K + 1


def _table(rows, produced):
    table = ASDLedgerTable(len(rows) + 1, "cpu")
    slots = list(range(1, len(rows) + 1))
    ledgers = [RequestLedger(choice=RequestASD(b, RULE, rate=a, burst=u)) for b, a, u in rows]
    table.admit(slots, ledgers, [led.device_remaining for led in ledgers], [0.25] * len(rows), [2] * len(rows),
                [{-5}] * len(rows), produced=produced, rate=[a or 0.0 for _, a, _ in rows],
                burst_left=[led.device_burst_left for led in ledgers])
    return table, torch.tensor(slots)


def _batch(table, slots):
    return SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=table), req_pool_indices=slots,
                           req_pool_indices_cpu=slots.clone(),
                           forward_mode=SimpleNamespace(is_idle=lambda: False, is_extend=lambda: False))


def _same_round_for_every_row(seed, bs):
    """One random chain round, the same drafts and logits in every row: rows differ by their ledger only."""
    one = make_round(seed=seed, bs=1, W=W, K=K, shape="chain", rows="asd", stop=False, logits="grid")
    return one.candidates.expand(bs, W).contiguous(), one.logits.repeat(bs, 1)


@pytest.fixture
def settings(monkeypatch):
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())


def test_every_event_stays_within_its_rows_allowance_over_random_rounds(settings):
    rng = random.Random(0)
    produced = [rng.randrange(1, 4) for _ in ROWS]
    table, slots = _table(ROWS, produced)
    batch = _batch(table, slots)
    spent = [0.0] * len(ROWS)
    headroom = [math.inf] * len(ROWS)
    events = [0] * len(ROWS)
    for round_ in range(150):
        candidates, logits = _same_round_for_every_row(round_, len(ROWS))
        step = verify_step.open(batch)
        num_correct, _, _ = verify_step.decide_chain(step, candidates, logits)
        out = step.round_output
        for b, (budget, rate, burst) in enumerate(ROWS):
            for i in range(int(num_correct[b])):
                if out.active[b] and out.exception_mask[b, i]:
                    spent[b] += float(out.exception_regret[b, i])
                    events[b] += 1
                    pos = produced[b] + i  # the event's output position: produced tokens precede it
                    assert spent[b] <= budget + 1e-5
                    if rate is not None:
                        allowance = rate * pos + burst
                        assert spent[b] <= allowance + 1e-5, (round_, b, pos, spent[b], allowance)
                        headroom[b] = min(headroom[b], allowance - spent[b])
            produced[b] += int(num_correct[b]) + 1
        # the device counts the same output and holds burst - spent in its accrual column
        assert table.produced[slots].tolist() == produced
        for b, (budget, rate, burst) in enumerate(ROWS):
            if rate is not None:
                assert float(table.burst_left[slots[b]]) == pytest.approx(burst - spent[b], abs=1e-5)
            else:
                assert table.burst_left[slots[b]].isinf()
    assert events[-1] == 0, "rate 0 and burst 0 admit nothing"
    assert spent[0] < spent[2] < spent[5], "a lower rate spends less on the same drafts; no rate spends the most"
    assert min(headroom[0], headroom[1]) < 0.25, "the accrual bound is reached, not just respected from afar"
    assert spent[4] <= 1.5 + 1e-5 and spent[4] > 1.0, "the hard total binds the fast row"


def test_a_recycled_slot_keeps_its_new_owners_accrual_under_the_overlap_order(settings):
    """Batch N gathers A's row; A's slot goes to B (staged) before N writes back: B's burst_left and
    rate are B's own, and N's write-back of A's columns never reaches B."""
    table, slots = _table([(64.0, 0.01, 0.0)], [1])
    in_flight = table.begin_verify(slots)
    table.release([1])
    b = RequestLedger(choice=RequestASD(8.0, RULE, rate=0.5, burst=2.0))
    table.admit([1], [b], [8.0], [0.25], [2], [{-5}], produced=[1], rate=[0.5], burst_left=[b.device_burst_left])
    table.charge(slots, in_flight.remaining - 0.3, in_flight.burst_left - 0.3)  # N's write-back of A's row
    rows = table.begin_verify(slots)
    assert (rows.rate.tolist(), rows.burst_left.tolist(), rows.remaining.tolist()) == ([0.5], [2.0], [8.0])
    assert rows.limit.tolist() == [2.5]  # min(8, 0.5 x 1 + 2)


def test_a_row_without_a_rate_holds_inf_and_its_limit_is_its_remaining(settings):
    table, slots = _table([(3.0, None, 0.0), (3.0, 0.0, 0.25)], [100, 100])
    rows = table.begin_verify(slots)
    assert rows.burst_left[0].isinf() and rows.limit.tolist() == [3.0, 0.25]
    table.charge(slots, rows.remaining - 0.25, rows.burst_left - 0.25)
    rows = table.begin_verify(slots)
    assert rows.burst_left[0].isinf() and rows.limit.tolist() == [2.75, 0.0]


def test_the_accrual_step_never_syncs_with_the_host(settings, monkeypatch):
    table, slots = _table(ROWS, [3] * len(ROWS))
    batch = _batch(table, slots)
    candidates, logits = _same_round_for_every_row(1, len(ROWS))
    forbid_host_sync(monkeypatch, "in the accrual's verify step")
    step = verify_step.open(batch)
    verify_step.decide_chain(step, candidates, logits)
    monkeypatch.undo()
    assert step.round_output is not None

