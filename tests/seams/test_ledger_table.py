"""The device ledger table under the overlap scheduler's ordering (``sglang_seams/state/ledger_table.py``).

On a GPU, admission and release run on the scheduler's host thread while the previous batch is
still in flight; the table's device rows are read and written back by the verify step. These
tests drive the table (and the real ``ReqToTokenPool`` hooks) in that order on CPU: a batch's
verify gathers its rows, the host then frees a slot and gives it to a new request, and only then
does the in-flight batch write its rows back.
"""

from types import SimpleNamespace

import torch

from sglang_asd.policy import ASDConfig
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable

RULE = ASDConfig(gate=0.25, max_exceptions_per_block=2)


def _ledger(budget):
    return RequestLedger(choice=RequestASD(budget, RULE))


def _device_state(t: ASDLedgerTable):
    return [x.clone() for x in (t.remaining, t.gate, t.cap, t.stop_tokens)]


def test_admission_and_release_only_stage_rows():
    t = ASDLedgerTable(8, "cpu")
    before = _device_state(t)
    a = _ledger(8.0)
    t.admit([3], [a], [8.0], [0.25], [2], [{2, 7}])
    assert t.num_active == 1 and t.owner_of(3) is a and t.has_staged
    assert all(torch.equal(x, y) for x, y in zip(before, _device_state(t))), "admission wrote a device row"
    remaining, gate, cap, stops, rule, power, produced, rate, burst_left, limit, scope = t.begin_verify(
        torch.tensor([3, 0]))
    assert remaining.tolist() == [8.0, 0.0] and gate.tolist() == [0.25, 0.0] and cap.tolist() == [2, 0]
    assert rate.tolist() == [0.0, 0.0] and burst_left.tolist() == [float("inf"), 0.0], "no accrual: never binds"
    assert limit.tolist() == [8.0, 0.0]
    assert stops.tolist() == [[2, 7, -1, -1], [-1, -1, -1, -1]] and not t.has_staged
    t.release([3])
    assert t.num_active == 0 and t.remaining[3] == 8.0, "release wrote a device row"
    assert t.begin_verify(torch.tensor([3]))[0].tolist() == [0.0]


def test_free_then_readmit_between_a_batch_launch_and_its_write_back():
    """A finishes in batch N but is still in batch N+1; its slot goes to B before N+1 writes back."""
    t = ASDLedgerTable(8, "cpu")
    a, b = _ledger(8.0), _ledger(2.0)
    slot = torch.tensor([5])
    t.admit([5], [a], [8.0], [0.25], [2], [{2}])
    remaining, *_ = t.begin_verify(slot)  # batch N
    t.charge(slot, remaining - 1.0)
    in_flight, *_ = t.begin_verify(slot)  # batch N+1 launched, holding A
    assert in_flight.tolist() == [7.0]
    t.release([5])  # the host processes batch N: A finished; its slot is given at once to B (LIFO)
    t.admit([5], [b], [2.0], [0.25], [2], [{2}])
    t.charge(slot, in_flight - 0.5)  # batch N+1's write-back lands after B's admission
    first_of_b, *_ = t.begin_verify(slot)  # B's first verify
    assert first_of_b.tolist() == [2.0], "B must start from its own budget, not A's leftover"
    assert t.owner_of(5) is b


def test_produced_is_staged_advanced_in_stream_order_and_reset_on_readmission():
    """The output count: staged at admission, advanced by each round's commits in stream order (batch
    N+1 reads N's advance), and a recycled slot's in-flight advance never reaches its next owner."""
    t = ASDLedgerTable(8, "cpu")
    a, b = _ledger(8.0), _ledger(2.0)
    slot = torch.tensor([5])
    t.admit([5], [a], [8.0], [0.25], [2], [{2}], produced=[1])
    rows = t.begin_verify(slot)  # batch N: A's first verify, after its prefill's one token
    assert rows.produced.tolist() == [1]
    t.advance(slot, rows.produced + torch.tensor([3]))  # 2 drafts + the bonus committed
    in_flight = t.begin_verify(slot)  # batch N+1 reads N's advance before the host processed N
    assert in_flight.produced.tolist() == [4]
    t.release([5])
    t.admit([5], [b], [2.0], [0.25], [2], [{2}], produced=[1])
    t.advance(slot, in_flight.produced + 1)  # N+1's write-back after B's admission was staged
    assert t.begin_verify(slot).produced.tolist() == [1], "B counts its own output, not A's"
    t.release([5])
    assert t.begin_verify(slot).produced.tolist() == [0]


def test_stop_width_grows_in_stream_order():
    t = ASDLedgerTable(4, "cpu", stop_width=2)
    t.admit([1], [_ledger(1.0)], [1.0], [0.25], [2], [{1, 2, 3}])
    assert t.stop_tokens.shape[1] == 2, "grown before the verify step"
    stops = t.begin_verify(torch.tensor([1]))[3]
    assert stops.tolist() == [[1, 2, 3, -1]] and t.stop_tokens.shape[1] == 4


# -- the ReqToTokenPool hooks (real SGLang pool, requests as SGLang's scheduler holds them) --------


def _pool(size=4):
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    return ReqToTokenPool(size=size, max_context_len=16, device="cpu", enable_memory_saver=False)


