"""The sampling branch of the verify seam (``eagle_sample.tree_sampling_around``), driven as SGLang's
``eagle_sample`` drives it: its sampling branch allocates the buffers (zero / -1), computes the target's
probabilities and the coins, and calls ``tree_speculative_sampling_target_only`` by keyword, its kernel
then writing in place. The kernel here is the CPU kernel of ``sglang_asd/cpu_backend/seams/sampling.py``
(SGLang's target-only walk, bit for bit). One batch mixes sampled ASD rows, greedy ASD rows and stock rows.
"""

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.policy import ASDConfig
from sglang_asd.policy.sampled import SampledConfig
from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.scheduler import eagle_sample as seam
from sglang_asd.sglang_seams.step import verify_step
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.testing import make_round
from sglang_asd.verify import asd_verify
from sglang_asd.verify.rules import RULE_ID, SAMPLED_RULE_ID
from sglang_asd.verify.sampled_verify import asd_sampled_verify
from sglang_asd.cpu_backend.seams import sampling as cpu_sampling
from tests.host_sync import forbid_host_sync

BS, W, K, TOPK = 12, 6, 3, 2
SAMPLED, GREEDY = (1, 4, 7, 10), (2, 5, 8, 11)  # slots (= row + 1); the others are stock (zero rows)
FLOOR, POWER, CAP, BUDGET = 0.05, 0.5, 2, 4.0


def _kernel(**kwargs):
    return cpu_sampling.tree_speculative_sampling_target_only(**kwargs)


def _sampling_eagle_sample(verify_input, batch, logits_output, grammar_mask=None):
    """SGLang 0.5.23's sampling branch of ``eagle_sample`` (temperature 1, no top-k / top-p)."""
    bs, Wn = BS, verify_input.draft_token_num
    candidates = verify_input.draft_token.reshape(bs, Wn)
    predict = torch.zeros(bs * Wn, dtype=torch.int32)
    accept_index = torch.full((bs, verify_input.max_tree_depth), -1, dtype=torch.int32)
    num_correct = torch.empty((bs,), dtype=torch.int32)
    target_probs = torch.softmax(logits_output.next_token_logits, dim=-1).reshape(bs, Wn, -1)
    seam.tree_sampling_around(
        _kernel, predicts=predict, accept_index=accept_index, accept_token_num=num_correct, candidates=candidates,
        retrive_index=verify_input.retrieve_index, retrive_next_token=verify_input.retrieve_next_token,
        retrive_next_sibling=verify_input.retrieve_next_sibling, uniform_samples=batch.coins,
        uniform_samples_for_final_sampling=batch.final_coins, target_probs=target_probs,
        draft_probs=torch.zeros_like(target_probs), threshold_single=1.0, threshold_acc=1.0, deterministic=True)
    return predict, num_correct + 1, accept_index


@pytest.fixture
def step(monkeypatch):
    from sglang.kernels.ops.speculative import sampling

    from sglang_asd.hooks.registry import resolve as _resolve

    monkeypatch.setattr(runtime, "_RUNTIME", None)
    monkeypatch.setattr(seam, "_sampling_group", lambda: None)  # one rank
    monkeypatch.setattr(seam, "_broadcast_group", lambda batch: None)
    runtime.set_runtime(ASDServerSettings())
    seam.check_signatures(_resolve(seam.EAGLE_SAMPLE), _resolve(seam.VERIFY_TREE_GREEDY),
                          sampling.tree_speculative_sampling_target_only)  # SGLang's CUDA kernel's signature
    rnd = make_round(seed=10, bs=BS, W=W, K=K, shape="eagle", topk=TOPK, logits="grid", rows="asd", stop=False)
    table = ASDLedgerTable(BS + 1, "cpu")
    sampled = RequestASD(BUDGET, ASDConfig(), SampledConfig(FLOOR, POWER, CAP))
    table.admit(SAMPLED, [RequestLedger(sampled, sampled=True) for _ in SAMPLED], [BUDGET] * 4, [FLOOR] * 4,
                [CAP] * 4, [set()] * 4, rule=[SAMPLED_RULE_ID] * 4, power=[POWER] * 4)
    table.admit(GREEDY, [RequestLedger(RequestASD(8.0, ASDConfig())) for _ in GREEDY], [8.0] * 4, [0.5] * 4,
                [2] * 4, [set()] * 4, rule=[RULE_ID["asd"]] * 4)
    gen = torch.Generator().manual_seed(7)
    batch = SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=table), req_pool_indices=torch.arange(1, BS + 1),
                            forward_mode=SimpleNamespace(is_idle=lambda: False),
                            spec_algorithm=SimpleNamespace(is_ngram=lambda: False),
                            coins=torch.rand(BS, W, generator=gen), final_coins=torch.rand(BS, generator=gen))
    retrieve_index = torch.arange(BS * W).view(BS, W)
    verify_input = SimpleNamespace(max_tree_depth=K + 1, draft_token_num=W, draft_token=rnd.candidates.reshape(-1),
                                   retrieve_index=retrieve_index, retrieve_next_token=rnd.retrieve_next_token,
                                   retrieve_next_sibling=rnd.retrieve_next_sibling, tree_topk=TOPK)
    logits_output = SimpleNamespace(next_token_logits=rnd.logits.clone(), auxiliary_device_output=None)
    slot = torch.arange(1, BS + 1)
    return SimpleNamespace(rnd=rnd, table=table, batch=batch, verify_input=verify_input, logits_output=logits_output,
                           retrieve_index=retrieve_index, sampled=torch.isin(slot, torch.tensor(SAMPLED)),
                           greedy=torch.isin(slot, torch.tensor(GREEDY)))


