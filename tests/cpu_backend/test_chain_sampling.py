"""The CPU port of SGLang's chain speculative sampling kernel (``cpu_backend/seams/chain_sampling.py``):
equal to a plain per-row reference of the kernel's arithmetic on seeded cases (classic and block
verification), exact in distribution, and its greedy twin equal to argmax verification."""

import pytest
import torch

from sglang_asd.cpu_backend.seams.chain_sampling import chain_greedy_verify, chain_speculative_sampling


def reference(candidates, uniform, final_coins, target, draft, block_verification=False):
    """The kernel's walk for one row at a time, in Python scalars over float32 tensors:
    (accepted drafts, the slots written in accept_index, {predicts slot: token})."""
    bs, width = candidates.shape
    steps, vocab = width - 1, target.shape[-1]
    out = []
    for b in range(bs):
        num, scale, norm = 0, torch.tensor(1.0), torch.tensor(-1.0)
        if block_verification:
            prefix, h = [], torch.tensor(1.0)
            for s in range(1, width):
                tok = candidates[b, s]
                p, q = target[b, s - 1, tok], draft[b, s - 1, tok]
                h = torch.minimum(h * p / q, torch.tensor(1.0)) if 0 < q <= 1 else torch.tensor(0.0)
                prefix.append(h)
            for s in range(steps, 0, -1):
                if num:
                    break
                h, coin = prefix[s - 1], uniform[b, s - 1]
                if coin < h:
                    accept, mass = h, torch.tensor(-1.0)
                    if s < steps and 0 < h < 1:
                        mass = torch.clamp(h * target[b, s] - draft[b, s], min=0).sum()
                        accept = mass / (mass + 1 - h)
                    if coin < accept:
                        num, scale, norm = s, h, mass
        else:
            for s in range(1, width):
                tok = candidates[b, s]
                p, q = target[b, s - 1, tok], draft[b, s - 1, tok]
                if not (0 < q <= 1 and uniform[b, s - 1] * q < p):
                    break
                num = s
        p_row = target[b, num]
        if num == steps:
            val = p_row
        else:
            q_row = draft[b, num]
            q_row = torch.where((q_row >= 0) & (q_row <= 1), q_row, torch.zeros_like(q_row))
            val = torch.clamp(scale * p_row - q_row, min=0)
        total = val.sum() if norm < 0 else norm
        final, cum = vocab - 1, torch.tensor(0.0)
        for v in range(vocab):
            cum = cum + val[v]
            if cum > final_coins[b] * total:
                final = v
                break
        writes = {b * width + s - 1: int(candidates[b, s]) for s in range(1, num + 1)}
        writes[b * width + num] = final
        out.append((num, [b * width + s for s in range(num + 1)], writes))
    return out


def make_case(seed, bs=16, width=4, vocab=12, sharp=3.0):
    g = torch.Generator().manual_seed(seed)
    target = torch.softmax(sharp * torch.randn(bs, width, vocab, generator=g), dim=-1)
    draft = torch.softmax(sharp * torch.randn(bs, width - 1, vocab, generator=g), dim=-1)
    # drafts sampled from the draft rows, half of them from the target's instead (long accepted prefixes)
    src = torch.where(torch.rand(bs, 1, 1, generator=g) < 0.5, draft, target[:, :-1])
    drafts = torch.multinomial(src.reshape(-1, vocab), 1, generator=g).view(bs, width - 1)
    candidates = torch.cat([torch.randint(vocab, (bs, 1), generator=g), drafts], dim=1)
    uniform = torch.rand(bs, width - 1, generator=g)
    final_coins = torch.rand(bs, generator=g)
    return candidates, uniform, final_coins, target, draft


def run(fn, candidates, uniform, final_coins, target, draft, **kw):
    bs, width = candidates.shape
    predicts = torch.full((bs * width,), -7, dtype=torch.int32)
    accept_index = torch.full((bs, width), -7, dtype=torch.int32)
    accept_num = torch.full((bs,), -7, dtype=torch.int32)
    retrive_index = torch.arange(bs * width, dtype=torch.int64).view(bs, width)
    fn(predicts=predicts, accept_index=accept_index, accept_token_num=accept_num, candidates=candidates,
       retrive_index=retrive_index, retrive_next_token=None, retrive_next_sibling=None, uniform_samples=uniform,
       uniform_samples_for_final_sampling=final_coins, target_probs=target, draft_probs=draft,
       threshold_single=1.0, threshold_acc=1.0, deterministic=True, **kw)
    return predicts, accept_index, accept_num


