"""The device ledger: one row per request-pool slot, read by the verify hot path without a sync.

Row ``s`` holds the ASD state of the request that owns ``req_to_token_pool`` slot ``s``: its
``rule`` (id: ``sglang_asd.verify.rules.RULE_ID``), ``remaining`` (nats: asd B - spent; other
rules B, never decremented), the rule's ``gate`` (g, margin or threshold), ``cap``, ``power`` and
its stop tokens. A row whose request is not served with ASD (no budget, or no request at all,
e.g. SGLang's padding row 0) is all zeros, and a zero row verifies exactly like strict greedy and
walks exactly like SGLang's sampling verifier.

A sampled request's row (rule ``asd-sampled``, ``verify.rules.SAMPLED_RULE_ID``) uses the same
columns with the sampled rule's meaning: ``remaining`` = B - spent in nats of KL (charged like
asd's), ``gate`` = the floor tau, ``cap`` = relaxed nodes per block, and ``power`` (a = q ** power),
the one column only sampled rows use (0 elsewhere). A fly row (``verify.rules``, ``deferred``)
holds its entropy threshold in ``gate``, its window in ``cap`` and its entropy top-k in ``power``. The greedy verifier never decides such a row
(``verify.rules.rows_on``), and the sampled verifier only such rows (``sampled_rows_on``).

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
- DSPARK and DFLASH (``dspark_accept.py``, ``dflash_accept.py``) read the table when their
  decode step opens (``step/verify_step.open``, at the start of the worker's decode step) and
  charge it in their accept, which runs eagerly inside that step on the forward stream, after the
  target's verify forward (graph replay or eager) and before ``on_publish``; between the two only
  the draft and the verify forward run, which never touch the table. Neither worker
  overrides the scheduler's shared-read runner, so ``Scheduler._apply_war_barrier`` waits on the
  target model runner's event, recorded around the verify forward, i.e. before the accept: as for
  NGRAM, the scheduling stream is not ordered after the charge, and the staging above is what keeps
  a recycled slot's admission from landing between a batch's gather and its write-back. With an
  eager verify no event is published and the barrier waits on the whole forward stream, which only
  orders more. The next batch's decode step is issued on the same forward stream after this one's
  accept, so it reads this batch's charge (the one-step lag of the host ledger is the same as for
  EAGLE: receipts come from the per-round outputs of committed rounds). DSPARK's folded accept
  (inside the verify CUDA graph) is disarmed in every step that holds an ASD row, so the table is
  only ever read and charged by eager code on that stream.
- On a PD decode server the rows live on ``DecodeReqToTokenPool``
  (``scheduler/decode_req_to_token_pool.py``): admission at pre-allocation (before the KV arrives)
  and when a retracted request is resumed, release in ``free(req)``. Both run on the host between
  launches of the decode loops (``event_loop_overlap_disagg_decode`` included), so the staging
  argument above holds unchanged; the argument is spelled out there.
- Staged writes are applied with one host-to-device copy (pinned, non-blocking) of a packed
  ``[n, 13 + T + 4M]`` float64 block; slots, caps, rule ids, counts, bits and token ids are exact in float64. A step
  that follows no admission or release copies nothing.
- Sampled rows follow the same order: admitted and released by staging, applied by
  ``begin_verify`` (called by the verify step's ``open`` before SGLang's sampling branch runs), and charged by
  the same verify step after ``asd_sampled_verify`` decided them, on the same stream (the sampling
  branch runs eagerly after the verify forward, never inside a CUDA graph). ``rules_active`` lists
  the greedy rules only (the greedy kernel's choice); ``sampled_active`` says, on the host, whether
  any sampled row is on, so the sampled verifier runs only then.
- Which rules the rows use (``rules_active``) is known on the host without a sync: it is updated
  with ``owner`` at admission and release, and ``begin_verify`` applies exactly those staged
  writes before the batch's verify is issued, so at that moment the host view describes every
  non-zero row the device will read for this batch (a superset of the batch's own rows). The verify
  step chooses its kernel from it (``verify.dispatch``). A rule's id never changes while a row
  holds a request (``charge`` writes ``remaining`` only), so the one-step lag of the overlap
  scheduler cannot make the view stale.

Output positions: ``produced`` holds the output tokens committed so far for the row's request, so
draft position i of the next verify (the node at depth i + 1) is output index ``produced + i``, the
index its receipt event reports (``state/round_output.py``: ``commit.output_index + i``). It is
set at admission from the host (``admit``'s ``produced``: the request's committed output, plus the
token its prefill samples before its first verify, ``scheduler/req_to_token_pool.py``) and
advanced by ``advance`` in the verify step's ``settle`` by each row's committed tokens (accepted
drafts + the bonus). Its order is ``remaining``'s: ``settle`` writes it on the verify stream after
the batch's decision, the next batch's ``open`` gathers it on the same stream, so under the overlap
scheduler batch N+1 reads the count after batch N's commit although the host has not processed
batch N; the host value staged at admission is exact for the same reason a re-admitted
``remaining`` is (no batch of the request is in flight when it takes a slot), and a staged write
is applied before the gather of the first batch that holds the slot. A row of a request that
finished in round N but was still in round N+1 (the overlap lag) is advanced once more; its
release zeroes it. Rows of strict requests are advanced too (their count is not read: every ASD
admission stages its own).

Scopes (``policy.scope``, ``verify.scope``): a scoped request's row also holds its
``strict_prefix``, its span ``scope_state`` (after every committed token before its next root),
the ``scope_require`` / ``scope_forbid`` bits and its marker tokens with their ops (``markers``
[slots, M, 4]: token, set, clear, toggle; token -1 pads); an unscoped row holds zeros and no
marker. The state is staged at admission (computed on the host from the request's prompt and
output before its root) and written by ``set_scope_state`` in ``settle``, in the same stream order
as ``remaining`` and ``produced``: a marker committed in round N changes the state batch N+1
gathers. ``scoped_active`` (host view, updated with ``owner``) says whether any ASD row has a scope:
only then does the verify step gather the scope columns and pass them to the verifier, so a
server whose requests use no scope runs exactly as without scopes.

Accrual (``asd_budget_per_token``, docs/CONTRACTS.md "Budgets that accrue with output"): ``rate``
(nats per output token) and ``burst_left`` (the request's burst minus everything it has spent;
+inf for a row without a rate, so the accrual never binds it, and never a large finite stand-in
that would swallow what is subtracted from it). ``begin_verify`` gathers each row's ``limit`` =
``min(remaining, rate * produced + burst_left)``, what the verifiers read as the row's remaining
(``rows_on``, ``asd_verify``, ``asd_sampled_verify``), and ``charge`` lowers ``remaining`` and
``burst_left`` by the same block spend. So after a round, spent <= rate * produced + burst, with
``produced`` the count before the round; every event of the round sits at an output position
>= produced, so the cumulative spent after it is <= rate * (its position) + burst: the bound holds
at every event, not just on average (conservative: tokens committed within the round accrue only
for the next one). Stream order is ``remaining``'s exactly: both columns are written only by the
staged admission (applied by ``begin_verify``) and by ``charge`` in the verify step's ``settle``,
and read by the next step's ``begin_verify`` on the same stream, after ``advance`` wrote the
count; under the overlap scheduler batch N+1's limit is computed from batch N's charge and count
although the host has not yet processed batch N (the same one-step lag as ``remaining``). ``rate``
is written only at admission. A rate row's host view (``owner``, rules) does not depend on the
accrual: a row whose limit is 0 in a round (rate > 0, burst 0, nothing produced yet) is simply not
decided by ASD in that round (``rows_on`` reads the limit).

``owner`` is the host's view of which request (its ``RequestLedger``) a row belongs to; a slot
lent to another request without being freed (SGLang's streaming sessions) is re-admitted for it.
"""

