"""Speculative-tree ops vs naive per-node Python references."""

import warnings

import pytest
import torch

from sglang_asd.cpu_backend import spec_tree_ops as ops
from sglang_asd.testing import eagle_draft
from sglang_asd.testing import verify_tree_greedy_port

# ---------------------------------------------------------------- references


def naive_build_tree(parent_list, selected, seq_lens, topk, depth, W, mode):
    """Per-node transliteration of the sgl-kernel CPU kernel."""
    bs = len(seq_lens)
    pl, sel = parent_list.tolist(), selected.tolist()
    positions = [0] * (bs * W)
    ridx = [[-1] * W for _ in range(bs)]
    nxt = [[-1] * W for _ in range(bs)]
    sib = [[-1] * W for _ in range(bs)]
    rows = {}  # (b, tid) -> list of W bools (the tree columns)

    def find(b, tok):
        return sel[b].index(tok) if tok in sel[b] else -1

    for b in range(bs):
        off = b * W
        positions[off] = seq_lens[b]
        ridx[b][0] = off
        for i in range(W - 1, 0, -1):
            ridx[b][i] = off + i
            ptb = sel[b][i - 1] // topk
            ppos = 0
            if ptb > 0:
                found = find(b, pl[b][ptb])
                if found < 0:
                    continue
                ppos = found + 1
            if nxt[b][ppos] == -1:
                nxt[b][ppos] = i
            else:
                sib[b][i] = nxt[b][ppos]
                nxt[b][ppos] = i
        for tid in range(W):
            row = [True] + [False] * (W - 1)
            rows[b, tid] = row
            if tid == 0:
                continue
            position, cur = 0, tid - 1
            while position < depth:
                position += 1
                row[cur + 1] = True
                ptb = sel[b][cur] // topk
                if ptb == 0:
                    break
                cur = find(b, pl[b][ptb])
                if cur < 0:
                    break
            positions[off + tid] = position + seq_lens[b]
    if mode == ops.QLEN_ONLY:
        mask = [x for b in range(bs) for t in range(W) for x in rows[b, t]]
    else:
        mask = []
        for b in range(bs):
            for t in range(W):
                mask += [True] * seq_lens[b] + rows[b, t]
    return mask, positions, ridx, nxt, sib


def run_build_tree(parent_list, selected, seq_lens, topk, depth, W, mode):
    bs = len(seq_lens)
    size = bs * W * W if mode == ops.QLEN_ONLY else (sum(seq_lens) + bs * W) * W
    tree_mask = torch.full((size,), True)
    retrieve = torch.full((3, bs, W), -1, dtype=torch.long)
    positions = torch.empty(bs * W, dtype=torch.long)
    ops.build_tree_kernel_efficient_cpu(
        parent_list, selected, torch.tensor(seq_lens), tree_mask, positions, *retrieve, topk, depth, W, mode
    )
    return tree_mask, positions, retrieve


def naive_reconstruct(mask, seq_lens, W):
    """Per-node transliteration of reconstruct_indices_from_tree_mask."""
    bs = len(seq_lens)
    pos, ri, nt, ns = [], [], [], []
    for b in range(bs):
        m = lambda i, j: mask[b * W * W + i * W + j]  # noqa: E731
        for tid in range(W):
            depth, parent = 0, -1
            for i in range(tid - 1, -1, -1):
                if m(tid, i):
                    depth += 1
                    if parent == -1:
                        parent = i
            pos.append(depth + seq_lens[b])
            ri.append(b * W + tid)
            nt.append(next((i for i in range(tid + 1, W) if m(i, tid)), -1))
            s = -1
            if parent != -1:
                for i in range(tid + 1, W):
                    if m(i, parent) and not any(m(i, j) for j in range(parent + 1, i)):
                        s = i
                        break
            ns.append(s)
    return pos, ri, nt, ns


def ancestor_mask_from_links(nxt, sib, W):
    """Ancestor-or-self relation implied by first-child/next-sibling links (independent of the op's mask)."""
    parent = [-1] * W
    for p in range(W):
        c = nxt[p]
        while c != -1:
            parent[c] = p
            c = sib[c]
    rows = []
    for t in range(W):
        row = [False] * W
        row[0] = True
        n = t
        while n != -1:
            row[n] = True
            n = parent[n]
        rows.append(row)
    return rows


# ---------------------------------------------------------------- build_tree


TREE_CASES = [  # (topk, depth, W)
    (1, 1, 2),
    (1, 4, 5),
    (2, 1, 3),
    (2, 3, 6),
    (3, 4, 10),
    (4, 3, 8),
]


