"""SGLang's strict greedy tree verify (``verify_tree_greedy``), twice: a line-by-line port of the
kernel in plain Python (the oracle) and a vectorized torch version (the benchmarks' strict arm).

The walk: from the root, at each of K levels move to the first child in sibling order whose
token equals the current node's target argmax; stop at the first level without one; the bonus
is the argmax at the last accepted node. ``sgl_kernel`` (SGLang's own op) is not installed here.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from sglang_asd.verify.tree_links import tree_links


def verify_tree_greedy_port(
    candidates: Sequence[Sequence[int]],  # [bs][W]
    retrieve_index: Sequence[Sequence[int]],  # [bs][W] global node id b*W + n
    next_token: Sequence[Sequence[int]],  # [bs][W]
    next_sibling: Sequence[Sequence[int]],  # [bs][W]
    target_predict: Sequence[int],  # [bs*W] flat
    S: int,  # accept slots, K + 1
) -> Tuple[List[int], List[List[int]], List[int]]:
    """Port of SGLang's ``VerifyTreeGreedy`` kernel (lists in, lists out): predicts start at 0,
    accept_index at -1, as ``eagle_sample`` allocates them. -> (predicts [bs*W],
    accept_index [bs][S], accept_token_num [bs])."""
    bs, W = len(candidates), len(candidates[0])
    predicts = [0] * (bs * W)
    accept_index = [[-1] * S for _ in range(bs)]
    accept_num = [0] * bs
    for bx in range(bs):
        last = retrieve_index[bx][0]
        accept_index[bx][0] = last
        num = 0
        cur = 0
        for _ in range(1, S):
            cur = next_token[bx][cur]
            while cur != -1:
                draft_index = retrieve_index[bx][cur]
                target = target_predict[last]
                if candidates[bx][cur] == target:
                    predicts[last] = target
                    num += 1
                    accept_index[bx][num] = draft_index
                    last = draft_index
                    break
                cur = next_sibling[bx][cur]
            if cur == -1:
                break
        accept_num[bx] = num
        predicts[last] = target_predict[last]
    return predicts, accept_index, accept_num


def sglang_strict_result(
    candidates: torch.Tensor,  # [bs, W] int
    logits: torch.Tensor,  # [bs*W, V] float
    retrieve_next_token: torch.Tensor,  # [bs, W] int
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int
    depth: int,  # K
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int argmax per node, if known
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``verify_tree_greedy_port`` on tensors: -> predict [bs*W] int32, accept_index [bs, K+1]
    int32, num_correct_drafts [bs] int32, on the CPU."""
    bs, W = candidates.shape
    if target_predict is None:
        target_predict = logits.argmax(dim=-1)
    retrieve_index = (torch.arange(bs)[:, None] * W + torch.arange(W)).tolist()
    predicts, accept_index, accept_num = verify_tree_greedy_port(
        candidates.tolist(), retrieve_index, retrieve_next_token.tolist(), retrieve_next_sibling.tolist(),
        target_predict.reshape(-1).tolist(), depth + 1,
    )
    return (torch.tensor(predicts, dtype=torch.int32),
            torch.tensor(accept_index, dtype=torch.int32).view(bs, depth + 1),
            torch.tensor(accept_num, dtype=torch.int32))


def strict_verify(
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root)
    logits: torch.Tensor,  # [bs*W, V] float
    retrieve_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    depth: int,  # K
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> predict [bs*W] int32, accept_index [bs, K+1] int32, num_correct_drafts [bs] int32,
    bit for bit what SGLang's ``verify_tree_greedy_func`` writes into its zero/-1 initialized
    buffers (``eagle_sample``). One pass over V, then loops over log2(W) and K; no host sync."""
    bs, W = candidates.shape
    device = candidates.device
    if target_predict is None:
        target_predict = logits.argmax(dim=-1).view(bs, W)
    target_predict = target_predict.long()
    node = torch.arange(W, device=device).expand(bs, W)

    parent, sibling_rank = tree_links(retrieve_next_token, retrieve_next_sibling)
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
