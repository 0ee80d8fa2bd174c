"""Strict greedy verify in plain torch: SGLang's ``verify_tree_greedy`` (argmax + tree walk).

The baseline for benchmarks and an oracle for tests; ``sgl_kernel`` (SGLang's own CPU/CUDA
op) is not installed here. Same walk as SGLang: from the root, at each of K levels move to
the first child in sibling order whose token equals the current node's argmax; stop at the
first level without one. Vectorized over rows: one pass over V, then loops over log2(W) and K.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from sglang_asd.verify.tree_links import tree_links


def strict_verify(
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root)
    logits: torch.Tensor,  # [bs*W, V] float
    retrive_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrive_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    depth: int,  # K
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> predict [bs*W] int32, accept_index [bs, K+1] int32, num_correct_drafts [bs] int32,
    bit for bit what SGLang's ``verify_tree_greedy_func`` writes into its zero/-1 initialized
    buffers (``eagle_sample``)."""
    bs, W = candidates.shape
    device = candidates.device
    if target_predict is None:
        target_predict = logits.argmax(dim=-1).view(bs, W)
    target_predict = target_predict.long()
    node = torch.arange(W, device=device).expand(bs, W)

    parent, sibling_rank = tree_links(retrive_next_token, retrive_next_sibling)
    has_parent = parent >= 0
    match = has_parent & (candidates.long() == target_predict.gather(1, torch.where(has_parent, parent, node)))
    # next_match[b, p]: the first child of p (in sibling order) that matches p's argmax, -1 none.
    none = W * W
    key = torch.where(match, sibling_rank * W + node, none)
    first = torch.full((bs, W + 1), none, dtype=torch.int64, device=device)
    first.scatter_reduce_(1, torch.where(match, parent, W), key, reduce="amin")  # column W: sink
    next_match = torch.where(first[:, :W] < none, first[:, :W] % W, -1)

    last = torch.zeros((bs, 1), dtype=torch.int64, device=device)
    num_correct = torch.zeros((bs, 1), dtype=torch.int64, device=device)
    path = [last]
    for _ in range(depth):
        step = next_match.gather(1, last)
        advanced = step >= 0
        last = torch.where(advanced, step, last)  # once stopped, stays stopped
        num_correct = num_correct + advanced
        path.append(last)
    path = torch.cat(path, dim=1)  # [bs, K+1], the last accepted node repeated after the stop

    predict = torch.zeros((bs, W), dtype=torch.int32, device=device)
    predict.scatter_(1, path, target_predict.gather(1, path).int())
    slot = torch.arange(depth + 1, device=device)
    row_base = torch.arange(bs, device=device)[:, None] * W
    accept_index = torch.where(slot <= num_correct, path + row_base, -1).int()
    return predict.view(-1), accept_index, num_correct.squeeze(1).int()