def _req(budget, kv=None):
    ledger = _ledger(budget)
    if budget == 0:
        ledger.reason = "strict"
    kv = kv or SimpleNamespace(req_pool_idx=None, kv_allocated_len=0, holds_kv=False)
    return SimpleNamespace(kv=kv, asd_ledger=ledger, eos_token_ids={2}, tokenizer=None, output_ids=[],
                           sampling_params=SimpleNamespace(stop_token_ids=None))


def _alloc(pool, reqs):
    from sglang_asd.sglang_seams.scheduler import req_to_token_pool as seam

    for r in reqs:
        r.kv.holds_kv = r.kv.req_pool_idx is not None
        if r.kv.holds_kv:
            r.kv.kv_allocated_len = 1
    return seam.alloc_around(type(pool).alloc, pool, reqs)


def _free(pool, slots):
    from sglang_asd.sglang_seams.scheduler import req_to_token_pool as seam

    seam.free_rows_around(type(pool).free_rows, pool, slots)


def test_hooks_give_a_reused_slot_the_new_requests_budget(monkeypatch):
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())
    pool = _pool()
    a = _req(8.0)
    (slot,) = _alloc(pool, [a])
    table = pool._asd_table
    rows = torch.tensor([slot])
    remaining, *_ = table.begin_verify(rows)
    in_flight = remaining - 3.0  # batch N+1 holds A and has spent 3 nats, not yet written back
    _free(pool, [slot])
    b = _req(1.5)
    assert _alloc(pool, [b]) == [slot], "SGLang gives the freed slot back first (LIFO)"
    table.charge(rows, in_flight)
    assert table.begin_verify(rows)[0].tolist() == [1.5]
    c = _req(0.0)
    _free(pool, [slot])
    assert _alloc(pool, [c]) == [slot]
    assert table.begin_verify(rows)[0].tolist() == [0.0], "a strict request must find a zero row"


def test_a_slot_lent_to_the_next_turn_is_readmitted_for_it(monkeypatch):
    """Streaming sessions lend a finished turn's slot to the next turn without a free."""
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())
    pool = _pool()
    turn1 = _req(8.0)
    (slot,) = _alloc(pool, [turn1])
    table = pool._asd_table
    rows = torch.tensor([slot])
    table.charge(rows, table.begin_verify(rows)[0] - 1.0)
    turn2 = _req(0.0, kv=turn1.kv)  # borrows the record: holds_kv, same slot
    _alloc(pool, [turn2])
    assert table.begin_verify(rows)[0].tolist() == [0.0], "a budget-0 turn must not inherit turn 1's ledger"
    turn3 = _req(4.0, kv=turn1.kv)
    _alloc(pool, [turn3])
    assert table.begin_verify(rows)[0].tolist() == [4.0]
    chunk = _alloc(pool, [turn3])  # a later chunk of the same request: no new row
    assert chunk == [slot] and not table.has_staged


def test_the_host_view_of_active_rules_follows_admission_and_release():
    """What the verify step chooses its kernel from (no sync): the rules of the rows ASD decides."""
    t = ASDLedgerTable(8, "cpu")
    a, b, c = _ledger(8.0), _ledger(8.0), _ledger(8.0)
    assert t.rules_active == frozenset()
    t.admit([1, 2], [a, b], [8.0, 8.0], [0.25, 0.5], [2, 0], [set(), set()], rule=[0, 2])  # asd, margin (no cap)
    assert t.rules_active == {"asd", "margin"} and t.num_active == 2
    t.admit([3], [c], [8.0], [0.0], [2], [set()], rule=[3])  # threshold 0: strict, not an ASD row
    assert t.rules_active == {"asd", "margin"} and t.num_active == 2
    rows = t.begin_verify(torch.tensor([1, 2, 3]))
    assert rows.rule.tolist() == [0, 2, 3] and rows.gate.tolist() == [0.25, 0.5, 0.0]
    t.admit([2], [b], [8.0], [0.25], [0], [set()], rule=[0])  # asd with cap 0: strict
    assert t.rules_active == {"asd"}
    t.admit([2], [b], [8.0], [0.25], [2], [set()], rule=[1])  # re-admitted (a lent slot) as local
    assert t.rules_active == {"asd", "local"}
    t.release([1, 2])
    assert t.rules_active == frozenset() and t.num_active == 0
    assert t.begin_verify(torch.tensor([1, 2])).rule.tolist() == [0, 0], "released rows are zero rows"


def test_a_zero_step_round_advances_the_count_and_folds_the_root_into_the_scope_state():
    """SGLang's adaptive zero-step verify commits one token per row without a decision: the output
    count advances by one and the span state moves past the root (here a span's open marker)."""
    from sglang_asd.sglang_seams.step.verify_step import advance_zero_step

    t = ASDLedgerTable(4, "cpu")
    ops = ((7, 2, 0, 0), (8, 0, 2, 0))  # token 7 opens span bit 1, token 8 closes it
    t.admit([1, 2], [_ledger(8.0), _ledger(8.0)], [8.0, 8.0], [0.25, 0.25], [2, 2], [set(), set()],
            produced=[3, 5], scope=[(0, 0, 0, 2, ops), None])
    batch = SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=t), req_pool_indices=torch.tensor([1, 2]),
                            forward_mode=SimpleNamespace(is_idle=lambda: False))
    advance_zero_step(batch, torch.tensor([7, 7]))
    rows = t.begin_verify(torch.tensor([1, 2]))
    assert rows.produced.tolist() == [4, 6]
    assert rows.scope.state.tolist() == [2, 0], "the scoped row is inside the span; the unscoped one has no markers"