def _expected(step):
    """Each kind of row decided on its own: SGLang's walk (every row exact), the sampled verifier on
    the sampled rows' parameters, the greedy verifier on the greedy rows'."""
    r, b = step.rnd, step.batch
    probs = torch.softmax(r.logits, dim=-1).view(BS, W, -1)

    def walk(remaining, floor, cap, power):
        p = torch.zeros(BS * W, dtype=torch.int32)
        a = torch.full((BS, K + 1), -1, dtype=torch.int32)
        n = torch.zeros(BS, dtype=torch.int32)
        out = asd_sampled_verify(p, a, n, r.candidates, step.retrieve_index, r.retrieve_next_token,
                                 r.retrieve_next_sibling, b.coins, b.final_coins, probs, remaining, floor, cap, power,
                                 max_children=TOPK)
        return p, a, n, out

    zero = torch.zeros(BS)
    stock = walk(zero, zero, zero.int(), zero)
    on = step.sampled
    sampled = walk(torch.where(on, BUDGET, 0.0), torch.where(on, FLOOR, 0.0), torch.where(on, CAP, 0).int(),
                   torch.where(on, POWER, 0.0))
    greedy = asd_verify(r.candidates, r.logits, r.retrieve_next_token, r.retrieve_next_sibling,
                        torch.where(step.greedy, 8.0, 0.0), torch.where(step.greedy, 0.5, 0.0),
                        torch.where(step.greedy, 2, 0).int(), K)
    return stock, sampled, greedy


def test_each_kind_of_row_gets_its_own_verifier_and_charge(step):
    predict, accept_lens, accept_index = seam.eagle_sample_around(_sampling_eagle_sample, step.verify_input,
                                                                  step.batch, step.logits_output)
    stock, sampled, greedy = _expected(step)
    s, g = step.sampled, step.greedy
    want_index = torch.where(s[:, None], sampled[1], torch.where(g[:, None], greedy.accept_index, stock[1]))
    want_num = torch.where(s, sampled[2], torch.where(g, greedy.num_correct_drafts, stock[2]))
    want_predict = torch.where(s[:, None], sampled[0].view(BS, W),
                               torch.where(g[:, None], greedy.predict.view(BS, W), stock[0].view(BS, W)))
    assert torch.equal(accept_index, want_index)
    assert torch.equal(accept_lens - 1, want_num)
    assert torch.equal(predict.view(BS, W), want_predict)
    spent = sampled[3].spent
    assert spent[s].sum() > 0 and greedy.spent[g].sum() > 0, "the round must relax nodes and take exceptions"
    assert torch.equal(spent[~s], torch.zeros(BS)[~s]), "only the sampled rows are relaxed"
    want_remaining = torch.where(s, BUDGET - spent, torch.where(g, 8.0 - greedy.spent, 0.0))
    assert torch.equal(step.table.remaining[1:], want_remaining)
    assert bool((spent <= BUDGET).all())
    aux = step.logits_output.auxiliary_device_output
    assert isinstance(aux, ASDRoundOutput)
    assert torch.equal(aux.sampled_active, s) and torch.equal(aux.active, g)
    assert torch.allclose(aux.relaxed_charge.sum(1), spent, atol=1e-6)
    assert torch.equal(aux.relaxed, sampled[3].relaxed & s[:, None])


def test_budget_zero_sampled_rows_are_sglangs_walk(step):
    step.table.admit(SAMPLED, [object()] * 4, [0.0] * 4, [FLOOR] * 4, [CAP] * 4, [set()] * 4,
                     rule=[SAMPLED_RULE_ID] * 4, power=[POWER] * 4)  # budget 0: zero ledger, SGLang's walk
    predict, accept_lens, accept_index = seam.eagle_sample_around(_sampling_eagle_sample, step.verify_input,
                                                                  step.batch, step.logits_output)
    stock, _, greedy = _expected(step)
    g = step.greedy
    assert torch.equal(accept_index, torch.where(g[:, None], greedy.accept_index, stock[1]))
    assert torch.equal(predict.view(BS, W), torch.where(g[:, None], greedy.predict.view(BS, W), stock[0].view(BS, W)))


def test_the_sampling_branch_never_syncs_with_the_host(step, monkeypatch):
    assert step.table.has_staged  # the staged admissions are applied inside the call, too

    forbid_host_sync(monkeypatch, "in the verify seam")
    seam.eagle_sample_around(_sampling_eagle_sample, step.verify_input, step.batch, step.logits_output)
    monkeypatch.undo()
    assert step.logits_output.auxiliary_device_output.relaxed is not None