from __future__ import annotations

import collections
import math
from typing import FrozenSet, Iterable, NamedTuple, Optional, Sequence

import torch

from sglang_asd.policy.config import RULE_NAMES, RULES
from sglang_asd.verify.rules import SAMPLED_RULE_ID
from sglang_asd.verify.scope import ScopeRows

_FIELDS = 13  # slot, remaining, gate, cap, rule, power, produced, strict prefix, scope state, require, forbid,
# rate, burst_left; then the stop tokens, then the markers (4 values each)
_NO_SCOPE = (0, 0, 0, 0, ())  # strict prefix, state, require, forbid, marker ops


class LedgerRows(NamedTuple):
    """The rows of one verify batch, gathered by ``begin_verify``."""

    remaining: torch.Tensor  # [bs] float32
    gate: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    stop_tokens: torch.Tensor  # [bs, T] int64, -1 padded
    rule: torch.Tensor  # [bs] int32 rule id
    power: torch.Tensor  # [bs] float32 (sampled rows: a = q ** power; 0 elsewhere)
    produced: torch.Tensor  # [bs] int32 output tokens committed so far: draft position i is output index produced + i
    rate: torch.Tensor  # [bs] float32 accrual rate (nats per output token; 0 without one)
    burst_left: torch.Tensor  # [bs] float32 burst - spent (+inf without a rate)
    limit: torch.Tensor  # [bs] float32 min(remaining, rate * produced + burst_left): the verifiers' remaining
    scope: Optional[ScopeRows] = None  # the rows' scopes, gathered only while some ASD row has one (``scoped_active``)


