"""Run by ``test_cuda_e2e_standin.py`` in a fresh interpreter with ``TRITON_INTERPRET=1``.

With the CUDA e2e stand-in installed and an H200 faked for SGLang's import-time checks, SGLang's
speculative-tree entry points (``build_tree_kernel_efficient_func``, ``verify_tree_greedy_func``,
``reconstruct_indices_from_tree_mask_func``) reach the JIT-op replacements, i.e. SGLang's own Triton
kernels, which the interpreter runs on CPU tensors. Their results must equal the CPU stand-in's ops
(tested against naive references in tests/cpu_backend). Prints ``OK <n>`` on success.
"""

from __future__ import annotations

import os
import pathlib
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts" / "device"), str(ROOT)]

import cuda_import_check  # noqa: E402

cuda_import_check.fake_cuda()
os.environ["SGLANG_ASD_KERNEL_STANDIN"] = "cuda-e2e"
from sglang_asd import cpu_backend  # noqa: E402

assert cpu_backend.install() is False
import torch  # noqa: E402
from sglang.kernels.ops.speculative import reconstruct_tree, spec_tree  # noqa: E402

from sglang_asd.cpu_backend import spec_tree_ops as cpu  # noqa: E402
from sglang_asd.testing import eagle_draft  # noqa: E402

checked = 0
for topk, depth, W in [(1, 3, 4), (2, 3, 6), (2, 4, 8), (4, 3, 8)]:
    g = torch.Generator().manual_seed(topk * 100 + W)
    bs, seq_lens = 3, torch.tensor([5, 1, 9])
    parent_list, selected = eagle_draft(bs, topk, depth, W, g)
    outs = []
    for impl in ("triton", "cpu"):
        size = (int(seq_lens.sum()) + bs * W) * W
        mask = torch.full((size,), True)
        pos = torch.empty(bs * W, dtype=torch.long)
        links = torch.full((3, bs, W), -1, dtype=torch.long)
        args = (parent_list, selected, seq_lens, mask, pos, *links, topk, depth, W, cpu.FULL_MASK)
        if impl == "triton":
            spec_tree.build_tree_kernel_efficient_func(*args[:-1], spec_tree.TreeMaskMode.FULL_MASK)
        else:
            cpu.build_tree_kernel_efficient_cpu(*args)
        outs.append((mask, pos, links))
    assert torch.equal(outs[0][1], outs[1][1]) and torch.equal(outs[0][2], outs[1][2]), (topk, depth, W)
    ri, nxt, sib = outs[1][2]
    V = 50
    cand = torch.randint(0, V, (bs, W), generator=g)
    target = torch.where(torch.rand(bs, W, generator=g) < 0.6, cand.roll(-1, 1), torch.randint(0, V, (bs, W), generator=g))
    res = []
    for impl in ("triton", "cpu"):
        predict = torch.zeros(bs * W, dtype=torch.int32)
        accept = torch.full((bs, depth + 1), -1, dtype=torch.int32)
        n = torch.empty(bs, dtype=torch.int32)
        if impl == "triton":
            spec_tree.verify_tree_greedy_func(predicts=predict, accept_index=accept, accept_token_num=n,
                                              candidates=cand, retrieve_index=ri, retrieve_next_token=nxt,
                                              retrieve_next_sibling=sib, target_predict=target, topk=topk)
        else:
            cpu.verify_tree_greedy_cpu(predict, accept, n, cand, ri, nxt, sib, target)
        res.append((predict, accept, n))
    assert all(torch.equal(a, b) for a, b in zip(*res)), (topk, depth, W, res)
    qlen = torch.zeros(bs, W, W, dtype=torch.bool)
    for b in range(bs):  # ancestor mask from the links (what NGRAM hands over)
        for i in range(W):
            qlen[b, i, i] = True
        for i in range(W):
            child = int(nxt[b, i])
            while child != -1:
                qlen[b, child] |= qlen[b, i]
                child = int(sib[b, child])
    rec = []
    for impl in ("triton", "cpu"):
        pos = torch.empty(bs * W, dtype=torch.long)
        links = torch.full((3, bs, W), -1, dtype=torch.long)
        fn = reconstruct_tree.reconstruct_indices_from_tree_mask_func if impl == "triton" else \
            cpu.reconstruct_indices_from_tree_mask
        fn(qlen.flatten(), seq_lens, pos, *links, bs, W)
        rec.append((pos, links))
    assert torch.equal(rec[0][0], rec[1][0]) and torch.equal(rec[0][1], rec[1][1]), (topk, depth, W)
    checked += 1
print("OK", checked)
