"""Paged decode/extend attention vs dense float64 attention over a materialized mask."""

import pytest
import torch

from sglang_asd.cpu_backend import attention_core
from sglang_asd.cpu_backend import attention_ops as ops
from sglang_asd.cpu_backend import spec_tree_ops
from sglang_asd.testing import eagle_draft

H, HKV, DK, DV = 4, 2, 16, 8  # GQA: two query heads per KV head; V narrower than K
NUM_SLOTS, POOL_LEN = 256, 48
BATCH_FITS = ops._batch_fits  # the op's own choice, before the fixture below forces one


def paged_table(num_reqs, page_size, gen):
    """req_to_token rows mapping positions to slots of shuffled pages (page 0 is never used)."""
    pages_per_row = POOL_LEN // page_size
    pages = torch.randperm(NUM_SLOTS // page_size - 1, generator=gen)[: num_reqs * pages_per_row] + 1
    pos = torch.arange(POOL_LEN)
    return (pages.view(num_reqs, pages_per_row)[:, pos // page_size] * page_size + pos % page_size).to(torch.int32)


def dense_attention(q, k, v, visible, scale, logit_cap=0.0, sinks=None):
    """q [M, H, Dk], k [T, Hkv, Dk], v [T, Hkv, Dv], visible [M, T] -> [M, H, Dv], all in float64."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = torch.einsum("mhd,thd->hmt", q, k) * scale
    if logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(-1, 1, 1).expand(-1, s.shape[1], 1)], 2)
    p = torch.softmax(s, -1).nan_to_num(0.0)[..., : k.shape[0]]
    return torch.einsum("hmt,thd->mhd", p, v)


def visible_rule(q_pos, k_pos, P, window=0, causal=True, tree=None):
    """Explicit per-pair visibility: prefix keys (< P) always, extend keys causal / tree / all; then the window."""
    if k_pos < P:
        vis = True
    elif tree is not None:
        vis = bool(tree[q_pos - P][k_pos - P])
    else:
        vis = k_pos <= q_pos if causal else True
    if window:
        dist = q_pos - k_pos
        vis = vis and ((dist < window) if (causal or tree is not None) else abs(dist) < window)
    return vis


def make_cache(dtype, gen):
    """K and V buffers carved out of one allocation, as SGLang's MHA pool does on CPU."""
    flat = torch.randn(NUM_SLOTS * HKV * (DK + DV), generator=gen).to(dtype)
    k_buf = flat[: NUM_SLOTS * HKV * DK].view(NUM_SLOTS, HKV, DK)
    v_buf = flat[NUM_SLOTS * HKV * DK :].view(NUM_SLOTS, HKV, DV)
    return k_buf, v_buf


@pytest.fixture(autouse=True, params=["auto", "rows", "batched"])
def extend_path(request, monkeypatch):
    """Every test runs with the op's own choice of extend path, then with each path forced."""
    if request.param != "auto":
        monkeypatch.setattr(ops, "_batch_fits", lambda *a: request.param == "batched")
    return request.param


@pytest.fixture(autouse=True, params=["fused", "reference"])
def kernel(request, monkeypatch):
    """Every test runs with each attention kernel (``SGLANG_ASD_CPU_ATTENTION``)."""
    monkeypatch.setattr(attention_core, "FUSED", request.param == "fused")
    return request.param


def tol(dtype):
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)


# ---------------------------------------------------------------- decode


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("window,logit_cap,with_sinks", [(0, 0.0, False), (5, 0.0, False), (0, 3.0, True)])
def test_decode_matches_dense(dtype, page_size, window, logit_cap, with_sinks):
    gen = torch.Generator().manual_seed(page_size * 7 + window)
    k_buf, v_buf = make_cache(dtype, gen)
    table = paged_table(5, page_size, gen)
    rpi = torch.tensor([3, 0, 4])
    seq_lens = torch.tensor([1, 9, 23])  # 9 and 23 cross page boundaries for page_size 4
    bs = 3
    q = torch.randn(bs, H, DK, generator=gen).to(dtype)
    key = torch.randn(bs, HKV, DK, generator=gen).to(dtype)
    value = torch.randn(bs, HKV, DV, generator=gen).to(dtype)
    loc = table[rpi, seq_lens - 1].long()
    sinks = torch.randn(H, generator=gen) if with_sinks else None
    out = torch.empty(bs, H, DV, dtype=dtype)
    scale = DK**-0.5
    ops.decode_attention_cpu(
        q, k_buf, v_buf, 1.0, 1.0, out, key, value, loc, torch.empty(bs, H, 8, DV + 1), table, rpi, seq_lens,
        scale, logit_cap, False, window, None, sinks,
    )  # fmt: skip
    assert torch.equal(k_buf[loc], key) and torch.equal(v_buf[loc], value)  # the new token was stored
    for b in range(bs):
        n = int(seq_lens[b])
        slots = table[rpi[b], :n].long()
        vis = torch.tensor([[visible_rule(n - 1, kp, n, window) for kp in range(n)]])
        ref = dense_attention(q[b : b + 1], k_buf[slots], v_buf[slots], vis, scale, logit_cap, sinks)
        torch.testing.assert_close(out[b : b + 1].double(), ref, **tol(dtype))


def test_decode_mla_style_value_view_is_not_written_twice():
    """An MLA pool's V is a view into K's latent: only K is written (V comes with it)."""
    gen = torch.Generator().manual_seed(5)
    kv = torch.randn(NUM_SLOTS, 1, DK, generator=gen)
    k_buf, v_buf = kv, kv[..., :DV]
    table = paged_table(1, 1, gen)
    key = torch.randn(1, 1, DK, generator=gen)
    value = torch.randn(1, 1, DV, generator=gen)  # ignored: V is part of K
    out = torch.empty(1, 2, DV)
    loc = table[0, 3:4].long()
    ops.decode_attention_cpu(torch.randn(1, 2, DK, generator=gen), k_buf, v_buf, 1.0, 1.0, out, key, value, loc,
                             torch.empty(0), table, torch.tensor([0]), torch.tensor([4]), 0.25, 0.0, False, 0,
                             None, None)  # fmt: skip
    assert torch.equal(kv[loc], key)


def test_decode_empty_batch_and_no_new_kv():
    gen = torch.Generator().manual_seed(1)
    k_buf, v_buf = make_cache(torch.float32, gen)
    before = k_buf.clone()
    empty = torch.zeros(0, dtype=torch.int64)
    out = torch.empty(0, H, DV)
    ops.decode_attention_cpu(torch.empty(0, H, DK), k_buf, v_buf, 1.0, 1.0, out, None, None, empty, torch.empty(0),
                             paged_table(1, 1, gen), empty, empty, 0.25, 0.0, False, 0, None, None)  # fmt: skip
    assert torch.equal(k_buf, before)


def test_decode_scales_fp8_style_cache():
    gen = torch.Generator().manual_seed(2)
    k_buf, v_buf = make_cache(torch.float32, gen)
    table = paged_table(2, 1, gen)
    q = torch.randn(1, H, DK, generator=gen)
    out = torch.empty(1, H, DV)
    seq = torch.tensor([6])
    ops.decode_attention_cpu(q, k_buf, v_buf, 0.5, 2.0, out, None, None, torch.tensor([0]), torch.empty(0), table,
                             torch.tensor([1]), seq, 0.3, 0.0, False, 0, None, None)  # fmt: skip
    slots = table[1, :6].long()
    ref = dense_attention(q, k_buf[slots] * 0.5, v_buf[slots] * 2.0, torch.ones(1, 6, dtype=torch.bool), 0.3)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- extend


def run_extend(dtype, page_size, prefix, ext, gen, *, window=0, logit_cap=0.0, sinks=None, tree_mask=None,
               causal=True, keys_from_cache=False, ref_tree=None):  # fmt: skip
    """Run the op on a fresh paged cache; return (out, q, per-row dense references)."""
    k_buf, v_buf = make_cache(dtype, gen)
    bs = len(prefix)
    table = paged_table(bs + 1, page_size, gen)
    rpi = torch.arange(bs, 0, -1)
    ext_t = torch.tensor(ext)
    seq = torch.tensor(prefix) + ext_t
    start_loc = torch.cumsum(ext_t, 0) - ext_t
    T = int(ext_t.sum())
    q = torch.randn(T, H, DK, generator=gen).to(dtype)
    k_ext = torch.randn(T, HKV, DK, generator=gen).to(dtype)
    v_ext = torch.randn(T, HKV, DV, generator=gen).to(dtype)
    for b in range(bs):  # the backend stores the extend K/V before calling the kernel
        slots = table[rpi[b], prefix[b] : prefix[b] + ext[b]].long()
        k_buf[slots] = k_ext[start_loc[b] : start_loc[b] + ext[b]]
        v_buf[slots] = v_ext[start_loc[b] : start_loc[b] + ext[b]]
    out = torch.full((T, H, DV), float("nan"), dtype=dtype)
    scale = DK**-0.5
    ops.extend_attention_cpu(
        q, None if keys_from_cache else k_ext, None if keys_from_cache else v_ext, out, k_buf, v_buf, 1.0, 1.0,
        table, rpi, seq, ext_t, start_loc, max(ext), scale, logit_cap, False, window, None, sinks, tree_mask, causal,
    )  # fmt: skip
    refs = []
    for b in range(bs):
        P, L, s0 = prefix[b], ext[b], int(start_loc[b])
        slots = table[rpi[b], : P + L].long()
        tree = None
        qlen_tree = ref_tree if ref_tree is not None else tree_mask  # the reference reads the QLEN layout
        if qlen_tree is not None:
            tree = qlen_tree.view(bs, L, L)[b].tolist()
        vis = torch.tensor(
            [[visible_rule(P + i, kp, P, window, causal, tree) for kp in range(P + L)] for i in range(L)],
            dtype=torch.bool,
        ).view(L, P + L)
        refs.append((s0, L, dense_attention(q[s0 : s0 + L], k_buf[slots], v_buf[slots], vis, scale, logit_cap, sinks)))
    return out, refs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("page_size", [1, 4])
def test_extend_causal_with_prefix(dtype, page_size):
    gen = torch.Generator().manual_seed(page_size)
    out, refs = run_extend(dtype, page_size, [0, 7, 3, 9], [5, 1, 0, 6], gen)
    for s0, L, ref in refs:
        torch.testing.assert_close(out[s0 : s0 + L].double(), ref, **tol(dtype))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(window=4),
        dict(logit_cap=2.0),
        dict(sinks=torch.tensor([0.5, -1.0, 2.0, 0.0])),
        dict(causal=False),
        dict(causal=False, window=3),
        dict(keys_from_cache=True),
    ],
    ids=["window", "logit_cap", "sinks", "non_causal", "non_causal_window", "keys_from_cache"],
)
def test_extend_variants(kwargs):
    gen = torch.Generator().manual_seed(11)
    out, refs = run_extend(torch.float32, 4, [6, 0, 13], [4, 3, 7], gen, **kwargs)
    for s0, L, ref in refs:
        torch.testing.assert_close(out[s0 : s0 + L].double(), ref, atol=1e-5, rtol=1e-5)


