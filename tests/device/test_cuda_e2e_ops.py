"""The GPU e2e kit's plain-torch ``sgl_kernel`` stand-ins (``scripts/device/cuda_standin/ops.py``),
checked on CPU against straightforward references: the norms, gated activations, rotary embedding,
renormalisations, and the port of SGLang's target-only tree speculative sampling kernel against a
row-by-row transcription of the CUDA code."""

from __future__ import annotations

import math
import pathlib
import random
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts" / "device"))

from cuda_standin import ops  # noqa: E402


def _rms_ref(x, w, eps, offset):
    return (x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps) * (w.double() + offset)).to(x.dtype)


@pytest.mark.parametrize("offset,fn", [(0.0, ops.rmsnorm), (1.0, ops.gemma_rmsnorm)])
def test_rmsnorm_and_out(offset, fn):
    x, w = torch.randn(5, 64), torch.randn(64)
    torch.testing.assert_close(fn(x, w, 1e-6), _rms_ref(x, w, 1e-6, offset), rtol=1e-5, atol=1e-5)
    out = torch.empty_like(x)
    assert fn(x, w, 1e-6, out=out) is out
    torch.testing.assert_close(out, _rms_ref(x, w, 1e-6, offset), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("offset,fn", [(0.0, ops.fused_add_rmsnorm), (1.0, ops.gemma_fused_add_rmsnorm)])
def test_fused_add_rmsnorm_in_place(offset, fn):
    x, r, w = torch.randn(3, 32), torch.randn(3, 32), torch.randn(32)
    total = x + r
    fn(x, r, w, 1e-5)
    torch.testing.assert_close(r, total)
    torch.testing.assert_close(x, _rms_ref(total, w, 1e-5, offset), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn,act", [(ops.silu_and_mul, F.silu), (ops.gelu_and_mul, F.gelu),
                                    (ops.gelu_tanh_and_mul, lambda t: F.gelu(t, approximate="tanh"))])
def test_gated_activations(fn, act):
    x = torch.randn(4, 2 * 24)
    torch.testing.assert_close(fn(x), act(x[:, :24]) * x[:, 24:])


@pytest.mark.parametrize("neox", [True, False])
def test_rotary_embedding_matches_reference(neox):
    T, heads, d = 6, 3, 8
    pos = torch.tensor([0, 1, 2, 5, 9, 3])
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.arange(16).float()[:, None] * inv[None, :]
    cache = torch.cat([ang.cos(), ang.sin()], -1)
    q, k = torch.randn(T, heads * d), torch.randn(T, 1 * d)
    q0, k0 = q.clone(), k.clone()
    ops.rotary_embedding(pos, q, k, d, cache, neox)
    c, s = ang[pos].cos()[:, None, :], ang[pos].sin()[:, None, :]
    for before, after in ((q0, q), (k0, k)):
        x = before.view(T, -1, d)
        if neox:
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            ref = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
        else:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            ref = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], -1).flatten(-2)
        torch.testing.assert_close(after.view(T, -1, d), ref, rtol=1e-5, atol=1e-5)


def test_top_k_and_top_p_renorm():
    p = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25]])
    torch.testing.assert_close(ops.top_k_renorm_prob(p, torch.tensor([2, 4])),
                               torch.tensor([[0, 4 / 7, 0, 3 / 7], [0.25] * 4]))
    torch.testing.assert_close(ops.top_k_renorm_prob(p, 1)[0], torch.tensor([0.0, 1.0, 0.0, 0.0]))
    q = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.05, 0.15, 0.3, 0.5]])
    torch.testing.assert_close(ops.top_p_renorm_prob(q, torch.tensor([0.5, 0.6])),
                               torch.tensor([[0, 4 / 7, 0, 3 / 7], [0, 0, 0.375, 0.625]]))


def test_pdl_and_jit_store_cache_are_never_claimed_and_weak_ref_is_identity():
    t = torch.ones(2)
    assert ops.is_arch_support_pdl() is False and ops.weak_ref_tensor(t) is t
    assert ops.can_use_store_cache(128, 128) is False


# ---------------------------------------------------------------- tree speculative sampling


