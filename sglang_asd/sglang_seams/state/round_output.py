"""The per-round ASD results, carried from the verify step to the request's host ledger.

``ASDRoundOutput.of_round`` builds them on the device from the verify's decision, per draft
position i = 0..K-1 of each row's accepted path (no sync). The one dataclass implements SGLang's
``DeviceAuxiliaryOutput`` / ``HostAuxiliaryOutput`` protocol (``sglang.srt.managers.auxiliary_output``):
``copy_to_host`` returns the same type holding host tensors, copied by SGLang together with the
batch's tokens (no extra sync), and ``consume`` runs on that host copy after the tokens are
committed to each request and before responses are streamed. Rows align with ``batch.reqs``;
the token of draft position i lands at output index ``commit.output_index + i``.

Sampled rows (``asd-sampled``): ``with_sampled`` adds the sampled verifier's per-position receipts
(relaxed nodes: token, q, a, charge, accepted; ``verify.sampled_verify.SampledVerifyOutput``) for
the rows it decided; a round without a sampled decision leaves those fields None. The levels a
scope kept strict (``sampled_scope_skipped``, None without a scoped row) ride along the same way: a
device tensor of the round, copied with the tokens and counted into the ledger and the metric on the
host, so under the overlap scheduler they reach the request one step late with the rest of its round,
and a request finished in the lagging round (no commit) is not counted.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import torch

if TYPE_CHECKING:
    from sglang_asd.verify import ASDVerifyOutput
    from sglang_asd.verify.sampled_verify import SampledVerifyOutput


@dataclasses.dataclass(frozen=True)
class ASDRoundOutput:
    active: torch.Tensor  # [bs] bool: the row was decided by ASD
    exception_mask: torch.Tensor  # [bs, K] bool: draft position i was an exception
    suffix_mask: torch.Tensor  # [bs, K] bool: an exact token accepted after the round's first exception
    exception_regret: torch.Tensor  # [bs, K] float32
    draft_token: torch.Tensor  # [bs, K] int64: the accepted token at each draft position
    target_token: torch.Tensor  # [bs, K] int64: the target's argmax there
    # Sampled rows (None when the round had no sampled decision):
    sampled_active: Optional[torch.Tensor] = None  # [bs] bool: decided by the sampled verifier
    relaxed: Optional[torch.Tensor] = None  # [bs, K] bool: the node at draft position i was relaxed (charged)
    relaxed_token: Optional[torch.Tensor] = None  # [bs, K] int64: the relaxed child's token
    relaxed_q: Optional[torch.Tensor] = None  # [bs, K] float32: its q = p(token)
    relaxed_accept_prob: Optional[torch.Tensor] = None  # [bs, K] float32: its a
    relaxed_charge: Optional[torch.Tensor] = None  # [bs, K] float32: KL charged (nats)
    relaxed_accepted: Optional[torch.Tensor] = None  # [bs, K] bool: the relaxed token was committed
    scope_skipped: Optional[torch.Tensor] = None  # [bs] int32: nodes kept strict by the row's scope (``ASDVerifyOutput``)
    sampled_scope_skipped: Optional[torch.Tensor] = None  # [bs] int32: sampled rows' relaxations the scope kept strict

    @classmethod
    def of_round(cls, out: "ASDVerifyOutput", active: torch.Tensor, candidates: torch.Tensor,
                 K: int) -> "ASDRoundOutput":
        """What the host ledger needs of one round: ``out`` the verify's decision, ``active`` [bs]
        the rows it decided, ``candidates`` [bs, W] the draft tree's tokens, K the draft depth."""
        bs, W = candidates.shape
        # Local node id of each path position 1..K (draft positions 0..K-1); -1 padding -> node 0.
        path = out.accept_index[:, 1:].to(torch.int64) - torch.arange(bs, device=candidates.device)[:, None] * W
        accepted = torch.arange(K, device=candidates.device) < out.num_correct_drafts[:, None]  # [bs, K]
        after_first_exception = out.exception_mask.cumsum(dim=1) > 0
        return cls(
            active=active,
            exception_mask=out.exception_mask,
            suffix_mask=accepted & ~out.exception_mask & after_first_exception,
            exception_regret=out.exception_regret,
            draft_token=candidates.gather(1, path.clamp(min=0)),
            target_token=out.target_token,
            scope_skipped=out.scope_skipped,
        )

    def with_sampled(self, out: "SampledVerifyOutput", sampled_active: torch.Tensor) -> "ASDRoundOutput":
        """This round's output with the sampled verifier's receipts for the rows ``sampled_active`` [bs]."""
        return dataclasses.replace(
            self, sampled_active=sampled_active, relaxed=out.relaxed & sampled_active[:, None],
            relaxed_token=out.relaxed_token, relaxed_q=out.relaxed_q, relaxed_accept_prob=out.relaxed_accept_prob,
            relaxed_charge=out.relaxed_charge, relaxed_accepted=out.relaxed_accepted,
            sampled_scope_skipped=out.scope_skipped)

    def copy_to_host(self, copy_tensor: Callable[[torch.Tensor], torch.Tensor]) -> "ASDRoundOutput":
        return ASDRoundOutput(**{f.name: None if getattr(self, f.name) is None else copy_tensor(getattr(self, f.name))
                                 for f in dataclasses.fields(self)})

    def consume(self, batch, commits: Sequence[Optional[object]]) -> None:
        """Post each row's exceptions to its request's ledger, at their output positions.

        Every rule's exceptions are recorded (spent regret is reported for every rule; only asd's
        device ledger was charged). Only tokens that became visible count: a round cut short by a stop token or
        ``max_new_tokens`` charges neither exceptions nor suffix tokens after the cut. A request
        that finished in an earlier round but was still in this one (the overlap scheduler's
        one-step lag) gets no commit, so its extra round charges nobody.
        """
        if self.sampled_active is not None:
            self._consume_sampled(batch, commits)
        active = self.active.numpy()
        if not active.any():
            return
        from sglang_asd.sglang_seams.state.runtime import get_runtime

        exception = self.exception_mask.numpy()
        suffix = self.suffix_mask.numpy()
        regret = self.exception_regret.numpy()
        draft = self.draft_token.numpy()
        target = self.target_token.numpy()
        skipped = None if self.scope_skipped is None else self.scope_skipped.numpy()
        totals: dict = {}  # rule -> [exceptions, regret, suffix tokens, scope-skipped nodes] of this round
        for row in np.flatnonzero(active):
            commit = commits[row]
            ledger = getattr(batch.reqs[row], "asd_ledger", None)
            if commit is None or ledger is None:
                continue
            total = totals.setdefault(ledger.rule, [0, 0.0, 0, 0])
            visible = min(len(commit.token_ids), exception.shape[1])
            for pos in np.flatnonzero(exception[row, :visible]):
                ledger.record(commit.output_index + int(pos), int(draft[row, pos]), int(target[row, pos]),
                              float(regret[row, pos]))
                total[0] += 1
                total[1] += float(regret[row, pos])
            n_suffix = int(suffix[row, :visible].sum())
            ledger.suffix_tokens += n_suffix
            total[2] += n_suffix
            if skipped is not None:
                ledger.scope_skipped += int(skipped[row])
                total[3] += int(skipped[row])
        metrics = get_runtime().metrics
        if metrics is not None:
            for rule, (exceptions_total, spent_total, suffix_total, skipped_total) in totals.items():
                metrics.observe_round(exceptions=exceptions_total, regret=spent_total, suffix_tokens=suffix_total,
                                      rule=rule, scope_skipped=skipped_total)

    def _consume_sampled(self, batch, commits: Sequence[Optional[object]]) -> None:
        """Post each sampled row's relaxed nodes to its request's ledger, at their output positions.

        As for exceptions, only nodes whose output position became visible are posted (the
        device charged the cut ones too; the host receipt reports what the output shows, and its
        spent is the sum of its events' charges); a request without a commit (finished in an
        earlier round, the overlap scheduler's lag) is not charged."""
        from sglang_asd.sglang_seams.state.runtime import get_runtime

        relaxed = self.relaxed.numpy()
        skipped = None if self.sampled_scope_skipped is None else self.sampled_scope_skipped.numpy()
        rows = np.flatnonzero(self.sampled_active.numpy() & (relaxed.any(axis=1) if skipped is None
                                                             else relaxed.any(axis=1) | (skipped > 0)))
        if rows.size == 0:
            return
        token = self.relaxed_token.numpy()
        q = self.relaxed_q.numpy()
        a = self.relaxed_accept_prob.numpy()
        charge = self.relaxed_charge.numpy()
        accepted = self.relaxed_accepted.numpy()
        nodes, nats, kept_strict = 0, 0.0, 0
        for row in rows:
            commit = commits[row]
            ledger = getattr(batch.reqs[row], "asd_ledger", None)
            if commit is None or ledger is None:
                continue
            if skipped is not None:
                ledger.scope_skipped += int(skipped[row])
                kept_strict += int(skipped[row])
            visible = min(len(commit.token_ids), relaxed.shape[1])
            for pos in np.flatnonzero(relaxed[row, :visible]):
                ledger.record_relaxed(commit.output_index + int(pos), int(token[row, pos]), float(q[row, pos]),
                                      float(a[row, pos]), float(charge[row, pos]), bool(accepted[row, pos]))
                nodes += 1
                nats += float(charge[row, pos])
        metrics = get_runtime().metrics
        if metrics is not None:
            metrics.observe_relaxed(nodes=nodes, kl=nats)
            metrics.observe_round(exceptions=0, regret=0.0, suffix_tokens=0, rule="asd-sampled", scope_skipped=kept_strict)
