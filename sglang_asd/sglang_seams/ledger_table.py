"""The device ledger: one row per request-pool slot, read by the verify hot path without a sync.

Row ``s`` holds the ASD state of the request that owns ``req_to_token_pool`` slot ``s``:
``remaining`` budget (nats), ``gate``, ``cap`` and its stop tokens. A row whose request is not
served with ASD (no budget, sampling, or no request at all, e.g. SGLang's padding row 0) is all
zeros, and a zero row verifies exactly like strict greedy. The verify step gathers rows with
``batch.req_pool_indices`` (already on the device) and scatters the new ``remaining`` back, so the
ledger is charged on the device in stream order: under the overlap scheduler, batch N+1's verify
sees batch N's charge even though the host has not yet processed batch N.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch


class ASDLedgerTable:
    def __init__(self, num_slots: int, device: torch.device | str, stop_width: int = 4):
        self.device = torch.device(device)
        self.remaining = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots]
        self.gate = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots]
        self.cap = torch.zeros(num_slots, dtype=torch.int32, device=self.device)  # [slots]
        self.stop_tokens = torch.full((num_slots, stop_width), -1, dtype=torch.int64, device=self.device)  # [slots, T]
        self.active_slots: set[int] = set()  # host view: slots whose request is served with ASD

    @property
    def num_active(self) -> int:
        return len(self.active_slots)

    def _to_device(self, values: Sequence, dtype: torch.dtype) -> torch.Tensor:
        host = torch.tensor(values, dtype=dtype)
        if self.device.type == "cuda":
            return host.pin_memory().to(self.device, non_blocking=True)
        return host.to(self.device)

    def admit(self, slots: Sequence[int], remaining: Sequence[float], gate: Sequence[float], cap: Sequence[int],
              stop_tokens: Sequence[Iterable[int]]) -> None:
        """Write the rows of requests that just took these slots (a zero row = strict)."""
        if not slots:
            return
        stops = [sorted(set(int(t) for t in s)) for s in stop_tokens]
        width = max([len(s) for s in stops] + [self.stop_tokens.shape[1]])
        if width > self.stop_tokens.shape[1]:  # rare: grow once, on the host side of admission
            grown = torch.full((self.stop_tokens.shape[0], width), -1, dtype=torch.int64, device=self.device)
            grown[:, : self.stop_tokens.shape[1]] = self.stop_tokens
            self.stop_tokens = grown
        padded = [s + [-1] * (width - len(s)) for s in stops]
        idx = self._to_device(list(slots), torch.int64)
        self.remaining[idx] = self._to_device(list(remaining), torch.float32)
        self.gate[idx] = self._to_device(list(gate), torch.float32)
        self.cap[idx] = self._to_device(list(cap), torch.int32)
        self.stop_tokens[idx] = self._to_device(padded, torch.int64)
        for s, r, g, c in zip(slots, remaining, gate, cap):
            (self.active_slots.add(s) if (r > 0 and g > 0 and c > 0) else self.active_slots.discard(s))

    def release(self, slots: Sequence[int]) -> None:
        """Zero the rows of freed slots, so a slot never carries a budget to its next owner."""
        slots = [s for s in slots if s in self.active_slots]
        if not slots:
            return
        idx = self._to_device(slots, torch.int64)
        self.remaining[idx] = 0.0
        self.gate[idx] = 0.0
        self.cap[idx] = 0
        self.stop_tokens[idx] = -1
        self.active_slots.difference_update(slots)
