"""The verify seam (``sglang_seams/scheduler/eagle_sample.py``) driven as SGLang's ``eagle_sample`` calls it.

``_sglang_eagle_sample`` has SGLang 0.5.23's shape on its greedy branch (buffers allocated zero/-1,
``target_predict = argmax``, ``verify_tree_greedy_func`` called by keyword) and its sampling
branch (no ``verify_tree_greedy_func`` call); the strict walk is the test kit's torch port.
"""

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.policy import ASDConfig
from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.scheduler import eagle_sample as seam
from sglang_asd.sglang_seams.step import verify_step
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
from sglang_asd.testing import make_round, strict_verify
from sglang_asd.verify import asd_verify
from tests.host_sync import forbid_host_sync

BS, W, K = 8, 6, 5


def _sglang_verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                               retrieve_next_token, retrieve_next_sibling, target_predict, topk=-1):
    p, a, n = strict_verify(candidates, None, retrieve_next_token, retrieve_next_sibling,
                            accept_index.shape[1] - 1, target_predict=target_predict)
    predicts.copy_(p), accept_index.copy_(a), accept_token_num.copy_(n)
    return predicts, accept_index, accept_token_num


def _greedy_eagle_sample(verify_input, batch, logits_output, grammar_mask=None):
    logits = logits_output.next_token_logits
    predict = torch.zeros(logits.shape[0], dtype=torch.int32)
    accept_index = torch.full((BS, verify_input.max_tree_depth), -1, dtype=torch.int32)
    num_correct = torch.empty(BS, dtype=torch.int32)
    target_predict = logits.argmax(dim=-1).reshape(BS, verify_input.draft_token_num)
    predict, accept_index, num_correct = seam.verify_tree_greedy_around(
        _sglang_verify_tree_greedy, predicts=predict, accept_index=accept_index, accept_token_num=num_correct,
        candidates=verify_input.draft_token.view(BS, -1), retrieve_index=None,
        retrieve_next_token=verify_input.retrieve_next_token, retrieve_next_sibling=verify_input.retrieve_next_sibling,
        target_predict=target_predict, topk=-1)
    return predict, num_correct + 1, accept_index


def _sampling_eagle_sample(verify_input, batch, logits_output, grammar_mask=None):
    p, a, n = strict_verify(verify_input.draft_token.view(BS, -1), logits_output.next_token_logits,
                            verify_input.retrieve_next_token, verify_input.retrieve_next_sibling, K)
    return p, n + 1, a


@pytest.fixture
def step(monkeypatch):
    from sglang_asd.hooks.registry import resolve as _resolve

    monkeypatch.setattr(runtime, "_RUNTIME", None)
    monkeypatch.setattr(verify_step, "tp_group", lambda: None)  # one rank
    runtime.set_runtime(ASDServerSettings())
    seam.check_signatures(_resolve(seam.EAGLE_SAMPLE), _resolve(seam.VERIFY_TREE_GREEDY))  # as install does
    rnd = make_round(seed=0, bs=BS, W=W, K=K, shape="eagle", topk=2, rows="asd", stop=False)
    table = ASDLedgerTable(BS + 1, "cpu")
    ledgers = [RequestLedger(choice=RequestASD(8.0, ASDConfig())) for _ in range(BS)]
    asd_rows = list(range(1, BS + 1, 2))  # odd slots are ASD rows, even slots strict (zero rows)
    table.admit(asd_rows, [ledgers[s - 1] for s in asd_rows], [8.0] * len(asd_rows), [0.25] * len(asd_rows),
                [2] * len(asd_rows), [{0}] * len(asd_rows))
    batch = SimpleNamespace(req_to_token_pool=SimpleNamespace(_asd_table=table),
                            req_pool_indices=torch.arange(1, BS + 1), forward_mode=SimpleNamespace(is_idle=lambda: False),
                            spec_algorithm=SimpleNamespace(is_ngram=lambda: False),
                            sampling_info=SimpleNamespace(is_all_greedy=True))
    verify_input = SimpleNamespace(max_tree_depth=K + 1, draft_token_num=W, draft_token=rnd.candidates.reshape(-1),
                                   retrieve_next_token=rnd.retrieve_next_token,
                                   retrieve_next_sibling=rnd.retrieve_next_sibling)
    logits_output = SimpleNamespace(next_token_logits=rnd.logits, auxiliary_device_output=None)
    return SimpleNamespace(rnd=rnd, table=table, batch=batch, verify_input=verify_input, logits_output=logits_output,
                           asd=torch.tensor([s in asd_rows for s in range(1, BS + 1)]))


def _forbid_host_sync(monkeypatch):
    forbid_host_sync(monkeypatch, "in the verify seam")


@pytest.mark.parametrize("branch", [_greedy_eagle_sample, _sampling_eagle_sample], ids=["greedy", "sampling"])
def test_the_seam_never_syncs_with_the_host(step, monkeypatch, branch):
    assert step.table.has_staged  # the staged admissions are applied inside the call, too
    _forbid_host_sync(monkeypatch)
    seam.eagle_sample_around(branch, step.verify_input, step.batch, step.logits_output)
    monkeypatch.undo()
    assert isinstance(step.logits_output.auxiliary_device_output, ASDRoundOutput)