class ASDLedgerTable:
    def __init__(self, num_slots: int, device: torch.device | str, stop_width: int = 4):
        self.device = torch.device(device)
        self.remaining = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots]
        self.gate = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots]
        self.cap = torch.zeros(num_slots, dtype=torch.int32, device=self.device)  # [slots]
        self.rule = torch.zeros(num_slots, dtype=torch.int32, device=self.device)  # [slots] rule id
        self.power = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots] sampled rows only
        self.stop_tokens = torch.full((num_slots, stop_width), -1, dtype=torch.int64, device=self.device)  # [slots, T]
        self.produced = torch.zeros(num_slots, dtype=torch.int32, device=self.device)  # [slots] output tokens committed
        self.rate = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots] accrual rate
        self.burst_left = torch.zeros(num_slots, dtype=torch.float32, device=self.device)  # [slots] burst - spent
        int32 = dict(dtype=torch.int32, device=self.device)
        self.strict_prefix = torch.zeros(num_slots, **int32)  # [slots]
        self.scope_state = torch.zeros(num_slots, **int32)  # [slots] span state before the next root
        self.scope_require = torch.zeros(num_slots, **int32)  # [slots]
        self.scope_forbid = torch.zeros(num_slots, **int32)  # [slots]
        self.markers = torch.full((num_slots, 1, 4), -1, dtype=torch.int64, device=self.device)  # [slots, M, 4]
        self.markers[:, :, 1:] = 0
        self._scoped: set = set()  # host view: slots whose ASD row has a scope
        self.owner: dict[int, object] = {}  # host view: slot -> the ledger its row holds (ASD rows only)
        self._staged: dict[int, tuple] = {}  # slot -> (remaining, gate, cap, rule, power, produced, rate, burst_left,
        #                                       stop tokens); last write wins
        self._rule_of: dict[int, int] = {}  # host view: slot -> rule id (ASD rows only, as owner)
        self._rule_count: collections.Counter = collections.Counter()  # rule id -> ASD rows using it
        self._host_rows = torch.zeros(num_slots, dtype=torch.bool)  # host view: slot -> ASD row (as owner)

    @property
    def num_active(self) -> int:
        """Slots whose row (once staged writes are applied) lets ASD decide."""
        return len(self.owner)

    @property
    def has_staged(self) -> bool:
        return bool(self._staged)

    @property
    def rules_active(self) -> FrozenSet[str]:
        """The greedy rules of the rows that let ASD decide (host view, see the module docstring)."""
        return frozenset(RULE_NAMES[r] for r, n in self._rule_count.items() if n > 0 and r != SAMPLED_RULE_ID)

    @property
    def scoped_active(self) -> bool:
        """Host view: some ASD row has a scope (see the module docstring)."""
        return bool(self._scoped)

    @property
    def sampled_active(self) -> bool:
        """Host view: some row lets the sampled verifier decide."""
        return self._rule_count[SAMPLED_RULE_ID] > 0

    def admit(self, slots: Sequence[int], owners: Sequence[object], remaining: Sequence[float],
              gate: Sequence[float], cap: Sequence[int], stop_tokens: Sequence[Iterable[int]],
              rule: Optional[Sequence[int]] = None, power: Optional[Sequence[float]] = None,
              produced: Optional[Sequence[int]] = None, scope: Optional[Sequence[Optional[tuple]]] = None,
              rate: Optional[Sequence[float]] = None, burst_left: Optional[Sequence[float]] = None) -> None:
        """Stage the rows of requests that took (or were lent) these slots. ``rule``: rule ids
        (default asd); ``power``: sampled rows' power, fly rows' entropy top-k (default 0); ``produced``:
        output tokens committed before the row's first verify (default 0; see the module docstring);
        ``scope``: per row None (unscoped) or (strict prefix, state, require, forbid, marker ops as
        (token, set, clear, toggle) tuples), ``policy.scope.Markers`` at admission; ``rate``,
        ``burst_left``: the accrual (default 0 and +inf: none; module docstring). A row is an ASD row
        when the caller's rule admits exceptions on it (remaining, gate > 0 or a fly rule, and, for a
        capped rule, cap > 0),
        as ``verify.rules.rows_on`` / ``sampled_rows_on`` decide."""
        rule = [0] * len(slots) if rule is None else rule
        power = [0.0] * len(slots) if power is None else power
        produced = [0] * len(slots) if produced is None else produced
        scope = [None] * len(slots) if scope is None else scope
        rate = [0.0] * len(slots) if rate is None else rate
        burst_left = [math.inf] * len(slots) if burst_left is None else burst_left
        for s, o, r, g, c, stops, k, w, n, sc, a, b in zip(slots, owners, remaining, gate, cap, stop_tokens, rule,
                                                           power, produced, scope, rate, burst_left):
            self._staged[s] = (float(r), float(g), int(c), int(k), float(w), int(n), sorted({int(t) for t in stops}),
                               _NO_SCOPE if sc is None else sc, float(a), float(b))
            self._forget(s)
            capped = k == SAMPLED_RULE_ID or RULES[RULE_NAMES[k]].capped
            deferred = k != SAMPLED_RULE_ID and RULES[RULE_NAMES[k]].deferred  # fly: any threshold
            if r > 0 and (g > 0 or deferred) and (c > 0 or not capped):
                self.owner[s] = o
                self._host_rows[s] = True
                self._rule_of[s] = int(k)
                self._rule_count[int(k)] += 1
                if sc is not None:
                    self._scoped.add(s)

    def release(self, slots: Sequence[int]) -> None:
        """Stage zero rows for slots given back, so a slot never carries a budget to its next owner."""
        for s in slots:
            owned = s in self.owner
            self._forget(s)
            if owned or s in self._staged:
                self._staged[s] = (0.0, 0.0, 0, 0, 0.0, 0, [], _NO_SCOPE, 0.0, 0.0)

    def _forget(self, slot: int) -> None:
        """Drop ``slot`` from the host view (owner, rule counts)."""
        self.owner.pop(slot, None)
        self._host_rows[slot] = False
        self._scoped.discard(slot)
        k = self._rule_of.pop(slot, None)
        if k is not None:
            self._rule_count[k] -= 1

    def owner_of(self, slot: int) -> Optional[object]:
        return self.owner.get(slot)

    def holds_rows(self, slots_cpu: Optional[torch.Tensor]) -> bool:
        """Host view: does a batch with these slots (``[bs]`` int64 on the host, SGLang's
        ``req_pool_indices_cpu``) hold an ASD row? No device sync: a vectorized host lookup. Without
        the host slots, any ASD row in the table counts (a superset)."""
        if slots_cpu is None or slots_cpu.device.type != "cpu":
            return self.num_active > 0
        return bool(self._host_rows[slots_cpu].any())

    # -- the verify step (stream order) ---------------------------------------------------------

    def begin_verify(self, rows: torch.Tensor) -> LedgerRows:
        """Apply staged writes, then gather ``rows`` ([bs] slots on the device) and each row's
        ``limit`` (the accrual, module docstring)."""
        if self._staged:
            self._apply_staged()
        remaining, produced = self.remaining[rows], self.produced[rows]
        rate, burst_left = self.rate[rows], self.burst_left[rows]
        limit = torch.minimum(remaining, rate * produced.to(rate.dtype) + burst_left)
        scope = ScopeRows(produced, self.strict_prefix[rows], self.scope_state[rows], self.scope_require[rows],
                          self.scope_forbid[rows], self.markers[rows]) if self._scoped else None
        return LedgerRows(remaining, self.gate[rows], self.cap[rows], self.stop_tokens[rows],
                          self.rule[rows], self.power[rows], produced, rate, burst_left, limit, scope)

    def charge(self, rows: torch.Tensor, remaining: torch.Tensor, burst_left: Optional[torch.Tensor] = None) -> None:
        """Write back each row's remaining budget after the round (``rows`` [bs], ``remaining`` [bs])
        and, with ``burst_left`` [bs], its accrual column (lowered by the same spend); the caller
        passes rows of rules without a ledger unchanged."""
        self.remaining.index_put_((rows,), remaining)
        if burst_left is not None:
            self.burst_left.index_put_((rows,), burst_left)

    def advance(self, rows: torch.Tensor, produced: torch.Tensor) -> None:
        """Write back each row's output count after the round (``rows`` [bs], ``produced`` [bs]: the
        gathered count + the tokens the round committed), in stream order as ``charge``."""
        self.produced.index_put_((rows,), produced.to(self.produced.dtype))

    def set_scope_state(self, rows: torch.Tensor, state: torch.Tensor) -> None:
        """Write back each row's span state after the round (``rows`` [bs], ``state`` [bs]), in
        stream order as ``charge``."""
        self.scope_state.index_put_((rows,), state.to(self.scope_state.dtype))

    def _apply_staged(self) -> None:
        staged, self._staged = self._staged, {}
        width = max(len(v[6]) for v in staged.values())
        if width > self.stop_tokens.shape[1]:  # rare: grow to the next power of two, in stream order
            grown = torch.full((self.stop_tokens.shape[0], _next_pow2(width)), -1, dtype=torch.int64,
                               device=self.device)
            grown[:, : self.stop_tokens.shape[1]] = self.stop_tokens
            self.stop_tokens = grown
        n_markers = max(len(v[7][4]) for v in staged.values())
        if n_markers > self.markers.shape[1]:  # as the stop tokens
            grown = torch.zeros((self.markers.shape[0], _next_pow2(n_markers), 4), dtype=torch.int64, device=self.device)
            grown[:, :, 0] = -1
            grown[:, : self.markers.shape[1]] = self.markers
            self.markers = grown
        T, M = self.stop_tokens.shape[1], self.markers.shape[1]
        packed = [[s, r, g, c, k, w, n, *sc[:4], a, b, *stops, *([-1] * (T - len(stops))),
                   *(v for op in sc[4] for v in op), *([-1, 0, 0, 0] * (M - len(sc[4])))]
                  for s, (r, g, c, k, w, n, stops, sc, a, b) in staged.items()]
        pinned = self.device.type == "cuda"
        host = torch.tensor(packed, dtype=torch.float64, pin_memory=pinned)  # [n, _FIELDS + T + 4M]
        block = host.to(self.device, non_blocking=pinned)
        idx = block[:, 0].long()
        self.remaining[idx] = block[:, 1].float()
        self.gate[idx] = block[:, 2].float()
        self.cap[idx] = block[:, 3].int()
        self.rule[idx] = block[:, 4].int()
        self.power[idx] = block[:, 5].float()
        self.produced[idx] = block[:, 6].int()
        self.strict_prefix[idx] = block[:, 7].int()
        self.scope_state[idx] = block[:, 8].int()
        self.scope_require[idx] = block[:, 9].int()
        self.scope_forbid[idx] = block[:, 10].int()
        self.rate[idx] = block[:, 11].float()
        self.burst_left[idx] = block[:, 12].float()  # +inf stays +inf
        self.stop_tokens[idx] = block[:, _FIELDS:_FIELDS + T].long()
        self.markers[idx] = block[:, _FIELDS + T:].long().view(-1, M, 4)


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()
