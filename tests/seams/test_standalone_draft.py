"""The index arithmetic of ``sglang_seams/scheduler/standalone_draft.py``, without a server.

The end-to-end claim (a draft equal to the target accepts everything) is
``tests/integration/test_standalone_self_draft.py``; here the two input rewrites are checked on
small batches against SGLang 0.5.23's own rotation rule (``EagleDraftWorker._draft_extend_for_prefill``:
``cat(input_ids[1:], tail)`` per request, the tail being the next prompt token for a chunked request).
"""

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.sglang_seams.scheduler import standalone_draft


class _Mode:
    def __init__(self, idle=False):
        self.idle = idle

    def is_idle(self):
        return self.idle


def _runner(standalone=True):
    return SimpleNamespace(spec_algorithm=SimpleNamespace(is_standalone=lambda: standalone))


def _sglang_prefill_rotation(self, batch, hidden, next_token_ids, mm_input_embeds=None, kv_loc_plan=None):
    """SGLang 0.5.23's rotation (eagle_worker_v2.py ~980 and eagle_utils._eagle_prefill_tail_tokens)."""
    tails = next_token_ids.clone()
    if batch.chunked_req_next_prompt_token is not None:
        tails[batch.chunked_index] = batch.chunked_req_next_prompt_token
    new, pt = torch.empty_like(batch.input_ids), 0
    for i, n in enumerate(batch.extend_lens):
        new[pt:pt + n] = torch.cat((batch.input_ids[pt + 1:pt + n], tails[i].reshape(1)))
        pt += n
    batch.input_ids = new
    batch.seen = new.clone()  # what the draft model's forward reads
    return SimpleNamespace(bonus_tokens=next_token_ids)


def test_prefill_draft_extend_sees_each_chunk_unshifted():
    ids = torch.tensor([10, 11, 12, 20, 21, 30, 31, 32, 33])  # [T] three requests, the last one a chunk
    batch = SimpleNamespace(input_ids=ids.clone(), extend_lens=[3, 2, 4], forward_mode=_Mode(),
                            chunked_req_next_prompt_token=99, chunked_index=2)
    next_token_ids = torch.tensor([13, 22, 0])  # [bs] the target's tokens
    out = standalone_draft.draft_extend_for_prefill_around(_sglang_prefill_rotation, object(), batch, None,
                                                           next_token_ids)
    assert torch.equal(batch.seen, ids), "the draft must see x_0..x_{n-1} at positions 0..n-1"
    assert torch.equal(out.bonus_tokens, next_token_ids)
    assert batch.chunked_req_next_prompt_token == 99, "the batch's chunk state is restored"


def test_prefill_with_one_token_requests():
    ids = torch.tensor([7, 8, 9])
    batch = SimpleNamespace(input_ids=ids.clone(), extend_lens=[1, 1, 1], forward_mode=_Mode(),
                            chunked_req_next_prompt_token=None, chunked_index=None)
    standalone_draft.draft_extend_for_prefill_around(_sglang_prefill_rotation, object(), batch, None,
                                                     torch.tensor([1, 2, 3]))
    assert torch.equal(batch.seen, ids)


def _verify_batch(draft_token, bs):
    verify_input = SimpleNamespace(draft_token=draft_token, is_verify_input=lambda: True)
    return SimpleNamespace(seq_lens=torch.full((bs,), 5), forward_mode=_Mode(), spec_info=verify_input)


def test_draft_extend_after_verify_feeds_each_node_its_own_token():
    W = 4
    draft_token = torch.tensor([100, 101, 102, 103, 200, 201, 202, 203])  # [bs*W] node 0 = root
    predict = torch.tensor([101, 102, 555, 0, 201, 0, 0, 0])  # [bs*W] token after node i
    seen = {}

    def original(ext, batch, predict, num_draft_tokens, runner, *args, **kwargs):
        seen["ids"] = predict

    ext = SimpleNamespace(num_front_tokens=0)
    standalone_draft.prepare_for_draft_extend_around(original, ext, _verify_batch(draft_token, 2), predict, W,
                                                     _runner())
    assert seen["ids"].tolist() == [100, 101, 102, 555, 200, 201, 0, 0]

    standalone_draft.prepare_for_draft_extend_around(original, ext, _verify_batch(draft_token, 2), predict, W,
                                                     _runner(standalone=False))
    assert seen["ids"] is predict, "EAGLE's draft-extend is left alone"


def test_prepare_for_draft_reads_sglangs_arguments_by_name_bound_at_install():
    """SGLang passes ``prepare_for_draft``'s arguments by position and ``target_translator`` (keyword
    only) by keyword; the hook reads them by the positions SGLang 0.5.23's signature gives them,
    taken once at install, and an EAGLE draft's call passes through untouched."""
    from sglang_asd.hooks.registry import resolve as _resolve
    from sglang_asd.hooks.arguments import NamedArguments

    standalone_draft.check_signatures(_resolve(standalone_draft.PREPARE_FOR_DRAFT))
    a = standalone_draft.PREPARE_FOR_DRAFT_ARGS
    args = ("draft_input", "pool", "batch", "graphs", _runner(standalone=False), 2, 3)
    assert a.of(args, {"target_translator": "plan"}) == ("draft_input", "pool", "batch", args[4], 2, "plan")
    assert a.of(args, {})[-1] is None, "a parameter left out reads as its default"
    assert a.replaced(args, {"target_translator": "plan"}, "target_translator", None) == (
        args, {"target_translator": None})
    seen = []
    standalone_draft.prepare_for_draft_around(lambda *x, **k: seen.append((x, k)), *args, target_translator="plan")
    assert seen == [(args, {"target_translator": "plan"})]

    def f(x, y=1):
        pass

    positional = NamedArguments("tests.f", ("y",))
    with pytest.raises(RuntimeError, match="before install_scheduler_hooks"):
        positional.of((0, 5), {})
    positional.bind(f)
    assert positional.of((0, 5), {}) == (5,) and positional.of((0,), {"y": 6}) == (6,)
    assert positional.of((0,), {}) == (1,)
    assert positional.replaced((0, 5), {}, "y", 7) == ((0, 7), {})