@pytest.mark.parametrize("branch", [_greedy_eagle_sample, _sampling_eagle_sample], ids=["greedy", "sampling"])
def test_asd_rows_take_asd_verify_strict_rows_stay_sglangs(step, branch):
    predict, accept_lens, accept_index = seam.eagle_sample_around(branch, step.verify_input, step.batch,
                                                                  step.logits_output)
    r = step.rnd
    strict = strict_verify(r.candidates, r.logits, r.retrieve_next_token, r.retrieve_next_sibling, K)
    asd = asd_verify(r.candidates, r.logits, r.retrieve_next_token, r.retrieve_next_sibling,
                     torch.full((BS,), 8.0), torch.full((BS,), 0.25), torch.full((BS,), 2, dtype=torch.int32), K,
                     stop_tokens=torch.zeros((BS, 1), dtype=torch.int64))
    rows = step.asd
    assert torch.equal(accept_index, torch.where(rows[:, None], asd.accept_index, strict[1]))
    assert torch.equal(accept_lens - 1, torch.where(rows, asd.num_correct_drafts, strict[2]))
    assert torch.equal(predict.view(BS, W), torch.where(rows[:, None], asd.predict.view(BS, W), strict[0].view(BS, W)))
    charged = step.table.remaining[1:]
    assert torch.equal(charged, torch.where(rows, 8.0 - asd.spent, torch.zeros(BS)))
    assert asd.spent[rows].sum() > 0, "the round must exercise exceptions"


def test_depth_zero_is_sglangs_result_untouched(step):
    sentinel = (torch.zeros(BS, dtype=torch.int32), torch.ones(BS, dtype=torch.int32), torch.zeros((BS, 1)))
    step.verify_input.max_tree_depth = 1  # --speculative-adaptive's root-only verify: W = 1, K = 0
    out = seam.eagle_sample_around(lambda verify_input, batch, logits_output: sentinel, step.verify_input,
                                   step.batch, step.logits_output)
    assert out is sentinel and step.logits_output.auxiliary_device_output is None


# --- rules per row and NGRAM's gate depth -------------------------------------------------------


def _admit_rules(step, rules):
    """Re-admit every odd slot under ``rules`` (cycled): the batch mixes asd, local, margin, threshold."""
    from sglang_asd.verify.rules import RULE_ID

    slots = list(range(1, BS + 1, 2))
    names = [rules[i % len(rules)] for i in range(len(slots))]
    fly = [r.startswith("fly") for r in names]  # fly rows: threshold 0 (the gate column), window 1 (cap), top-3 (power)
    gates = [0.0 if f else 0.5 if r in ("asd", "local") else 4.0 for r, f in zip(names, fly)]
    step.table.admit(slots, [object() for _ in slots], [8.0] * len(slots), gates, [1 if f else 2 for f in fly],
                     [{0}] * len(slots), rule=[RULE_ID[r] for r in names], power=[3.0 if f else 0.0 for f in fly])
    return names, torch.tensor(gates)


@pytest.mark.parametrize("rules", [("asd", "local", "margin", "threshold"), ("fly", "asd", "fly-bounded", "margin")],
                         ids=["regret-rules", "fly"])
@pytest.mark.parametrize("branch", [_greedy_eagle_sample, _sampling_eagle_sample], ids=["greedy", "sampling"])
def test_each_row_takes_its_own_rule_and_only_ledger_rows_are_charged(step, monkeypatch, branch, rules):
    from sglang_asd.verify.rules import RULE_ID

    names, gates = _admit_rules(step, list(rules))
    _forbid_host_sync(monkeypatch)
    predict, accept_lens, accept_index = seam.eagle_sample_around(branch, step.verify_input, step.batch,
                                                                  step.logits_output)
    monkeypatch.undo()
    r = step.rnd
    rows = step.asd
    rule = torch.zeros(BS, dtype=torch.int32)
    rule[rows] = torch.tensor([RULE_ID[n] for n in names], dtype=torch.int32)
    gate = torch.zeros(BS)
    gate[rows] = gates
    is_fly = (rule == RULE_ID["fly"]) | (rule == RULE_ID["fly-bounded"])
    want = asd_verify(r.candidates, r.logits, r.retrieve_next_token, r.retrieve_next_sibling,
                      torch.where(rows, 8.0, 0.0), gate, torch.where(rows, torch.where(is_fly, 1, 2), 0).int(), K,
                      stop_tokens=torch.zeros((BS, 1), dtype=torch.int64), rule=rule,
                      fly_top_k=torch.where(is_fly, 3.0, 0.0))
    strict = strict_verify(r.candidates, r.logits, r.retrieve_next_token, r.retrieve_next_sibling, K)
    assert torch.equal(accept_index, torch.where(rows[:, None], want.accept_index, strict[1]))
    assert torch.equal(accept_lens - 1, torch.where(rows, want.num_correct_drafts, strict[2]))
    is_asd = (rule == RULE_ID["asd"]) | (rule == RULE_ID["fly-bounded"])  # the rules with a ledger
    assert torch.equal(step.table.remaining[1:], torch.where(rows, 8.0 - torch.where(is_asd, want.spent, 0.0), 0.0))
    if "fly" in rules:
        assert want.num_exceptions[rows & is_fly].sum() > 0, "fly rows must have deferred something"
    assert want.spent[rows & ~is_asd].sum() > 0, "the uncharged rules must have spent something"
    aux = step.logits_output.auxiliary_device_output
    assert torch.equal(aux.exception_regret.sum(1), torch.where(rows, want.spent, 0.0)), "spent reported for every rule"


