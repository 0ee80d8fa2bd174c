"""The block drafters' accept seams (``dspark_accept.py``, ``dflash_accept.py``) around SGLang's real code.

DSPARK: SGLang 0.5.23's own ``accept_draft_tokens`` (its torch branch, with and without the cap layout
of cap-accept / compact modes) and ``build_accept_outs``. DFLASH: SGLang's own
``DFlashWorkerV2._accept_block`` on a worker holding only what that method reads. The decode step
around them is the seam's own wrapper with a stand-in body that calls them as the worker does.
"""

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.policy import ASDConfig
from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.scheduler import dflash_accept, dspark_accept
from sglang_asd.sglang_seams.step.verify_step import chain_links
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.testing import make_round
from sglang_asd.verify import asd_verify
from tests.host_sync import forbid_host_sync

BS, W = 8, 5
K = W - 1


@pytest.fixture
def step(monkeypatch):
    from sglang_asd.hooks.registry import resolve as _resolve

    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())
    dspark_accept.check_signatures(_resolve(dspark_accept.FORWARD_DECODE), _resolve(dspark_accept.ACCEPT_DRAFT_TOKENS))
    dflash_accept.check_signatures(_resolve(dflash_accept.FORWARD), _resolve(dflash_accept.ACCEPT_BLOCK))
    rnd = make_round(seed=3, bs=BS, W=W, K=K, shape="chain", rows="asd", stop=False)
    table = ASDLedgerTable(BS + 1, "cpu")
    asd_rows = list(range(1, BS + 1, 2))  # odd slots are ASD rows, even slots strict (zero rows)
    table.admit(asd_rows, [RequestLedger(choice=RequestASD(8.0, ASDConfig())) for _ in asd_rows],
                [8.0] * len(asd_rows), [0.25] * len(asd_rows), [2] * len(asd_rows), [{0}] * len(asd_rows))
    slots = torch.arange(1, BS + 1)
    batch = SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=table), req_pool_indices=slots,
                            req_pool_indices_cpu=slots.clone(), forward_mode=SimpleNamespace(
                                is_idle=lambda: False, is_extend=lambda: False), is_extend_in_batch=False)
    return SimpleNamespace(rnd=rnd, table=table, batch=batch, asd=slots % 2 == 1)


def _reference(rnd, verify_lens=None):
    """``asd_verify`` on the round's chain (every row under budget 8, gate 0.25, cap 2)."""
    next_token, next_sibling = chain_links(BS, W, "cpu", verify_lens)
    return asd_verify(rnd.candidates, rnd.logits, next_token, next_sibling, torch.full((BS,), 8.0),
                      torch.full((BS,), 0.25), torch.full((BS,), 2, dtype=torch.int32), K,
                      stop_tokens=torch.zeros((BS, 1), dtype=torch.int64), tree_depth_gate=verify_lens is not None)


def _bonus(out):
    return out.predict.view(BS, W).gather(1, out.num_correct_drafts.long()[:, None]).squeeze(1).long()


# --- DSPARK ---------------------------------------------------------------------------------------


def _dspark_worker(sync_enabled=False):
    tp_sync = SimpleNamespace(enabled=lambda site: sync_enabled)
    return SimpleNamespace(_verify_executor=SimpleNamespace(_tp_sync=tp_sync))


def _dspark_decode(step, layout=None, logits=None):
    """DSPARK's decode step as far as the accept: SGLang's ``accept_draft_tokens`` through the hook, then
    SGLang's ``build_accept_outs``. -> (SGLang's accept alone, the hooked AcceptOuts, logits output)."""
    from sglang.srt.speculative.dspark_components import dspark_verify as dv
    from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

    logits = step.rnd.logits if logits is None else logits
    kwargs = dict(candidates=step.rnd.candidates, target_logits=logits, draft_block=SimpleNamespace(greedy_mask=None),
                  sampling_info=None, draft_input=None, gamma=K, verify_num_draft_tokens=W, cutoff_layout=layout)
    stock = dv.accept_draft_tokens(**kwargs)
    logits_output = SimpleNamespace(next_token_logits=logits, auxiliary_device_output=None)

    def body(worker, batch, on_publish=None, grammar_barrier=None, coordination_plan=None):
        correct_len, bonus, trim = dspark_accept.accept_draft_tokens_around(dv.accept_draft_tokens, **kwargs)
        accept = dv.build_accept_outs(
            correct_len=correct_len, bonus=bonus, cap_trim_lens=trim, prefix_lens=torch.full((BS,), 7),
            draft_tokens=step.rnd.candidates[:, 1:], gamma=K, verify_num_draft_tokens=W,
            tp_sync=SimpleNamespace(sync=lambda site, values: values), sync_site=SpecTpSyncSite.DSPARK_ACCEPT_GREEDY)
        return SimpleNamespace(logits_output=logits_output, accept=accept)

    result = dspark_accept.forward_decode_around(body, _dspark_worker(), step.batch, None)
    return stock, result.accept, logits_output


