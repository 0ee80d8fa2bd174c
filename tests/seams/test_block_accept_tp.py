"""Tensor parallelism at the block drafters' accept: two gloo ranks on the CPU, rank 1's logits perturbed.

Each rank runs the seam around SGLang's own accept (DSPARK: ``accept_draft_tokens`` then
``build_accept_outs``, whose TP sync broadcasts ``(correct_len, bonus, cap_trim_lens)`` from rank 0;
DFLASH: ``_accept_block``, which broadcasts only the argmax). Every rank must commit rank 0's ASD
decision and charge rank 0's regret, so the ledgers stay identical.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import run_ranks

WORLD = 2
BS, W = 6, 5


class _Group:
    """What SGLang's TP sync reads of its GroupCoordinator: the device group and ``broadcast``."""

    def __init__(self):
        self.device_group = dist.group.WORLD
        self.world_size = WORLD

    def broadcast(self, values, src=0):
        dist.broadcast(values, src=src)
        return values


class _TpSync:
    def __init__(self):
        self._tp_group = _Group()

    def enabled(self, site):
        return True

    def sync(self, site, values):
        return self._tp_group.broadcast(values, src=0)


def _step(rank):
    from sglang_asd.policy import ASDConfig
    from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
    from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
    from sglang_asd.testing import make_round

    rnd = make_round(seed=11, bs=BS, W=W, K=W - 1, V=16, shape="chain", rows="asd", stop=False)
    logits = rnd.logits if rank == 0 else torch.roll(rnd.logits, 1, dims=1)  # rank 1 sees other logits
    table = ASDLedgerTable(BS + 1, "cpu")
    slots = list(range(1, BS + 1))
    table.admit(slots, [RequestLedger(choice=RequestASD(8.0, ASDConfig())) for _ in slots], [8.0] * BS,
                [0.5] * BS, [2] * BS, [{0}] * BS)
    idx = torch.arange(1, BS + 1)
    batch = SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=table), req_pool_indices=idx,
                            req_pool_indices_cpu=idx, is_extend_in_batch=False,
                            forward_mode=SimpleNamespace(is_idle=lambda: False, is_extend=lambda: False))
    return rnd.candidates, logits, table, batch


def _dspark(rank):
    from sglang.srt.speculative.dspark_components import dspark_verify as dv
    from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

    from sglang_asd.sglang_seams.scheduler import dspark_accept

    candidates, logits, table, batch = _step(rank)
    tp_sync = _TpSync()
    worker = SimpleNamespace(_verify_executor=SimpleNamespace(_tp_sync=tp_sync))

    def body(worker, batch):
        n, bonus, trim = dspark_accept.accept_draft_tokens_around(
            dv.accept_draft_tokens, candidates=candidates, target_logits=logits,
            draft_block=SimpleNamespace(greedy_mask=None), sampling_info=None, draft_input=None, gamma=W - 1,
            verify_num_draft_tokens=W, cutoff_layout=None)
        accept = dv.build_accept_outs(correct_len=n, bonus=bonus, cap_trim_lens=trim,
                                      prefix_lens=torch.full((BS,), 3), draft_tokens=candidates[:, 1:], gamma=W - 1,
                                      verify_num_draft_tokens=W, tp_sync=tp_sync,
                                      sync_site=SpecTpSyncSite.DSPARK_ACCEPT_GREEDY)
        return SimpleNamespace(logits_output=SimpleNamespace(auxiliary_device_output=None), accept=accept)

    result = dspark_accept.forward_decode_around(body, worker, batch)
    own = _own_decision(candidates, logits)
    return {"len": result.accept.correct_len.clone(), "bonus": result.accept.bonus.clone(),
            "remaining": table.remaining.clone(), "own_len": own}


def _dflash(rank):
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_asd.sglang_seams.scheduler import dflash_accept

    candidates, logits, table, batch = _step(rank)
    worker = object.__new__(DFlashWorkerV2)
    worker._selector_sample, worker.block_size, worker._use_triton_accept_bonus = None, W, False
    worker._tp_sync = _TpSync()

    def body(worker, batch):
        return SimpleNamespace(logits_output=SimpleNamespace(auxiliary_device_output=None),
                               accept=dflash_accept.accept_block_around(
                                   DFlashWorkerV2._accept_block, worker, candidates=candidates,
                                   next_token_logits=logits, sampling_info=None, draft_input=None,
                                   prefix_lens=torch.full((BS,), 3), bs=BS))

    accept_len, _, bonus, out_tokens, _ = dflash_accept.forward_batch_generation_around(body, worker, batch).accept
    return {"len": accept_len.clone(), "bonus": bonus.clone(), "tokens": out_tokens.clone(),
            "remaining": table.remaining.clone(), "own_len": _own_decision(candidates, logits)}


def _own_decision(candidates, logits):
    """This rank's ASD decision without any broadcast."""
    from sglang_asd.sglang_seams.step.verify_step import chain_links
    from sglang_asd.verify import asd_verify

    nxt, sib = chain_links(BS, W, "cpu")
    return asd_verify(candidates, logits, nxt, sib, torch.full((BS,), 8.0), torch.full((BS,), 0.5),
                      torch.full((BS,), 2, dtype=torch.int32), W - 1,
                      stop_tokens=torch.zeros((BS, 1), dtype=torch.int64)).num_correct_drafts


def _rank(rank: int) -> dict:
    from sglang_asd.sglang_seams.process import prepare_process

    prepare_process()
    from sglang_asd.server_settings import ASDServerSettings
    from sglang_asd.hooks.registry import resolve as _resolve
    from sglang_asd.sglang_seams.scheduler import dflash_accept, dspark_accept
    from sglang_asd.sglang_seams.state.runtime import set_runtime

    set_runtime(ASDServerSettings())
    dspark_accept.check_signatures(_resolve(dspark_accept.FORWARD_DECODE), _resolve(dspark_accept.ACCEPT_DRAFT_TOKENS))
    dflash_accept.check_signatures(_resolve(dflash_accept.FORWARD), _resolve(dflash_accept.ACCEPT_BLOCK))
    return {"dspark": _dspark(rank), "dflash": _dflash(rank)}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_ranks(_rank, tmp_path_factory.mktemp("block_tp"), WORLD)


@pytest.mark.parametrize("drafter", ["dspark", "dflash"])
def test_every_rank_commits_and_charges_rank_0s_decision(ranks, drafter):
    r0, r1 = ranks[0][drafter], ranks[1][drafter]
    assert not torch.equal(r0["own_len"], r1["own_len"]), "the perturbation must change rank 1's own decision"
    assert torch.equal(r1["len"], r0["len"]) and torch.equal(r0["len"], r0["own_len"].to(r0["len"].dtype))
    assert torch.equal(r1["bonus"], r0["bonus"])
    assert torch.equal(r1["remaining"], r0["remaining"]) and (r0["remaining"][1:] < 8.0).any()
    if drafter == "dflash":
        assert torch.equal(r1["tokens"], r0["tokens"])
