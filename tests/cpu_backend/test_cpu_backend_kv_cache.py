"""KV-slot bookkeeping ops vs naive per-element Python copies."""

import pytest
import torch

from sglang_asd.cpu_backend import kv_cache_ops as ops


def paged_req_to_token(num_reqs, pool_len, page_size, gen):
    """A req_to_token table whose rows map positions to slots of shuffled pages (slot = page*ps + offset)."""
    pages_per_row = -(-pool_len // page_size)
    pages = torch.randperm(num_reqs * pages_per_row + 1, generator=gen)[: num_reqs * pages_per_row] + 1  # page 0 reserved
    pages = pages.view(num_reqs, pages_per_row)
    pos = torch.arange(pool_len)
    return (pages[:, pos // page_size] * page_size + pos % page_size).to(torch.int32)


def random_segments(bs, pool_len, gen, max_len=9):
    start = torch.randint(0, pool_len - max_len, (bs,), generator=gen)
    lens = torch.randint(0, max_len, (bs,), generator=gen)
    return start, start + lens


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("offset_dtype", [torch.int32, torch.int64])
def test_assign_req_to_token_pool(page_size, offset_dtype):
    gen = torch.Generator().manual_seed(page_size)
    num_reqs, pool_len, bs = 6, 40, 4
    table = paged_req_to_token(num_reqs, pool_len, page_size, gen)
    rpi = torch.randperm(num_reqs, generator=gen)[:bs]
    start, end = random_segments(bs, pool_len, gen)
    total = int((end - start).sum())
    out_cache_loc = torch.randint(1, 10_000, (total,), generator=gen)
    expected = table.clone()
    k = 0
    for i in range(bs):
        for p in range(int(start[i]), int(end[i])):
            expected[rpi[i], p] = int(out_cache_loc[k])
            k += 1
    ops.assign_req_to_token_pool_cpu(rpi, table, start.to(offset_dtype), end.to(offset_dtype), out_cache_loc, pool_len)
    assert torch.equal(table, expected)


def test_assign_req_to_token_pool_empty_and_short_out():
    table = torch.zeros(2, 8, dtype=torch.int32)
    empty = torch.zeros(0, dtype=torch.int64)
    ops.assign_req_to_token_pool_cpu(empty, table, empty, empty, empty, 8)
    assert not table.any()
    with pytest.raises(ValueError, match="out_cache_loc has 1 entries but offsets require 3"):
        ops.assign_req_to_token_pool_cpu(
            torch.tensor([0]), table, torch.tensor([0]), torch.tensor([3]), torch.tensor([5]), 8
        )


@pytest.mark.parametrize("page_size", [1, 4])
def test_assign_extend_cache_locs_leaves_tail(page_size):
    gen = torch.Generator().manual_seed(10 + page_size)
    num_reqs, pool_len, bs = 5, 32, 5
    table = paged_req_to_token(num_reqs, pool_len, page_size, gen)
    rpi = torch.randperm(num_reqs, generator=gen)
    start, end = random_segments(bs, pool_len, gen)
    total = int((end - start).sum())
    out = torch.full((total + 3,), -7, dtype=torch.int64)
    expected = [int(table[rpi[i], p]) for i in range(bs) for p in range(int(start[i]), int(end[i]))] + [-7] * 3
    ops.assign_extend_cache_locs_cpu(rpi, table, start, end, out, pool_len)
    assert out.tolist() == expected


def test_assign_extend_cache_locs_front_window_call():
    """fill_front_out_cache_loc_func passes an int32 copy of out_cache_loc as the table."""
    window = torch.tensor([[11, 12, 13], [21, 22, 23]])
    num_front = torch.tensor([2, 0], dtype=torch.int32)
    out = torch.zeros(4, dtype=torch.int64)
    ops.assign_extend_cache_locs_cpu(torch.arange(2), window.int(), torch.zeros_like(num_front), num_front, out, 3)
    assert out.tolist() == [11, 12, 0, 0]


@pytest.mark.parametrize("topk,num_steps", [(1, 3), (2, 2), (4, 1)])
def test_assign_draft_cache_locs_contiguous(topk, num_steps):
    gen = torch.Generator().manual_seed(topk)
    num_reqs, pool_len, bs = 4, 30, 3
    table = paged_req_to_token(num_reqs, pool_len, 1, gen)
    rpi = torch.tensor([3, 0, 2])
    seq_lens = torch.tensor([5, 0, 17], dtype=torch.int32)
    out = torch.empty(bs * topk * num_steps, dtype=torch.int64)
    ops.assign_draft_cache_locs_contiguous_cpu(rpi, table, seq_lens, out, pool_len, topk, num_steps)
    expected = [int(table[rpi[i], seq_lens[i] + j]) for i in range(bs) for j in range(topk * num_steps)]
    assert out.tolist() == expected
    with pytest.raises(ValueError, match="bs\\*topk\\*num_steps"):
        ops.assign_draft_cache_locs_contiguous_cpu(rpi, table, seq_lens, out[:-1], pool_len, topk, num_steps)


@pytest.mark.parametrize("topk,num_steps", [(1, 4), (3, 2)])
def test_build_draft_decode_metadata(topk, num_steps):
    gen = torch.Generator().manual_seed(7)
    num_reqs, pool_len = 5, 40
    table = torch.randperm(num_reqs * pool_len, generator=gen).to(torch.int32).view(num_reqs, pool_len)
    rpi = torch.tensor([4, 1, 2])
    seq_lens = torch.tensor([6, 1, 11])
    out = ops.build_draft_decode_metadata_cpu(table, rpi, seq_lens, topk, num_steps, pool_len)
    assert out.shape == (3 * topk, pool_len) and out.dtype == torch.int32
    for b in range(3):
        sl = int(seq_lens[b])
        src = table[rpi[b]].tolist()
        for k in range(topk):
            row = out[b * topk + k, : sl + num_steps].tolist()
            draft = src[sl + k * num_steps : sl + (k + 1) * num_steps]
            assert row == src[:sl] + draft


def test_build_draft_decode_metadata_empty():
    out = ops.build_draft_decode_metadata_cpu(
        torch.zeros(2, 8, dtype=torch.int32), torch.zeros(0, dtype=torch.int64), torch.zeros(0), 2, 3, 8
    )
    assert out.shape == (0, 8)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_fill_accept_out_cache_loc(index_dtype):
    accept_index = torch.tensor([[0, 1, -1, -1], [16, 18, 21, -1], [32, -1, -1, -1]], dtype=index_dtype)
    out_cache_loc = torch.randperm(4096, generator=torch.Generator().manual_seed(1))[:48]
    out = torch.full((12,), -5, dtype=torch.int64)
    ops.fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, out)
    valid = [int(i) for i in accept_index.flatten() if i > -1]
    assert out.tolist() == [int(out_cache_loc[i]) for i in valid] + [-5] * (12 - len(valid))
    # the older four-argument form scans only the first `size` entries
    out2 = torch.full((12,), -5, dtype=torch.int64)
    ops.fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, out2, 4)
    assert out2[:2].tolist() == [int(out_cache_loc[0]), int(out_cache_loc[1])] and (out2[2:] == -5).all()


def test_fill_accept_out_cache_loc_rejects_out_of_range():
    with pytest.raises(IndexError, match="out of range"):
        ops.fill_accept_out_cache_loc_cpu(torch.tensor([9]), torch.arange(4), torch.zeros(1, dtype=torch.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_copy_all_layer_kv_cache_overlapping(dtype):
    gen = torch.Generator().manual_seed(3)
    bufs = [torch.randn(20, 2, 8, generator=gen).to(dtype) for _ in range(3)] + [torch.randn(20, 2, 4, generator=gen).to(dtype)]
    originals = [b.clone() for b in bufs]
    data_ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs])
    src = torch.tensor([3, 4, 5, 6])
    tgt = torch.tensor([4, 5, 6, 19])  # overlaps the sources: gather-then-scatter must read the old rows
    ops.copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt, src)
    for buf, orig in zip(bufs, originals):
        expected = orig.clone()
        for t, s in zip(tgt.tolist(), src.tolist()):
            expected[t] = orig[s]
        assert torch.equal(buf, expected)


def test_copy_all_layer_kv_cache_noop_cases():
    buf = torch.randn(4, 3)
    before = buf.clone()
    ptrs = torch.tensor([buf.data_ptr()], dtype=torch.uint64)
    strides = torch.tensor([12])
    ops.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    ops.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([0]), torch.tensor([0]))  # the pool's warm-up call
    assert torch.equal(buf, before)