def eagle_tree_mask(bs, topk, depth, W, seed):
    parent_list, selected = eagle_draft(bs, topk, depth, W, torch.Generator().manual_seed(seed))
    mask = torch.empty(bs * W * W, dtype=torch.bool)
    retrieve = torch.full((3, bs, W), -1, dtype=torch.long)
    spec_tree_ops.build_tree_kernel_efficient_cpu(
        parent_list, selected, torch.zeros(bs, dtype=torch.long), mask, torch.empty(bs * W, dtype=torch.long),
        *retrieve, topk, depth, W, spec_tree_ops.QLEN_ONLY,
    )  # fmt: skip
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("topk,depth,W", [(2, 3, 6), (3, 4, 9)])
def test_extend_verify_tree_mask(dtype, topk, depth, W):
    gen = torch.Generator().manual_seed(W)
    prefix = [5, 12, 1]
    mask = eagle_tree_mask(3, topk, depth, W, seed=W)
    assert not torch.equal(mask.view(3, W, W)[0], torch.ones(W, W, dtype=torch.bool).tril())  # a real tree
    out, refs = run_extend(dtype, 4, prefix, [W] * 3, gen, tree_mask=mask)
    for s0, L, ref in refs:
        torch.testing.assert_close(out[s0 : s0 + L].double(), ref, **tol(dtype))
    # the same tree in FULL layout (prefix columns included) gives the same output
    full = torch.cat([torch.cat([torch.ones(W, p, dtype=torch.bool), m], 1).view(-1)
                      for p, m in zip(prefix, mask.view(3, W, W))])  # fmt: skip
    gen = torch.Generator().manual_seed(W)
    out_full, _ = run_extend(dtype, 4, prefix, [W] * 3, gen, tree_mask=full, ref_tree=mask)
    torch.testing.assert_close(out_full, out, atol=0, rtol=0)


