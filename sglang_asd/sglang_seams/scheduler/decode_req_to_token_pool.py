"""Seam: ``sglang.srt.disaggregation.decode.DecodeReqToTokenPool.alloc`` and ``.free``.

- Hook kind: AROUND (calls the original).
- Process: scheduler of a PD decode server (``--disaggregation-mode decode``; every TP rank). The
  hooks are installed in every scheduler; no other server mode builds this pool.
- Why: a PD decode server's request pool is ``DecodeReqToTokenPool`` (``srt/disaggregation/decode.py``),
  which is not a ``ReqToTokenPool``: it has its own ``alloc`` (slots from the front of its free
  list, plus pre-allocation slots) and a ``free(req)`` that never calls ``free_rows``, so the
  ledger hooks of ``req_to_token_pool.py`` never see its slots. The ledger table lives on this
  pool (``pool._asd_table``, one row per slot of its ``_alloc_size``), where the verify seams read
  it through ``batch.req_to_token_pool``.
- How: ``alloc`` runs ``req_to_token_pool.alloc_around`` (stage each ASD request's row when it
  takes a slot); ``free`` stages the zero row of the request's slot through
  ``req_to_token_pool.free_rows_around``, then frees. The slot lifecycle on the decode server:
  - admission: ``DecodePreallocQueue._pre_alloc`` takes the slot when a request from the prefill
    server is pre-allocated, before its KV arrives (so a row is staged while the transfer runs; no
    batch holds that slot yet, and ``asd_active_ledgers`` counts it); a retracted request takes a
    slot again in ``resume_retracted_reqs`` (through ``_pre_alloc``), with remaining = budget -
    host spent (exact: see below);
  - release: ``release_kv_cache`` -> ``free(req)`` when a request finishes (at its handoff token in
    ``process_batch_result_prebuilt``, or in a decode round), is aborted (in the prealloc or
    transfer queue, a failed transfer, a running request) or retracted.
  The ledger (``req.asd_ledger``) comes from ``Scheduler._create_generation_req``, which the decode
  server calls for every request it receives (``scheduler.py``), and receipts come from this
  server's output streamer: the client's response is the decode server's. The prefill server runs
  no verify step (``modes.py``: its receipts say ``unsupported:pd_prefill``).
- Ordering under the decode event loops (``event_loop_overlap_disagg_decode``; the normal loop is
  the same without in-flight batches). One iteration k: ``process_decode_queue`` (pre-allocation
  and resumption: admissions; failed or aborted transfers: releases), then
  ``get_next_disagg_decode_batch_to_run`` (``process_batch_result_prebuilt``: requests that finish
  at their handoff token release; ``update_running_batch``: retractions release), then
  ``run_batch`` launches batch k (its verify step calls ``begin_verify``), then batch k-1's results
  are processed (finished requests release). Every admission and release is host code run while
  batch k-1 (and, after ``run_batch``, batch k) may be in flight on the forward stream; each only
  stages its row on the host (``ledger_table.py``), and the next verify step applies everything
  staged before its gather, on its own stream. So a staged row lands after the charge of every
  batch launched before it was staged, and before the gather of every batch launched after: a
  request A that finished in batch k-1 is still in batch k (the overlap lag) and its slot may be
  given to B at iteration k+1 (``DecodeReqToTokenPool`` hands out the oldest free slot, so reuse is
  rarer than ``ReqToTokenPool``'s LIFO, but possible); A's zero row and B's row are both staged
  after batch k was launched, so batch k gathers and charges A's row (that extra round charges
  nobody: no commit), and B's row is applied by batch k+1's verify, after batch k's write-back.
  A retracted request's host spent is exact when it is re-admitted: it was retracted before batch
  k was launched, so its last batch was k-1, whose results are processed at the end of iteration
  k, before ``resume_retracted_reqs`` of iteration k+1 at the earliest. The prebuilt batch that
  brings transferred requests into the running batch runs no forward on the decode server
  (``_run_batch_prebuilt``), so it neither reads nor charges the table.
- Not covered: ``DecodeReqToTokenPool.clear`` (flush cache, memory release) empties the free list
  without a release, as ``ReqToTokenPool.clear`` does on a plain server; a cleared pool holds no
  running request, and every slot is re-admitted before it is read. ``HybridMambaDecodeReqToTokenPool``
  subclasses ``ReqToTokenPool`` and is covered by ``req_to_token_pool.py``.
- Upstream: none yet. The slot lifecycle callback proposed for ``ReqToTokenPool``
  (``0002-req-to-token-pool-slot-lifecycle-callbacks.patch``) would need the same registration
  on ``DecodeReqToTokenPool``, or this pool to share ``ReqToTokenPool``'s ``free`` -> ``free_rows``.
- Removal: with ``req_to_token_pool.py`` (SGLang has per-request verify state of its own).
- Tested on: sglang 0.5.23, CPU: served with Mooncake over TCP and with SGLang's fake backend
  (``tests/integration/test_pd.py``); the order above around the real pool
  (``tests/seams/test_decode_req_to_token_pool.py``); the overlap decode loop served on CPU through
  the test-only ``tests/cpu_overlap.py`` (SGLang turns overlap off on CPU), which runs its host side
  in this order but every op synchronously: the stream order above is argued, not run.
"""

from __future__ import annotations

from sglang_asd.hooks.registry import Seam
from sglang_asd.sglang_seams.scheduler import req_to_token_pool

TARGETS = (
    "sglang.srt.disaggregation.decode.DecodeReqToTokenPool.alloc",
    "sglang.srt.disaggregation.decode.DecodeReqToTokenPool.free",
)


def produced_at_admission(req) -> int:
    """A decode server's request at pre-allocation: the output it holds, plus the handoff token
    when one is still to be appended (a new request: the prefill server's first token, appended
    when the transfer lands; a rebootstrap: the boundary token SGLang popped at retraction and
    replays). A request resumed from its KV backup (``resume_retracted_reqs``) holds its whole
    output, the last token pending as in any decode round: nothing is sampled before it decodes."""
    pending = not req.output_ids or getattr(req, "pd_rebootstrap_in_progress", False)
    return len(req.output_ids) + int(bool(pending))


def alloc_around(original, self, reqs, *args, **kwargs):
    return req_to_token_pool.alloc_around(original, self, reqs, *args, produced_of=produced_at_admission, **kwargs)


def free_around(original, self, req, *args, **kwargs):
    if not req.kv.holds_kv:  # SGLang's assertion, raised by the original
        return original(self, req, *args, **kwargs)
    slot = req.kv.req_pool_idx
    return req_to_token_pool.free_rows_around(lambda pool, _rows: original(pool, req, *args, **kwargs), self, [slot])


def hooks():
    return [(TARGETS[0], alloc_around), (TARGETS[1], free_around)]


SEAMS = (Seam("scheduler", hooks),)