@pytest.mark.parametrize("block_verification", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_port_equals_the_reference(seed, block_verification):
    case = make_case(seed, width=2 + seed % 4)
    candidates, uniform, final_coins, target, draft = case
    if seed % 3 == 0:  # a draft probability that is not a probability rejects (and reads as 0 in the residual)
        draft[0, 0, candidates[0, 1]] = float("nan")
        draft[1, :, :] = -0.5
    predicts, accept_index, accept_num = run(chain_speculative_sampling, *case, block_verification=block_verification)
    expected = reference(*case, block_verification=block_verification)
    assert accept_num.tolist() == [num for num, _, _ in expected]
    untouched = torch.ones_like(predicts, dtype=torch.bool)
    for b, (num, slots, writes) in enumerate(expected):
        assert accept_index[b, :num + 1].tolist() == slots
        assert (accept_index[b, num + 1:] == -7).all()  # only accepted slots are written, as in the kernel
        for slot, token in writes.items():
            assert predicts[slot].item() == token, (b, slot)
            untouched[slot] = False
    assert (predicts[untouched] == -7).all()
    assert 0 < accept_num.sum() < accept_num.numel() * (candidates.shape[1] - 1)  # both outcomes exercised


@pytest.mark.parametrize("block_verification", [False, True])
def test_output_token_follows_the_target(block_verification):
    """Exactness: whatever the draft, the first output token (the first draft if accepted, else the
    final sample at row 0) is distributed as target row 0."""
    n, vocab, width = 40000, 5, 3
    g = torch.Generator().manual_seed(1)
    target1 = torch.softmax(2 * torch.randn(width, vocab, generator=g), dim=-1)
    draft1 = torch.softmax(2 * torch.randn(width - 1, vocab, generator=g), dim=-1)
    target, draft = target1.expand(n, width, vocab).contiguous(), draft1.expand(n, width - 1, vocab).contiguous()
    drafts = torch.stack([torch.multinomial(draft1[s], n, replacement=True, generator=g) for s in range(width - 1)], 1)
    candidates = torch.cat([torch.zeros(n, 1, dtype=torch.int64), drafts], dim=1)
    predicts, _, _ = run(chain_speculative_sampling, candidates, torch.rand(n, width - 1, generator=g),
                         torch.rand(n, generator=g), target, draft, block_verification=block_verification)
    first = predicts.view(n, width)[:, 0].long()
    freq = torch.bincount(first, minlength=vocab).double() / n
    assert torch.allclose(freq, target1[0].double(), atol=0.012), (freq, target1[0])


def test_greedy_twin_accepts_argmax_matches():
    candidates, uniform, final_coins, target, draft = make_case(5, width=5)
    argmax = target.argmax(-1)
    candidates[:8, 1:] = argmax[:8, :-1]  # the first 8 rows propose the argmax chain: all accepted
    predicts, accept_index, accept_num = run(chain_greedy_verify, candidates, uniform, final_coins, target, draft)
    for b in range(candidates.shape[0]):
        num = 0
        while num < 4 and candidates[b, num + 1] == argmax[b, num]:
            num += 1
        assert accept_num[b] == num
        row = predicts.view(-1, 5)[b]
        assert row[:num].tolist() == candidates[b, 1:num + 1].tolist() and row[num] == argmax[b, num]
    assert (accept_num[:8] == 4).all() and (accept_num[8:] < 4).any()


@pytest.mark.parametrize("fn", [chain_speculative_sampling, chain_greedy_verify])
def test_anchor_only_block_samples_the_bonus(fn):
    """W = 1 (no draft token): nothing to accept; the output token comes from target row 0."""
    candidates, uniform, final_coins, target, draft = make_case(3, width=1)
    predicts, accept_index, accept_num = run(fn, candidates, uniform, final_coins, target, draft)
    assert (accept_num == 0).all() and accept_index[:, 0].tolist() == list(range(candidates.shape[0]))
    if fn is chain_greedy_verify:
        assert predicts.tolist() == target[:, 0].argmax(-1).tolist()
    else:
        assert predicts.tolist() == [final for _, _, writes in reference(candidates, uniform, final_coins, target, draft)
                                     for final in writes.values()]