def test_without_a_sampled_row_the_kernel_result_is_untouched(step, monkeypatch):
    step.table.release(list(SAMPLED))
    called = []
    monkeypatch.setattr(verify_step, "asd_sampled_verify", lambda *a, **k: called.append(1))
    seam.eagle_sample_around(_sampling_eagle_sample, step.verify_input, step.batch, step.logits_output)
    assert not called and step.logits_output.auxiliary_device_output.sampled_active is None


def test_rank_zeros_receipts_are_every_ranks(step, monkeypatch):
    """TP: the seam hands the sampled verifier's output to ``rank_consistent`` with SGLang's sampling
    group (SGLang then broadcasts the merged tokens itself): what comes back is what is charged."""
    seen = []

    def rank0(out, group):
        seen.append(group)
        return type(out)(**{f: torch.zeros_like(getattr(out, f)) if f == "spent" else getattr(out, f)
                            for f in out.__dataclass_fields__})

    monkeypatch.setattr(verify_step, "rank_consistent", rank0)
    monkeypatch.setattr(seam, "_sampling_group", lambda: "group")
    monkeypatch.setattr(seam, "_broadcast_group", lambda batch: None)
    seam.eagle_sample_around(_sampling_eagle_sample, step.verify_input, step.batch, step.logits_output)
    assert "group" in seen
    s = step.sampled
    assert torch.equal(step.table.remaining[1:][s], torch.full((4,), BUDGET)), "charged rank 0's spent"


def test_the_sampled_hook_is_registered_only_where_the_platform_has_the_kernel(monkeypatch):
    from sglang.kernels.ops.speculative import verify_sampling

    monkeypatch.setattr(verify_sampling, "tree_speculative_sampling_target_only", None)
    assert seam.sampling_hooks() == []
    monkeypatch.setattr(verify_sampling, "tree_speculative_sampling_target_only", _kernel)
    assert seam.sampling_hooks() == [(seam.TREE_SAMPLING, seam.tree_sampling_around)]


@pytest.mark.parametrize("spec, greedy_verify, kernel, reason", [
    (dict(), False, True, None),
    (dict(), True, True, "sampling"),  # CPU: SGLang commits argmax for sampled rows
    (dict(), False, False, "sampling"),  # no sampling kernel on this platform
    (dict(speculative_accept_threshold_single=0.9), False, True, "thresholds"),
    (dict(speculative_accept_threshold_acc=0.5), False, True, "thresholds"),
    (dict(speculative_use_rejection_sampling=True), False, True, "rejection_sampling"),
])
def test_why_a_sampled_request_is_not_served_by_the_sampled_rule(monkeypatch, spec, greedy_verify, kernel, reason):
    from sglang.kernels.ops.speculative import verify_sampling
    from sglang.srt import runtime_context
    from sglang.srt.speculative import eagle_utils

    from sglang_asd.sglang_seams.scheduler import scheduler

    values = {**dict(speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
                     speculative_accept_threshold_acc=1.0), **spec}
    monkeypatch.setattr(runtime_context, "get_spec", lambda: SimpleNamespace(**values))
    monkeypatch.setattr(eagle_utils, "_verify_uses_greedy", lambda **kw: greedy_verify)
    monkeypatch.setattr(verify_sampling, "tree_speculative_sampling_target_only", _kernel if kernel else None)
    assert scheduler._sampling_reason() == reason


@pytest.mark.parametrize("budget, can_run, reason", [
    (0.0, True, "strict"), (8.0, True, None), (0.0, False, "sampling"), (8.0, False, "sampling")])
def test_a_sampled_requests_reason(monkeypatch, budget, can_run, reason):
    """Where the sampled rule cannot run, a sampled request says so at any budget (stock CPU SGLang);
    where it can, budget 0 is exact sampling ("strict")."""
    from sglang_asd.sglang_seams.scheduler import scheduler

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    monkeypatch.setattr(scheduler, "sampling_reason", lambda: None if can_run else "sampling")
    params = SimpleNamespace(top_k=-1, temperature=0.7)
    choice = RequestASD(budget, ASDConfig(), SampledConfig())
    assert scheduler._reason(choice, params, True, None, SpeculativeAlgorithm.EAGLE) == reason


@pytest.mark.parametrize("algorithm", ["DSPARK", "DFLASH", "UNO"])
def test_sampled_requests_on_drafters_that_bypass_the_sampling_kernel_say_sampling(monkeypatch, algorithm):
    """DSPARK, DFLASH and UNO sample without the hooked kernel: a sampled request says "sampling" at any
    budget, even where the kernel could run (SGLang's real algorithm enum, not a stand-in)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_asd.sglang_seams.scheduler import scheduler

    monkeypatch.setattr(scheduler, "sampling_reason", lambda: None)
    params = SimpleNamespace(top_k=-1, temperature=0.7)
    for budget in (0.0, 8.0):
        choice = RequestASD(budget, ASDConfig(), SampledConfig())
        assert scheduler._reason(choice, params, True, None, SpeculativeAlgorithm[algorithm]) == "sampling"
