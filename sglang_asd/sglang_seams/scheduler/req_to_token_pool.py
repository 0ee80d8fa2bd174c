"""Seam: ``sglang.srt.mem_cache.memory_pool.ReqToTokenPool.alloc`` and ``.free_rows``.

- Hook kind: AROUND (calls the original).
- Process: scheduler (every TP rank).
- Why: a request's device ledger row must be written when it takes a request-pool slot (first
  admission, or resumption after retraction) and zeroed when it gives the slot back, so the verify
  hot path can read every row's budget by ``req_pool_indices`` with no host sync and no Python
  loop over requests.
- How: after ``alloc`` returns, every request whose slot's row does not already belong to it
  gets its row staged (``ledger_table.py`` explains why rows are staged on the host and applied
  by the verify step): its rule id, remaining (asd: budget - host spent, exact at admission: a
  retracted request is only re-admitted after its last in-flight batch was processed; other
  rules: the budget, never decremented), the rule's gate (g, margin or threshold), cap, stop
  tokens, its output count (``produced``: ``produced_at_admission``) and, for a scoped request, its
  scope (``_scope_row``); a strict request gets a zero row. A sampled request's row (rule ``asd-sampled``) holds
  B - spent in nats of KL, its floor in the gate column, its relaxed-node cap in the cap column
  and its power in the power column (``ledger_table.py``). A request under a per-token rate
  (asd or sampled) also stages its rate and burst - host spent (exact at admission, as
  ``remaining``); every other row stages rate 0 and +inf, an accrual that never binds. That covers a slot lent to the next turn of a
  streaming session without a free (``srt/session/streaming_session.py``): the ledger belongs to
  the request, not to the slot. ``free_rows`` stages zero rows for the slots it frees.
- Upstream: none yet. A request-slot lifecycle callback (alloc/free) on ReqToTokenPool would make
  this a registration instead of a hook; proposed in patches/.
- Removal: when SGLang has per-request verify state of its own.
- Tested on: sglang 0.5.23.
"""

from __future__ import annotations

from sglang_asd.hooks.registry import Seam
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable
from sglang_asd.sglang_seams.state.runtime import get_runtime
from sglang_asd.verify.rules import RULE_ID

TARGETS = (
    "sglang.srt.mem_cache.memory_pool.ReqToTokenPool.alloc",
    "sglang.srt.mem_cache.memory_pool.ReqToTokenPool.free_rows",
)


def ledger_table(pool) -> ASDLedgerTable:
    table = getattr(pool, "_asd_table", None)
    if table is None:
        table = ASDLedgerTable(pool._alloc_size, pool.device)
        pool._asd_table = table
    return table


def _stop_tokens(req) -> set[int]:
    stops = set(req.eos_token_ids or ())
    stops |= set(req.sampling_params.stop_token_ids or ())
    tok = getattr(req, "tokenizer", None)
    if tok is not None:
        if tok.eos_token_id is not None:
            stops.add(tok.eos_token_id)
        stops |= set(getattr(tok, "additional_stop_token_ids", None) or ())
    return stops


def produced_at_admission(req) -> int:
    """The output tokens a request has committed when its first verify after this admission runs:
    those it holds now, plus the one its prefill (first admission, a chunked prefill's first chunk,
    a retracted request's re-prefill of prompt + output, a streaming session's next turn) samples
    before it decodes. No batch of the request is in flight at admission, so ``output_ids`` is exact."""
    return len(req.output_ids) + 1


def alloc_around(original, self, reqs, *args, produced_of=produced_at_admission, **kwargs):
    """``produced_of(req)``: the request's output count at admission (the PD decode pool passes its own)."""
    result = original(self, reqs, *args, **kwargs)
    if result is None:
        return result
    table = getattr(self, "_asd_table", None)
    admitted, lent = [], []
    for r in reqs:
        ledger = getattr(r, "asd_ledger", None)
        ledger = ledger if ledger is not None and ledger.applied else None
        slot = r.kv.req_pool_idx
        current = table.owner_of(slot) if table is not None else None
        if current is ledger:
            continue  # a new strict request on a zero row, or a chunk of a request already admitted
        if ledger is not None:
            admitted.append(r)
        else:
            lent.append(slot)  # a slot lent on without a free (streaming session) to a strict request
    if admitted:
        table = ledger_table(self)
        columns = [_columns(r.asd_ledger) for r in admitted]  # (gate, cap, power) per request
        produced = [produced_of(r) for r in admitted]
        table.admit(
            slots=[r.kv.req_pool_idx for r in admitted],
            owners=[r.asd_ledger for r in admitted],
            remaining=[r.asd_ledger.device_remaining for r in admitted],
            gate=[c[0] for c in columns],
            cap=[c[1] for c in columns],
            stop_tokens=[_stop_tokens(r) for r in admitted],
            rule=[RULE_ID[r.asd_ledger.rule] for r in admitted],
            power=[c[2] for c in columns],
            produced=produced,
            scope=[_scope_row(r, n) for r, n in zip(admitted, produced)],
            rate=[r.asd_ledger.choice.rate if r.asd_ledger.accrues else 0.0 for r in admitted],
            burst_left=[r.asd_ledger.device_burst_left for r in admitted],
        )
    if lent:
        table.release(lent)
    if admitted or lent:
        _report_active(table)
    return result


def _scope_row(req, produced: int):
    """A scoped request's scope columns (``ledger_table.ASDLedgerTable.admit``), or None: its span
    state after the prompt and the output before its next verify's root (output index
    ``produced - 1``, which that verify folds in itself: the token a prefill is about to sample is
    not known here)."""
    markers = req.asd_ledger.markers
    if markers is None:
        return None
    state = markers.state_after(list(req.origin_input_ids) + list(req.output_ids[:max(produced - 1, 0)]))
    return markers.strict_prefix, state, markers.require, markers.forbid, markers.ops


def _columns(ledger) -> tuple:
    """A request's (gate, cap, power) columns: the sampled rule's (floor, cap, power) for a sampled
    request, else its greedy rule's (``ASDConfig.device_columns``: gate, cap, 0; fly: threshold,
    window, top-k)."""
    if ledger.sampled:
        sampled = ledger.choice.sampled
        return sampled.floor, sampled.max_relaxed_per_block, sampled.power
    return ledger.choice.config.device_columns


def _report_active(table: ASDLedgerTable) -> None:
    metrics = get_runtime().metrics
    if metrics is not None:
        metrics.set_active(table.num_active)


def free_rows_around(original, self, indices, *args, **kwargs):
    table = getattr(self, "_asd_table", None)
    if table is not None and table.num_active:
        table.release([int(i) for i in indices])
        _report_active(table)
    return original(self, indices, *args, **kwargs)


def hooks():
    return [(TARGETS[0], alloc_around), (TARGETS[1], free_rows_around)]


SEAMS = (Seam("scheduler", hooks),)