def _sampling_reference(cand, ri, nxt, sib, coins, final_coins, target, draft, S, th_single, th_acc):
    """Row by row, the CUDA kernel's loops (sampling.cuh), in float64 Python."""
    bs, W = cand.shape
    V = target.shape[-1]
    predicts = [0] * (bs * W)
    accept = [[-1] * S for _ in range(bs)]
    n_acc = [0] * bs
    draft = draft.clone()
    th_acc = max(th_acc, 1e-9)
    for b in range(bs):
        prob_acc, node, coin = 0.0, 0, float(coins[b, 0])
        last = int(ri[b, 0])
        accept[b][0] = last
        cur = 0
        for _ in range(1, S):
            cur = int(nxt[b, cur])
            while cur != -1:
                tok = int(cand[b, cur])
                q = float(target[b, node, tok])
                prob_acc += q
                if q > 0 and (coin < prob_acc / th_acc or q >= th_single):
                    prob_acc, node, coin = 0.0, cur, float(coins[b, cur])
                    predicts[last] = tok
                    n_acc[b] += 1
                    accept[b][n_acc[b]] = int(ri[b, cur])
                    last = int(ri[b, cur])
                    break
                draft[b, node, tok] = target[b, node, tok]
                cur = int(sib[b, cur])
            if cur == -1:
                break
        q = target[b, node].double()
        p = draft[b, node].double() if n_acc[b] != S - 1 else torch.zeros_like(q)
        r = (q - p).clamp(min=0)
        u = float(final_coins[b]) * float(r.sum())
        acc, sampled, last_pos = 0.0, V, -1
        for i in range(V):
            if r[i] > 0:
                last_pos = i
                acc += float(r[i])
                if acc > u:
                    sampled = i
                    break
        predicts[last] = sampled if sampled < V else (last_pos if last_pos >= 0 else V - 1)
    return predicts, accept, n_acc, draft


def _random_tree(W, topk, rng):
    """A random EAGLE-like tree: node 0 root, each node's children in sibling order."""
    parents = [-1] + [rng.randrange(0, i) if rng.random() < 0.7 else max(0, i - 1) for i in range(1, W)]
    children = {i: [j for j in range(W) if parents[j] == i] for i in range(W)}
    nxt = [children[i][0] if children[i] else -1 for i in range(W)]
    sib = [-1] * W
    for kids in children.values():
        for a, b in zip(kids, kids[1:]):
            sib[a] = b
    depth = [0] * W
    for i in range(1, W):
        depth[i] = depth[parents[i]] + 1
    return nxt, sib, max(depth)


@pytest.mark.parametrize("seed", range(12))
def test_tree_speculative_sampling_port_matches_kernel_loops(seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    bs, W, V = 3, rng.choice([4, 6, 8]), 12
    trees = [_random_tree(W, 2, rng) for _ in range(bs)]
    S = max(t[2] for t in trees) + 1 + rng.choice([0, 1])
    nxt = torch.tensor([t[0] for t in trees])
    sib = torch.tensor([t[1] for t in trees])
    ri = torch.arange(bs * W).view(bs, W)
    cand = torch.randint(0, V, (bs, W), generator=g)
    logits = torch.randn(bs, W, V, generator=g, dtype=torch.float64) * 2
    logits[..., rng.randrange(V)] = -math.inf  # a zero-probability token
    target = torch.softmax(logits, -1)
    cand[0, 1] = int(target[0, 0].argmax())  # at least one likely accept
    coins = torch.rand(bs, W, generator=g, dtype=torch.float64)
    final_coins = torch.rand(bs, generator=g, dtype=torch.float64)
    th_single, th_acc = rng.choice([(1.0, 1.0), (0.3, 0.8)])
    draft = torch.zeros_like(target)
    ref = _sampling_reference(cand, ri, nxt, sib, coins, final_coins, target, draft, S, th_single, th_acc)
    predicts = torch.zeros(bs * W, dtype=torch.int32)
    accept = torch.full((bs, S), -1, dtype=torch.int32)
    n_acc = torch.empty(bs, dtype=torch.int32)
    ops.tree_speculative_sampling_target_only(predicts, accept, n_acc, cand, ri, nxt, sib, coins, final_coins,
                                              target, draft, th_single, th_acc)
    assert predicts.tolist() == ref[0]
    assert accept.tolist() == ref[1]
    assert n_acc.tolist() == ref[2]
    assert torch.equal(draft, ref[3])