@pytest.mark.parametrize("mode", [ops.FULL_MASK, ops.QLEN_ONLY])
@pytest.mark.parametrize("topk,depth,W", TREE_CASES)
def test_build_tree_matches_naive(topk, depth, W, mode):
    gen = torch.Generator().manual_seed(100 * topk + 10 * depth + W)
    bs = 3
    parent_list, selected = eagle_draft(bs, topk, depth, W, gen)
    seq_lens = [5, 1, 12]
    mask, positions, (ridx, nxt, sib) = run_build_tree(parent_list, selected, seq_lens, topk, depth, W, mode)
    ref_mask, ref_pos, ref_ridx, ref_nxt, ref_sib = naive_build_tree(
        parent_list, selected, seq_lens, topk, depth, W, mode
    )
    assert mask.tolist() == ref_mask
    assert positions.tolist() == ref_pos
    assert ridx.tolist() == ref_ridx and nxt.tolist() == ref_nxt and sib.tolist() == ref_sib
    # the mask is exactly "root + ancestors + self" of the tree the links describe
    qlen = mask.view(-1) if mode == ops.QLEN_ONLY else None
    for b in range(bs):
        expected = ancestor_mask_from_links(ref_nxt[b], ref_sib[b], W)
        if qlen is not None:
            assert qlen[b * W * W : (b + 1) * W * W].view(W, W).tolist() == expected


def test_build_tree_chain_is_causal():
    bs, W, depth = 2, 5, 4
    parent_list, selected = eagle_draft(bs, 1, depth, W, torch.Generator().manual_seed(0))
    mask, positions, (ridx, nxt, sib) = run_build_tree(parent_list, selected, [7, 3], 1, depth, W, ops.QLEN_ONLY)
    assert torch.equal(mask.view(bs, W, W), torch.ones(W, W, dtype=torch.bool).tril().expand(bs, W, W))
    assert positions.view(bs, W).tolist() == [list(range(7, 12)), list(range(3, 8))]
    assert nxt.tolist() == [[1, 2, 3, 4, -1]] * 2 and (sib == -1).all()


def test_build_tree_int32_and_empty_batch():
    parent_list, selected = eagle_draft(2, 2, 3, 6, torch.Generator().manual_seed(5))
    ref = naive_build_tree(parent_list, selected, [4, 2], 2, 3, 6, ops.QLEN_ONLY)
    tree_mask = torch.empty(2 * 36, dtype=torch.bool)
    retrieve = torch.full((3, 2, 6), -1, dtype=torch.int32)
    positions = torch.empty(12, dtype=torch.int32)
    ops.build_tree_kernel_efficient_cpu(
        parent_list.int(), selected.int(), torch.tensor([4, 2], dtype=torch.int32), tree_mask, positions,
        *retrieve, 2, 3, 6, ops.QLEN_ONLY,
    )  # fmt: skip
    assert tree_mask.tolist() == ref[0] and positions.tolist() == ref[1] and retrieve[1].tolist() == ref[3]
    empty = torch.empty(0, dtype=torch.long)
    ops.build_tree_kernel_efficient_cpu(
        torch.empty(0, 5, dtype=torch.long), torch.empty(0, 5, dtype=torch.long), empty, torch.empty(0, dtype=torch.bool),
        empty, empty.view(0, 6), empty.view(0, 6), empty.view(0, 6), 2, 3, 6, ops.QLEN_ONLY,
    )  # fmt: skip
    with pytest.raises(ValueError, match="tree_mask_mode"):
        ops.build_tree_kernel_efficient_cpu(parent_list, selected, torch.tensor([4, 2]), tree_mask, positions.long(),
                                            *retrieve.long(), 2, 3, 6, 2)  # fmt: skip


def test_build_tree_malformed_parent_warns_and_matches_naive():
    parent_list, selected = eagle_draft(1, 2, 3, 6, torch.Generator().manual_seed(9))
    parent_list = parent_list.clone()
    parent_list[0, 3:] = 999  # parents that are not among the selected nodes
    ref = naive_build_tree(parent_list, selected, [3], 2, 3, 6, ops.QLEN_ONLY)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        mask, positions, (ridx, nxt, sib) = run_build_tree(parent_list, selected, [3], 2, 3, 6, ops.QLEN_ONLY)
    assert mask.tolist() == ref[0] and positions.tolist() == ref[1]
    assert nxt.tolist() == ref[3] and sib.tolist() == ref[4]


# ---------------------------------------------------------------- verify_tree_greedy


