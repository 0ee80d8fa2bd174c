"""The device ledger: one row per request-pool slot, read by the verify hot path without a sync.

Row ``s`` holds the ASD state of the request that owns ``req_to_token_pool`` slot ``s``:
``remaining`` budget (nats), ``gate``, ``cap`` and its stop tokens. A row whose request is not
served with ASD (no budget, sampling, or no request at all, e.g. SGLang's padding row 0) is all
zeros, and a zero row verifies exactly like strict greedy.

Ordering: every device write is issued by the verify step, on the stream that runs it.
- The verify step (``begin_verify``) gathers rows with ``batch.req_pool_indices`` (already on the
  device) and ``charge`` scatters the new ``remaining`` back, so a request is charged on the
  device in stream order: under the overlap scheduler, batch N+1's verify sees batch N's charge
  although the host has not yet processed batch N.
- Admission (a request takes a slot) and release (it gives the slot back) happen on the
  scheduler's host thread, while the previous batch may still be in flight on the device. They
  only *stage* the row on the host (``admit`` / ``release``); ``begin_verify`` applies everything
  staged, in host order, before its gather, on the verify step's stream. So a staged write can
  never land between an earlier batch's gather and its write-back: that batch's verify was
  issued before the write was staged, hence runs before it in stream order. Without this, SGLang's
  scheduling stream (which admission runs on) is ordered after the in-flight forward only by
  ``Scheduler._apply_war_barrier``, whose event precedes ``eagle_sample`` for NGRAM and staged
  multi-layer EAGLE: a slot freed by request A (finished in batch N, still in batch N+1) and given
  at once to request B (LIFO) would get B's budget overwritten by A's leftover at N+1's write-back.
  The order argument holds for any worker, since it only relies on every reader applying the
  staged writes first, on its own stream.
- Staged writes are applied with one host-to-device copy (pinned, non-blocking) of a packed
  ``[n, 4 + T]`` float64 block; slots, caps and token ids are exact in float64. A step that
  follows no admission or release copies nothing.

``owner`` is the host's view of which request (its ``RequestLedger``) a row belongs to; a slot
lent to another request without being freed (SGLang's streaming sessions) is re-admitted for it.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import torch

_FIELDS = 4  # slot, remaining, gate, cap; then the stop tokens


class ASDLedgerTable:
    def __init__(self, num_slots: int, device: torch.device | str, stop_width: int = 4):
        self.device = torch.device(device)
        self.remaining = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots]
        self.gate = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots]
        self.cap = torch.zeros(num_slots, dtype=torch.int32, device=self.device)  # [slots]
        self.stop_tokens = torch.full((num_slots, stop_width), -1, dtype=torch.int64, device=self.device)  # [slots, T]
        self.owner: dict[int, object] = {}  # host view: slot -> the ledger its row holds (ASD rows only)
        self._staged: dict[int, tuple] = {}  # slot -> (remaining, gate, cap, stop tokens); last write wins

    @property
    def num_active(self) -> int:
        """Slots whose row (once staged writes are applied) lets ASD decide."""
        return len(self.owner)

    @property
    def has_staged(self) -> bool:
        return bool(self._staged)

    def admit(self, slots: Sequence[int], owners: Sequence[object], remaining: Sequence[float],
              gate: Sequence[float], cap: Sequence[int], stop_tokens: Sequence[Iterable[int]]) -> None:
        """Stage the rows of requests that took (or were lent) these slots."""
        for s, o, r, g, c, stops in zip(slots, owners, remaining, gate, cap, stop_tokens):
            self._staged[s] = (float(r), float(g), int(c), sorted({int(t) for t in stops}))
            if r > 0 and g > 0 and c > 0:
                self.owner[s] = o
            else:
                self.owner.pop(s, None)

    def release(self, slots: Sequence[int]) -> None:
        """Stage zero rows for slots given back, so a slot never carries a budget to its next owner."""
        for s in slots:
            if self.owner.pop(s, None) is not None or s in self._staged:
                self._staged[s] = (0.0, 0.0, 0, [])

    def owner_of(self, slot: int) -> Optional[object]:
        return self.owner.get(slot)

    # -- the verify step (stream order) ---------------------------------------------------------

    def begin_verify(self, rows: torch.Tensor):
        """Apply staged writes, then gather ``rows`` ([bs] slots on the device).

        -> remaining [bs] float32, gate [bs] float32, cap [bs] int32, stop_tokens [bs, T] int64.
        """
        if self._staged:
            self._apply_staged()
        return self.remaining[rows], self.gate[rows], self.cap[rows], self.stop_tokens[rows]

    def charge(self, rows: torch.Tensor, remaining: torch.Tensor) -> None:
        """Write back each row's remaining budget after the round (``rows`` [bs], ``remaining`` [bs])."""
        self.remaining.index_put_((rows,), remaining)

    def _apply_staged(self) -> None:
        staged, self._staged = self._staged, {}
        width = max(len(v[3]) for v in staged.values())
        if width > self.stop_tokens.shape[1]:  # rare: grow to the next power of two, in stream order
            grown = torch.full((self.stop_tokens.shape[0], _next_pow2(width)), -1, dtype=torch.int64,
                               device=self.device)
            grown[:, : self.stop_tokens.shape[1]] = self.stop_tokens
            self.stop_tokens = grown
        T = self.stop_tokens.shape[1]
        packed = [[s, r, g, c, *stops, *([-1] * (T - len(stops)))] for s, (r, g, c, stops) in staged.items()]
        pinned = self.device.type == "cuda"
        host = torch.tensor(packed, dtype=torch.float64, pin_memory=pinned)  # [n, 4 + T]
        block = host.to(self.device, non_blocking=pinned)
        idx = block[:, 0].long()
        self.remaining[idx] = block[:, 1].float()
        self.gate[idx] = block[:, 2].float()
        self.cap[idx] = block[:, 3].int()
        self.stop_tokens[idx] = block[:, _FIELDS:].long()


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()