def test_extend_chain_tree_mask_equals_causal():
    W = 5
    chain = torch.ones(W, W, dtype=torch.bool).tril().repeat(2, 1, 1).view(-1)
    out_tree, _ = run_extend(torch.float32, 1, [4, 8], [W, W], torch.Generator().manual_seed(3), tree_mask=chain)
    out_causal, _ = run_extend(torch.float32, 1, [4, 8], [W, W], torch.Generator().manual_seed(3))
    torch.testing.assert_close(out_tree, out_causal, atol=0, rtol=0)


def test_extend_rejects_bad_tree_mask_size():
    with pytest.raises(ValueError, match="tree_mask has 7 entries"):
        run_extend(torch.float32, 1, [2], [3], torch.Generator().manual_seed(0), tree_mask=torch.ones(7, dtype=torch.bool))


def test_decode_equals_last_extend_row():
    """Decoding token n attends exactly like the last row of an n-token prefill."""
    gen = torch.Generator().manual_seed(4)
    k_buf, v_buf = make_cache(torch.float32, gen)
    table = paged_table(2, 4, gen)
    n = 11
    q = torch.randn(n, H, DK, generator=gen)
    out_ext = torch.empty(n, H, DV)
    rpi, seq = torch.tensor([1]), torch.tensor([n])
    ops.extend_attention_cpu(q, None, None, out_ext, k_buf, v_buf, 1.0, 1.0, table, rpi, seq, seq, torch.tensor([0]),
                             n, 0.2, 0.0, False, 0, None, None, None, True)  # fmt: skip
    out_dec = torch.empty(1, H, DV)
    ops.decode_attention_cpu(q[-1:], k_buf, v_buf, 1.0, 1.0, out_dec, None, None, torch.tensor([0]), torch.empty(0),
                             table, rpi, seq, 0.2, 0.0, False, 0, None, None)  # fmt: skip
    torch.testing.assert_close(out_dec, out_ext[-1:], atol=1e-6, rtol=1e-6)