@pytest.mark.parametrize("topk,depth,W", [(1, 4, 5), (2, 3, 6), (3, 4, 10), (4, 2, 8)])
@pytest.mark.parametrize("seed", range(3))
def test_verify_tree_greedy_matches_naive(topk, depth, W, seed):
    gen = torch.Generator().manual_seed(seed * 31 + W)
    bs, vocab = 5, 3  # a tiny vocab gives every accept length
    parent_list, selected = eagle_draft(bs, topk, depth, W, gen)
    _, _, (ridx, nxt, sib) = run_build_tree(parent_list, selected, [4] * bs, topk, depth, W, ops.QLEN_ONLY)
    candidates = torch.randint(0, vocab, (bs, W), generator=gen)
    target = torch.randint(0, vocab, (bs, W), generator=gen)
    S = depth + 1
    predicts = torch.zeros(bs * W, dtype=torch.int32)
    accept_index = torch.full((bs, S), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    ops.verify_tree_greedy_cpu(predicts, accept_index, accept_num, candidates, ridx, nxt, sib, target)
    ref_pred, ref_acc, ref_num = verify_tree_greedy_port(candidates.tolist(), ridx.tolist(), nxt.tolist(), sib.tolist(),
                                                         target.view(-1).tolist(), S)
    assert predicts.tolist() == ref_pred
    assert accept_index.tolist() == ref_acc
    assert accept_num.tolist() == ref_num


def test_verify_tree_greedy_chain_accepts_matching_prefix():
    W = 5
    nxt = torch.tensor([[1, 2, 3, 4, -1]] * 3)
    sib = torch.full((3, W), -1)
    ridx = torch.arange(3 * W).view(3, W)
    target = torch.tensor([[10, 11, 12, 13, 14]] * 3)
    candidates = torch.tensor([[0, 10, 11, 12, 13], [0, 10, 99, 12, 13], [0, 98, 11, 12, 13]])
    predicts = torch.zeros(3 * W, dtype=torch.int32)
    accept_index = torch.full((3, W), -1, dtype=torch.int32)
    accept_num = torch.empty(3, dtype=torch.int32)
    ops.verify_tree_greedy_cpu(predicts, accept_index, accept_num, candidates, ridx, nxt, sib, target)
    assert accept_num.tolist() == [4, 1, 0]
    assert accept_index.tolist() == [[0, 1, 2, 3, 4], [5, 6, -1, -1, -1], [10, -1, -1, -1, -1]]
    assert predicts.view(3, W).tolist() == [[10, 11, 12, 13, 14], [10, 11, 0, 0, 0], [10, 0, 0, 0, 0]]


def test_verify_tree_greedy_empty_batch():
    e = torch.empty(0, 4, dtype=torch.long)
    ops.verify_tree_greedy_cpu(torch.empty(0, dtype=torch.int32), torch.empty(0, 3, dtype=torch.int32),
                               torch.empty(0, dtype=torch.int32), e, e, e, e, e)  # fmt: skip


# ---------------------------------------------------------------- reconstruct_indices_from_tree_mask


def random_parent_mask(bs, W, gen):
    mask = torch.zeros(bs, W, W, dtype=torch.bool)
    for b in range(bs):
        parent = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, W)]
        for t in range(W):
            n = t
            while n != -1:
                mask[b, t, n] = True
                n = parent[n]
    return mask


@pytest.mark.parametrize("W", [1, 2, 6, 9])
def test_reconstruct_matches_naive(W):
    gen = torch.Generator().manual_seed(W)
    bs = 4
    mask = random_parent_mask(bs, W, gen).view(-1)
    seq_lens = [3, 0, 8, 5]
    out = torch.full((4, bs, W), -9, dtype=torch.long)
    positions = out[0].view(-1)
    ops.reconstruct_indices_from_tree_mask(mask, torch.tensor(seq_lens), positions, out[1], out[2], out[3], bs, W)
    pos, ri, nt, ns = naive_reconstruct(mask.tolist(), seq_lens, W)
    assert positions.tolist() == pos
    assert out[1].view(-1).tolist() == ri and out[2].view(-1).tolist() == nt and out[3].view(-1).tolist() == ns


@pytest.mark.parametrize("topk,depth,W", [(2, 3, 6), (3, 4, 10)])
def test_reconstruct_inverts_build_tree(topk, depth, W):
    """The links recovered from build_tree's QLEN mask are build_tree's own links."""
    parent_list, selected = eagle_draft(2, topk, depth, W, torch.Generator().manual_seed(W))
    mask, positions, (ridx, nxt, sib) = run_build_tree(parent_list, selected, [6, 2], topk, depth, W, ops.QLEN_ONLY)
    out = torch.empty(4, 2, W, dtype=torch.long)
    ops.reconstruct_indices_from_tree_mask(mask, torch.tensor([6, 2]), out[0].view(-1), out[1], out[2], out[3], 2, W)
    assert torch.equal(out[0].view(-1), positions)
    assert torch.equal(out[1], ridx) and torch.equal(out[2], nxt) and torch.equal(out[3], sib)


# ---------------------------------------------------------------- small ops


def test_fill_bonus_tokens():
    accept_tokens = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]], dtype=torch.int32)
    accept_lens = torch.tensor([1, 4, 2], dtype=torch.int32)
    bonus = torch.zeros(3, dtype=torch.int32)
    ops.fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus, 4)
    assert bonus.tolist() == [5, 12, 14]


@pytest.mark.parametrize("with_select", [False, True])
def test_rotate_input_ids(with_select):
    ids = torch.arange(100, 112)
    start = torch.tensor([0, 4, 4, 9], dtype=torch.int32)
    lens = torch.tensor([4, 0, 5, 3])
    new = torch.tensor([1, 2, 3, 4])
    select = torch.tensor([1, 0, 6, 11]) if with_select else None
    expected = ids.tolist()
    for s, n, tok, i in zip(start.tolist(), lens.tolist(), new.tolist(), range(4)):
        if n > 1:
            expected[s : s + n - 1] = expected[s + 1 : s + n]
        if n > 0:
            expected[int(select[i]) if with_select else s + n - 1] = tok
    ops.rotate_input_ids_cpu(ids, start, lens, new, select)
    assert ids.tolist() == expected
