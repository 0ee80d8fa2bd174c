"""The per-round ASD results, carried from the verify step to the request's host ledger.

Implements SGLang's ``DeviceAuxiliaryOutput`` / ``HostAuxiliaryOutput`` protocol
(``sglang.srt.managers.auxiliary_output``): SGLang copies these tensors to the host together
with the batch's tokens (no extra sync) and calls ``consume`` after the tokens are committed to
each request and before responses are streamed. Rows align with ``batch.reqs``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from sglang_asd.verify import ASDVerifyOutput


@dataclasses.dataclass(frozen=True)
class ASDDeviceOutput:
    active: torch.Tensor  # [bs] bool: the row was decided by ASD
    num_exceptions: torch.Tensor  # [bs] int32
    num_suffix_tokens: torch.Tensor  # [bs] int32
    exception_mask: torch.Tensor  # [bs, K] bool
    exception_regret: torch.Tensor  # [bs, K] float32
    draft_token: torch.Tensor  # [bs, K] int64: accepted token at each draft position
    target_token: torch.Tensor  # [bs, K] int64: the target's argmax there

    @classmethod
    def from_verify(cls, out: ASDVerifyOutput, active: torch.Tensor, accepted_tokens: torch.Tensor) -> "ASDDeviceOutput":
        return cls(
            active=active,
            num_exceptions=out.num_exceptions,
            num_suffix_tokens=out.num_suffix_tokens,
            exception_mask=out.exception_mask,
            exception_regret=out.exception_regret,
            draft_token=accepted_tokens,
            target_token=out.target_token,
        )

    def copy_to_host(self, copy_tensor: Callable[[torch.Tensor], torch.Tensor]) -> "ASDHostOutput":
        return ASDHostOutput(**{f.name: copy_tensor(getattr(self, f.name)) for f in dataclasses.fields(self)})


@dataclasses.dataclass(frozen=True)
class ASDHostOutput:
    active: torch.Tensor
    num_exceptions: torch.Tensor
    num_suffix_tokens: torch.Tensor
    exception_mask: torch.Tensor
    exception_regret: torch.Tensor
    draft_token: torch.Tensor
    target_token: torch.Tensor

    def consume(self, batch, commits: Sequence[Optional[object]]) -> None:
        """Post each row's exceptions to its request's ledger, at their output positions.

        Only tokens that became visible count: a round cut short by a stop token or
        ``max_new_tokens`` does not charge the receipt for exceptions after the cut.
        """
        from sglang_asd.sglang_seams.runtime import get_runtime

        metrics = get_runtime().metrics
        active = self.active.numpy()
        if not active.any():
            return
        num_exc = self.num_exceptions.numpy()
        suffix = self.num_suffix_tokens.numpy()
        mask = self.exception_mask.numpy()
        regret = self.exception_regret.numpy()
        draft = self.draft_token.numpy()
        target = self.target_token.numpy()
        spent_total = 0.0
        exc_total = 0
        suffix_total = 0
        for i in np.flatnonzero(active):
            commit = commits[i]
            ledger = getattr(batch.reqs[i], "asd_ledger", None)
            if commit is None or ledger is None:
                continue
            visible = len(commit.token_ids)
            if num_exc[i]:
                for d in np.flatnonzero(mask[i]):
                    if d < visible:
                        ledger.record(commit.output_index + int(d), int(draft[i, d]), int(target[i, d]), float(regret[i, d]))
                        spent_total += float(regret[i, d])
                        exc_total += 1
            ledger.suffix_tokens += int(min(suffix[i], visible))
            suffix_total += int(min(suffix[i], visible))
        if metrics is not None:
            metrics.observe_round(exceptions=exc_total, regret=spent_total, suffix_tokens=suffix_total)
