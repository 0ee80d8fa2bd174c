"""What a batched verify returns (shared by the torch verifier and any fused kernel)."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class ASDVerifyOutput:
    """One verify round for ``bs`` rows; ``W`` nodes per row, ``K`` draft positions, ``S = K + 1``.

    Per-position outputs ``[bs, K]`` are indexed by the draft position i = 0..K-1: the accepted
    path's node at depth d = i + 1, judged under the target argmax of the path node at depth i.
    Slot s = 0..K of ``accept_index`` holds the path node at depth s (the root at slot 0).
    With K = 0 (SGLang's adaptive zero-step verify, W = 1) they are ``[bs, 0]``.
    Every tensor is freshly allocated on the input device.
    """

    predict: torch.Tensor  # [bs*W] int32: token emitted after each node on the accepted path (bonus at the last); 0 off the path, as in SGLang
    accept_index: torch.Tensor  # [bs, S] int32: global node ids b*W+n of the accepted path, root first, -1 padded
    num_correct_drafts: torch.Tensor  # [bs] int32: accepted draft tokens (SGLang accept_lens = this + 1)
    spent: torch.Tensor  # [bs] float32: regret charged this round (sum of exception regrets, in path order)
    num_exceptions: torch.Tensor  # [bs] int32
    exception_mask: torch.Tensor  # [bs, K] bool: draft position i was an exception
    exception_regret: torch.Tensor  # [bs, K] float32: its regret (0 elsewhere)
    target_token: torch.Tensor  # [bs, K] int64: the target argmax judging draft position i for i <= num_correct_drafts (the bonus at i == num_correct_drafts); -1 beyond
    num_suffix_tokens: torch.Tensor  # [bs] int32: exact tokens accepted after the first exception (suffix reuse)
    scope_skipped: torch.Tensor  # [bs] int32: nodes hanging from the accepted path that the rule's node gates passed but the row's scope did not allow (``verify.scope``; 0 without a scope)
