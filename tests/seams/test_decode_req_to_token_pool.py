"""The ledger on a PD decode server's request pool (``sglang_seams/scheduler/decode_req_to_token_pool.py``),
driven around SGLang's real ``DecodeReqToTokenPool`` on CPU in the decode event loop's order: a
batch's verify gathers its rows, the host then frees a finished request's slot and pre-allocates
slots for new requests (the oldest free slot first), and only then does the in-flight batch write
its rows back. The served path is ``tests/integration/test_pd.py``.
"""

from types import SimpleNamespace

import torch

from sglang_asd.policy import ASDConfig
from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger


def _pool(size=2, pre_alloc=0):
    from sglang.srt.disaggregation.decode import DecodeReqToTokenPool

    return DecodeReqToTokenPool(size=size, max_context_len=16, device="cpu", enable_memory_saver=False,
                                pre_alloc_size=pre_alloc)


def _req(budget):
    ledger = RequestLedger(choice=RequestASD(budget, ASDConfig(gate=0.25, max_exceptions_per_block=2)))
    if budget == 0:
        ledger.reason = "strict"
    kv = SimpleNamespace(req_pool_idx=None, kv_allocated_len=0, holds_kv=False)
    return SimpleNamespace(kv=kv, asd_ledger=ledger, eos_token_ids={2}, tokenizer=None, output_ids=[],
                           sampling_params=SimpleNamespace(stop_token_ids=None))


def _alloc(pool, reqs):
    from sglang_asd.sglang_seams.scheduler import decode_req_to_token_pool as seam

    slots = seam.alloc_around(type(pool).alloc, pool, reqs)
    for r in reqs:
        r.kv.holds_kv = True
    return slots


def _free(pool, req):
    from sglang_asd.sglang_seams.scheduler import decode_req_to_token_pool as seam

    seam.free_around(type(pool).free, pool, req)
    req.kv.holds_kv = req.kv.req_pool_idx is not None


def test_a_recycled_decode_slot_gets_the_new_requests_budget(monkeypatch):
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())
    pool = _pool(size=1)
    a = _req(8.0)
    (slot,) = _alloc(pool, [a])  # pre-allocation: the row is staged before the KV arrives
    table = pool._asd_table
    assert table.num_active == 1
    rows = torch.tensor([slot])
    remaining, *_ = table.begin_verify(rows)
    in_flight = remaining - 3.0  # batch k holds A and has spent 3 nats, not yet written back
    _free(pool, a)  # A finished in batch k-1: release_kv_cache -> free(req)
    assert a.kv.req_pool_idx is None and table.num_active == 0
    b = _req(1.5)
    assert _alloc(pool, [b]) == [slot]
    table.charge(rows, in_flight)  # batch k's write-back lands after both host events
    assert table.begin_verify(rows)[0].tolist() == [1.5]
    _free(pool, b)
    c = _req(0.0)
    assert _alloc(pool, [c]) == [slot]
    assert table.begin_verify(rows)[0].tolist() == [0.0], "a strict request must find a zero row"
    _free(pool, c)
    assert table.num_active == 0 and pool.available_size() == 1


def test_pre_allocation_slots_hold_rows_too(monkeypatch):
    """Slots beyond ``size`` (``pre_alloc_size``, for requests still transferring) are table rows."""
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())
    pool = _pool(size=1, pre_alloc=2)
    reqs = [_req(4.0), _req(0.0), _req(2.0)]
    slots = [_alloc(pool, [r])[0] for r in reqs]
    table = pool._asd_table
    assert table.remaining.shape[0] == pool._alloc_size and table.num_active == 2
    assert table.begin_verify(torch.tensor(slots))[0].tolist() == [4.0, 0.0, 2.0]
    for r in reqs:
        _free(pool, r)
    assert table.num_active == 0
    assert table.begin_verify(torch.tensor(slots))[0].tolist() == [0.0, 0.0, 0.0]


def test_output_count_at_decode_admission(monkeypatch):
    """A new request counts the handoff token still to arrive; a request resumed from its KV backup
    holds its whole output (nothing is sampled before it decodes); a rebootstrap replays the
    boundary token SGLang popped at retraction."""
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())
    pool = _pool(size=3)
    new, resumed, rebootstrap = _req(4.0), _req(4.0), _req(4.0)
    resumed.output_ids = [11, 12, 13]
    rebootstrap.output_ids, rebootstrap.pd_rebootstrap_in_progress = [11, 12], True
    slots = _alloc(pool, [new, resumed, rebootstrap])
    assert pool._asd_table.begin_verify(torch.tensor(slots)).produced.tolist() == [1, 3, 3]
