"""What a batched verify returns (shared by the torch verifier and any fused kernel)."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class ASDVerifyOutput:
    """One verify round for ``bs`` rows; ``W`` nodes per row, ``K`` draft positions, ``S = K + 1``.

    Path position d = 0..K-1 is draft position d (the accepted node at depth d + 1).
    Every tensor is freshly allocated on the input device.
    """

    predict: torch.Tensor  # [bs*W] int32: token emitted after each node on the accepted path (bonus at the last); 0 off the path, as in SGLang
    accept_index: torch.Tensor  # [bs, S] int32: global node ids b*W+n of the accepted path, root first, -1 padded
    num_correct_drafts: torch.Tensor  # [bs] int32: accepted draft tokens (SGLang accept_lens = this + 1)
    spent: torch.Tensor  # [bs] float32: regret charged this round (sum of exception regrets, in path order)
    num_exceptions: torch.Tensor  # [bs] int32
    exception_mask: torch.Tensor  # [bs, K] bool: path position d was an exception
    exception_regret: torch.Tensor  # [bs, K] float32: its regret (0 elsewhere)
    target_token: torch.Tensor  # [bs, K] int64: target argmax at path position d for d <= num_correct_drafts (the bonus at d == num_correct_drafts); -1 beyond
    num_suffix_tokens: torch.Tensor  # [bs] int32: exact tokens accepted after the first exception (suffix reuse)