def test_extend_encoder_offset_equals_shifted_table():
    """Self-attention of an encoder-decoder row reads positions [enc, enc + seq): the same as a
    table whose row starts at enc."""
    gen = torch.Generator().manual_seed(5)
    k_buf, v_buf = make_cache(torch.float32, gen)
    table = paged_table(3, 1, gen)
    rpi, enc = torch.tensor([2, 0]), torch.tensor([3, 6])
    prefix, ext = torch.tensor([4, 9]), torch.tensor([5, 5])
    q = torch.randn(10, H, DK, generator=gen)
    shifted = torch.zeros_like(table)
    for b in range(2):
        shifted[rpi[b], : POOL_LEN - enc[b]] = table[rpi[b], enc[b] :]
    outs = []
    for tab, enc_lens in ((table, enc), (shifted, None)):
        out = torch.empty(10, H, DV)
        ops.extend_attention_cpu(q, None, None, out, k_buf, v_buf, 1.0, 1.0, tab, rpi, prefix + ext, ext,
                                 torch.tensor([0, 5]), 5, 0.3, 0.0, False, 0, enc_lens, None, None, True)  # fmt: skip
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)


def test_extend_path_choice():
    """Verify and draft-extend shapes (a few tokens per row) go as one batch; a ragged prefill,
    or one whose scores would not fit one block, goes row by row."""
    verify = (torch.tensor([310, 295, 402, 388, 120, 350, 333, 301]), torch.full((8,), 5))
    assert BATCH_FITS(12, *verify, 0)
    assert BATCH_FITS(12, verify[0], torch.tensor([5, 1, 3, 5, 2, 4, 5, 1]), 0)  # draft extend: accepted counts
    assert not BATCH_FITS(12, torch.zeros(4, dtype=torch.long), torch.tensor([900, 12, 40, 7]), 0)
    assert not BATCH_FITS(12, torch.zeros(2, dtype=torch.long), torch.tensor([1200, 1200]), 0)
    # a window bounds the keys of a long prefix, so the batch fits again
    one_long = torch.tensor([20000, 20, 20, 20])
    assert not BATCH_FITS(12, one_long, torch.full((4,), 5), 0)
    assert BATCH_FITS(12, one_long, torch.full((4,), 5), 64)