def test_dspark_asd_rows_take_asd_verify_strict_rows_stay_sglangs(step):
    (stock_len, stock_bonus, _), accept, logits_output = _dspark_decode(step)
    asd = _reference(step.rnd)
    rows = step.asd
    assert torch.equal(accept.correct_len, torch.where(rows, asd.num_correct_drafts.to(stock_len.dtype), stock_len))
    assert torch.equal(accept.bonus, torch.where(rows, _bonus(asd), stock_bonus))
    assert torch.equal(accept.commit_lens, accept.correct_len.int() + 1)
    # SGLang's output tokens: the accepted drafts, then the bonus
    for b in range(BS):
        n = int(accept.correct_len[b])
        assert accept.out_tokens[b, :n].tolist() == step.rnd.candidates[b, 1:n + 1].tolist()
        assert int(accept.out_tokens[b, n]) == int(accept.bonus[b])
    assert torch.equal(step.table.remaining[1:], torch.where(rows, 8.0 - asd.spent, torch.zeros(BS)))
    assert asd.spent[rows].sum() > 0 and (asd.num_correct_drafts > stock_len)[rows].any(), \
        "the round must exercise exceptions"
    out = logits_output.auxiliary_device_output
    assert isinstance(out, ASDRoundOutput) and torch.equal(out.active, rows)


def test_dspark_zero_rows_are_sglangs_result(step):
    step.table.release(list(range(1, BS + 1)))
    step.table.admit([1], [object()], [8.0], [0.25], [2], [{0}])  # one ASD row elsewhere: the seam runs
    step.batch.req_pool_indices = step.batch.req_pool_indices_cpu = torch.arange(2, BS + 2) % (BS + 1)
    step.batch.req_pool_indices[step.batch.req_pool_indices == 1] = 0
    (stock_len, stock_bonus, stock_trim), accept, _ = _dspark_decode(step)
    assert torch.equal(accept.correct_len, stock_len) and torch.equal(accept.bonus, stock_bonus)
    assert torch.equal(accept.cap_trim_lens, stock_trim.int())


def test_dspark_cap_layout_never_reads_past_a_rows_verify_length(step):
    """Compact mode zero-fills the logits past ``verify_lens``: every token there has regret 0."""
    verify_lens = torch.tensor([1, 2, 3, 5, 2, 4, 1, 5])
    logits = step.rnd.logits.clone().view(BS, W, -1)
    for b in range(BS):
        logits[b, int(verify_lens[b]):] = 0.0
    logits = logits.view(BS * W, -1)
    (stock_len, _, _), accept, _ = _dspark_decode(step, layout=SimpleNamespace(verify_lens=verify_lens),
                                                  logits=logits)
    asd = _reference(SimpleNamespace(candidates=step.rnd.candidates, logits=logits), verify_lens)
    rows = step.asd
    assert (accept.correct_len <= verify_lens - 1).all()
    assert torch.equal(accept.correct_len, torch.where(rows, asd.num_correct_drafts.to(stock_len.dtype), stock_len))
    assert torch.equal(accept.cap_trim_lens[rows], torch.zeros(int(rows.sum()), dtype=torch.int32))


def test_dspark_seam_never_syncs_with_the_host(step, monkeypatch):
    from sglang.srt.speculative.dspark_components import dspark_verify as dv

    kwargs = dict(candidates=step.rnd.candidates, target_logits=step.rnd.logits,
                  draft_block=SimpleNamespace(greedy_mask=None), sampling_info=None, draft_input=None, gamma=K,
                  verify_num_draft_tokens=W, cutoff_layout=None)
    stock = dv.accept_draft_tokens(**kwargs)

    def body(worker, batch):
        return SimpleNamespace(logits_output=SimpleNamespace(auxiliary_device_output=None),
                               accept=dspark_accept.accept_draft_tokens_around(lambda **_: stock, **kwargs))

    step.batch.req_pool_indices_cpu = None  # the host view then falls back to the table's count
    forbid_host_sync(monkeypatch, "in the block accept seam")
    result = dspark_accept.forward_decode_around(body, _dspark_worker(), step.batch)
    monkeypatch.undo()
    assert isinstance(result.logits_output.auxiliary_device_output, ASDRoundOutput)


