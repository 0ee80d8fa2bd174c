"""Tensor parallelism in SGLang's sampling branch: two gloo ranks on the CPU, rank 1's logits perturbed.

Each rank runs ``eagle_sample``'s sampling branch as SGLang does (the kernel, then its broadcast of
``predict``, ``accept_index`` and ``num_correct_drafts`` from rank 0) with the seam's hook around the
kernel. Every rank must commit rank 0's tokens and charge rank 0's KL, so the ledgers stay identical.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import run_ranks

WORLD = 2
BS, W, K, TOPK = 6, 6, 3, 2
FLOOR, POWER, CAP, BUDGET = 0.05, 0.5, 2, 4.0


def _round(rank):
    from sglang_asd.policy import ASDConfig
    from sglang_asd.policy.sampled import SampledConfig
    from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
    from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
    from sglang_asd.testing import make_round
    from sglang_asd.verify.rules import SAMPLED_RULE_ID

    rnd = make_round(seed=10, bs=BS, W=W, K=K, shape="eagle", topk=TOPK, logits="grid", rows="asd", stop=False)
    logits = rnd.logits if rank == 0 else torch.roll(rnd.logits, 1, dims=1)  # rank 1 sees other logits
    table = ASDLedgerTable(BS + 1, "cpu")
    slots = list(range(1, BS + 1))
    choice = RequestASD(BUDGET, ASDConfig(), SampledConfig(FLOOR, POWER, CAP))
    table.admit(slots, [RequestLedger(choice, sampled=True) for _ in slots], [BUDGET] * BS, [FLOOR] * BS,
                [CAP] * BS, [set()] * BS, rule=[SAMPLED_RULE_ID] * BS, power=[POWER] * BS)
    gen = torch.Generator().manual_seed(5)
    coins, final = torch.rand(BS, W, generator=gen), torch.rand(BS, generator=gen)
    batch = SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=table), req_pool_indices=torch.arange(1, BS + 1),
                            forward_mode=SimpleNamespace(is_idle=lambda: False),
                            spec_algorithm=SimpleNamespace(is_ngram=lambda: False),
                            sampling_info=SimpleNamespace(is_all_greedy=False))  # a batch holding sampled rows
    verify_input = SimpleNamespace(max_tree_depth=K + 1, draft_token_num=W, draft_token=rnd.candidates.reshape(-1),
                                   retrieve_index=torch.arange(BS * W).view(BS, W),
                                   retrieve_next_token=rnd.retrieve_next_token,
                                   retrieve_next_sibling=rnd.retrieve_next_sibling, tree_topk=TOPK)
    return rnd, logits, table, batch, verify_input, coins, final


def _run(rank):
    from sglang_asd.sglang_seams.scheduler import eagle_sample as seam
    from sglang_asd.cpu_backend.seams import sampling as cpu_sampling

    rnd, logits, table, batch, verify_input, coins, final = _round(rank)

    def sampling_branch(verify_input, batch, logits_output):
        predict = torch.zeros(BS * W, dtype=torch.int32)
        accept_index = torch.full((BS, K + 1), -1, dtype=torch.int32)
        num_correct = torch.empty(BS, dtype=torch.int32)
        probs = torch.softmax(logits_output.next_token_logits, dim=-1).view(BS, W, -1)
        seam.tree_sampling_around(
            cpu_sampling.tree_speculative_sampling_target_only, predicts=predict, accept_index=accept_index,
            accept_token_num=num_correct, candidates=rnd.candidates, retrive_index=verify_input.retrieve_index,
            retrive_next_token=verify_input.retrieve_next_token, retrive_next_sibling=verify_input.retrieve_next_sibling,
            uniform_samples=coins, uniform_samples_for_final_sampling=final, target_probs=probs,
            draft_probs=torch.zeros_like(probs), threshold_single=1.0, threshold_acc=1.0, deterministic=True)
        for t in (predict, accept_index, num_correct):  # SGLang's broadcast after the sampling call
            dist.broadcast(t, src=0)
        return predict, num_correct + 1, accept_index

    from sglang.srt.speculative import eagle_utils

    from sglang_asd.sglang_seams.step import verify_step

    verify_step.tp_group = lambda: dist.group.WORLD  # the TP group, as SGLang's parallel state gives it
    eagle_utils.get_spec = lambda: SimpleNamespace(speculative_use_rejection_sampling=False)
    logits_output = SimpleNamespace(next_token_logits=logits, auxiliary_device_output=None)
    _, accept_lens, accept_index = seam.eagle_sample_around(sampling_branch, verify_input, batch, logits_output)
    aux = logits_output.auxiliary_device_output
    return {"accept_index": accept_index.clone(), "remaining": table.remaining.clone(),
            "charge": aux.relaxed_charge.clone(), "own": _own_spent(rnd, logits, verify_input, coins, final)}


def _own_spent(rnd, logits, verify_input, coins, final):
    """This rank's sampled decision without any broadcast: its spent."""
    from sglang_asd.verify.sampled_verify import asd_sampled_verify

    probs = torch.softmax(logits, dim=-1).view(BS, W, -1)
    out = asd_sampled_verify(torch.zeros(BS * W, dtype=torch.int32), torch.full((BS, K + 1), -1, dtype=torch.int32),
                             torch.zeros(BS, dtype=torch.int32), rnd.candidates, verify_input.retrieve_index,
                             rnd.retrieve_next_token, rnd.retrieve_next_sibling, coins, final, probs,
                             torch.full((BS,), BUDGET), torch.full((BS,), FLOOR), torch.full((BS,), CAP, dtype=torch.int32),
                             torch.full((BS,), POWER), max_children=TOPK)
    return out.spent


def _rank(rank: int) -> dict:
    from sglang_asd.sglang_seams.process import prepare_process

    prepare_process()
    from sglang.kernels.ops.speculative import sampling

    from sglang_asd.server_settings import ASDServerSettings
    from sglang_asd.hooks.registry import resolve as _resolve
    from sglang_asd.sglang_seams.scheduler import eagle_sample as seam
    from sglang_asd.sglang_seams.state.runtime import set_runtime

    set_runtime(ASDServerSettings())
    seam.check_signatures(_resolve(seam.EAGLE_SAMPLE), _resolve(seam.VERIFY_TREE_GREEDY),
                          sampling.tree_speculative_sampling_target_only)
    return _run(rank)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_ranks(_rank, tmp_path_factory.mktemp("sampling_tp"), WORLD)


def test_every_rank_commits_and_charges_rank_0s_sampled_decision(ranks):
    r0, r1 = ranks
    assert not torch.equal(r0["own"], r1["own"]), "the perturbation must change rank 1's own decision"
    assert torch.equal(r1["accept_index"], r0["accept_index"])
    assert torch.equal(r1["charge"], r0["charge"])
    assert torch.equal(r1["remaining"], r0["remaining"])
    assert torch.equal(r0["remaining"][1:], BUDGET - r0["own"]) and (r0["own"] > 0).any()