def test_a_batch_with_a_margin_row_takes_the_torch_verifier_on_cuda(step, monkeypatch):
    """The kernel choice reads the ledger table's host view (no sync): asd and local rows may take
    the Triton kernel, a batch with a margin or threshold row takes the torch verifier."""
    calls = []
    real = verify_step.asd_verify
    monkeypatch.setattr(verify_step, "asd_verify", lambda *a, **k: calls.append(k["rules_present"]) or real(*a, **k))
    seam.eagle_sample_around(_greedy_eagle_sample, step.verify_input, step.batch, step.logits_output)
    _admit_rules(step, ["asd", "margin"])
    seam.eagle_sample_around(_greedy_eagle_sample, step.verify_input, step.batch, step.logits_output)
    from sglang_asd.verify.rules import needs_torch_path

    assert calls == [{"asd"}, {"asd", "margin"}]
    assert [needs_torch_path(c) for c in calls] == [False, True]


def test_ngram_rows_gate_on_their_tree_depth(step):
    """NGRAM (host-known from the batch): the seam asks the verifier for each row's real tree depth
    in q_i = K - i; the same call for EAGLE keeps K."""
    for ngram in (False, True):
        step.batch.spec_algorithm = SimpleNamespace(is_ngram=lambda ngram=ngram: ngram)
        seen = []
        real = verify_step.asd_verify
        verify_step.asd_verify = lambda *a, **k: seen.append(k["tree_depth_gate"]) or real(*a, **k)
        try:
            seam.eagle_sample_around(_greedy_eagle_sample, step.verify_input, step.batch, step.logits_output)
        finally:
            verify_step.asd_verify = real
        assert seen == [ngram]


def test_a_kernel_variant_is_checked_once_per_call_shape(step, monkeypatch, caplog):
    """Serving's warm-up check (``verify_warmup.py``) costs a set lookup per step: the variant key is
    computed the first time a call shape is met, and each variant is logged once, INFO if the
    warm-up listed it, WARNING if not (the lines tests/integration/test_verify_warmup.py reads)."""
    import logging

    from sglang_asd.sglang_seams.step import warmup as verify_warmup
    from sglang_asd.verify.warmup import key_of_call

    monkeypatch.setattr(verify_warmup, "_CHECKED_SHAPES", set())
    keys = []
    monkeypatch.setattr(verify_warmup, "key_of_call", lambda *a: keys.append(key_of_call(*a)) or keys[-1])
    r = step.rnd
    greedy_key = key_of_call(r.candidates, r.logits, K, None, torch.zeros((BS, W), dtype=torch.int64))
    sampling_key = key_of_call(r.candidates, r.logits, K)  # no target_predict: a variant of its own
    runtime.get_runtime().warmed_variants = frozenset({greedy_key})  # the sampling branch's is missing
    with caplog.at_level(logging.INFO, logger=verify_warmup.__name__):
        for branch in [_greedy_eagle_sample] * 3 + [_sampling_eagle_sample] * 2:
            seam.eagle_sample_around(branch, step.verify_input, step.batch, step.logits_output)
    assert keys == [greedy_key, sampling_key] and greedy_key != sampling_key
    messages = [rec.getMessage() for rec in caplog.records]
    assert sum("verify variant seen" in m for m in messages) == 1
    assert sum("was not warmed up" in m for m in messages) == 1


def test_a_renamed_sglang_parameter_stops_the_start():
    """The seam binds SGLang's arguments by name: SGLang 0.5.23's functions pass the start-up
    check, and the same verify function with one parameter renamed (as an upstream refactor
    might do) is refused, naming it, instead of being misbound silently."""
    import inspect

    from sglang_asd.hooks.registry import resolve as _resolve
    from sglang_asd.hooks.arguments import SeamSignatureMismatch

    real_sample, real_verify = _resolve(seam.EAGLE_SAMPLE), _resolve(seam.VERIFY_TREE_GREEDY)
    seam.check_signatures(real_sample, real_verify)

    sig = inspect.signature(real_verify)
    assert "candidates" in sig.parameters
    params = [p.replace(name="draft_tokens") if p.name == "candidates" else p for p in sig.parameters.values()]

    def renamed(*args, **kwargs):
        raise AssertionError("never called")

    renamed.__signature__ = sig.replace(parameters=params)
    with pytest.raises(SeamSignatureMismatch, match=r"no longer takes \['candidates'\]"):
        seam.check_signatures(real_sample, renamed)