def test_dspark_fold_is_disarmed_only_in_steps_holding_asd_rows(step):
    seen = []

    def body(worker, batch):
        seen.append(dspark_accept.adjustments_noop_around(lambda sampling_info: True, None))
        return SimpleNamespace(logits_output=SimpleNamespace(auxiliary_device_output=None))

    dspark_accept.forward_decode_around(body, _dspark_worker(), step.batch)
    step.batch.req_pool_indices_cpu = torch.tensor([2, 4, 6])  # strict slots only
    step.batch.req_pool_indices = step.batch.req_pool_indices_cpu.clone()
    dspark_accept.forward_decode_around(body, _dspark_worker(), step.batch)
    assert seen == [False, True]
    assert dspark_accept.adjustments_noop_around(lambda sampling_info: True, None) is True  # outside a step


# --- DFLASH ---------------------------------------------------------------------------------------


def _dflash_worker():
    """A DFlashWorkerV2 holding what ``_accept_block``'s greedy branch reads (nothing else is built)."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    worker = object.__new__(DFlashWorkerV2)
    worker._selector_sample = None
    worker.block_size = W
    worker._use_triton_accept_bonus = False
    worker._tp_sync = SimpleNamespace(sync=lambda site, values: values, enabled=lambda site: False)
    return worker


def _dflash_decode(step):
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    worker = _dflash_worker()
    kwargs = dict(candidates=step.rnd.candidates, next_token_logits=step.rnd.logits, sampling_info=None,
                  draft_input=None, prefix_lens=torch.full((BS,), 7), bs=BS)
    stock = DFlashWorkerV2._accept_block(worker, **kwargs)
    logits_output = SimpleNamespace(auxiliary_device_output=None)

    def body(worker, batch, on_publish=None):
        return SimpleNamespace(logits_output=logits_output, accept=dflash_accept.accept_block_around(
            DFlashWorkerV2._accept_block, worker, **kwargs))

    result = dflash_accept.forward_batch_generation_around(body, worker, step.batch)
    return stock, result.accept, logits_output


def test_dflash_asd_rows_take_asd_verify_strict_rows_stay_sglangs(step):
    stock, (accept_len, commit_lens, bonus, out_tokens, new_seq_lens), logits_output = _dflash_decode(step)
    asd = _reference(step.rnd)
    rows = step.asd
    assert torch.equal(accept_len, torch.where(rows, asd.num_correct_drafts.to(stock[0].dtype), stock[0]))
    assert torch.equal(bonus, torch.where(rows, _bonus(asd), stock[2]))
    assert torch.equal(commit_lens, accept_len.int() + 1) and new_seq_lens is None
    for b in range(BS):
        n = int(accept_len[b])
        assert out_tokens[b, :n].tolist() == step.rnd.candidates[b, 1:n + 1].tolist()
        assert int(out_tokens[b, n]) == int(bonus[b])
        if not rows[b]:
            assert torch.equal(out_tokens[b], stock[3][b])
    assert torch.equal(step.table.remaining[1:], torch.where(rows, 8.0 - asd.spent, torch.zeros(BS)))
    assert asd.spent[rows].sum() > 0
    assert torch.equal(logits_output.auxiliary_device_output.active, rows)


def test_dflash_keeps_the_verify_logits_only_for_steps_holding_asd_rows(step):
    seen = []

    def body(worker, batch):
        seen.append(dflash_accept.skip_verify_logits_around(lambda self, batch, sampling_info: True, worker,
                                                            batch, None))
        return SimpleNamespace(logits_output=SimpleNamespace(auxiliary_device_output=None))

    dflash_accept.forward_batch_generation_around(body, _dflash_worker(), step.batch)
    step.batch.req_pool_indices_cpu = torch.tensor([2, 4])
    dflash_accept.forward_batch_generation_around(body, _dflash_worker(), step.batch)
    assert seen == [False, True]


def test_dflash_prefill_is_not_a_verify_step(step):
    step.batch.forward_mode = SimpleNamespace(is_idle=lambda: False, is_extend=lambda: True)
    result = dflash_accept.forward_batch_generation_around(
        lambda worker, batch: SimpleNamespace(logits_output=SimpleNamespace(auxiliary_device_output=None)),
        _dflash_worker(), step.batch)
    assert result.logits_output.auxiliary_device_output is None and step.table.has_staged
