"""Test-only: ``sglang_asd.launch_server`` with two hooks for the tensor-parallel tests
(``tests/integration/test_tp_cpu.py``, ``test_tp_drafters_cpu.py``), in every TP rank (the CPU children
fork and inherit them).

- Trace (``SGLANG_ASD_TEST_TP_TRACE`` = a folder): after every verify step (ASD rows or not) the rank
  keeps clones of what it committed, a checksum of the verify logits it saw, whether it perturbed
  them, and its whole ledger table (every column). EAGLE, STANDALONE, NGRAM: after every
  ``eagle_sample`` call (``predict``, ``accept_lens``, ``accept_index``: after SGLang's broadcast,
  where it broadcasts). DSPARK, DFLASH: after every decode step (``verify_step.run_block_step``:
  the step result's ``next_token_ids`` and ``accept_lens``, after SGLang's accept broadcast); their
  logits are read at the accept (``accept_draft_tokens``, ``_accept_block``), where they are
  perturbed too. Clones only: the step issues no host sync. SGLang runs
  ``/flush_cache`` on every rank (the request is broadcast to the TP group), and there each rank
  writes its trace to ``<folder>/rank<r>.pt`` (``torch.save`` to a temporary name, then a rename).
- Perturbation (``SGLANG_ASD_TEST_PERTURB_RANK`` = a rank): that rank adds fixed noise to its
  verify logits, in place, before SGLang's verify reads them, in every batch that holds a sampled
  request. That is the batch SGLang verifies on its sampling branch and broadcasts from rank 0
  (``eagle_utils.eagle_sample``: softmax, top-k and top-p may differ in the last bit across ranks;
  DSPARK's ``DSPARK_ACCEPT_SAMPLE``, DFLASH's ``DFLASH_ACCEPT_SAMPLE``, on in the default
  ``SGLANG_SPEC_TP_SYNC=all``), the greedy ASD rows of that batch included. DSPARK and DFLASH: in
  every batch, because under ``all`` SGLang broadcasts their greedy accept too (``DSPARK_ACCEPT_GREEDY``,
  ``DFLASH_ACCEPT_GREEDY``: rank 0's bonus, rank 0's argmax) and ASD its decision over the same group.
  EAGLE, STANDALONE, NGRAM:
  a greedy-only batch is left alone, because there SGLang relies on identical logits on every rank
  and broadcasts nothing, so a perturbed rank would commit other tokens in stock SGLang too.

Everything else is ``sglang_asd.launch_server``.
"""

from __future__ import annotations

import os

from sglang_asd import launch_server  # process bootstrap first

TRACE_ENV = "SGLANG_ASD_TEST_TP_TRACE"
PERTURB_ENV = "SGLANG_ASD_TEST_PERTURB_RANK"
TABLE_COLUMNS = ("remaining", "gate", "cap", "rule", "power", "stop_tokens")
_TRACE: list[dict] = []


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def _noise(logits):
    import torch

    g = torch.Generator().manual_seed(1234)
    return 4.0 * torch.randn(logits.shape, generator=g, dtype=torch.float32).to(logits.dtype)


def traced_eagle_sample_around(original, *args, **kwargs):
    from sglang_asd.sglang_seams.scheduler import eagle_sample as seam

    _, batch, logits_output = seam.EAGLE_SAMPLE_ARGS.of(args, kwargs)
    logits = logits_output.next_token_logits
    perturbed = _perturb(logits, batch.sampling_info)
    logits_sum = logits.float().sum()
    predict, accept_lens, accept_index = _ORIGINAL_AROUND(original, *args, **kwargs)
    if os.environ.get(TRACE_ENV):
        _TRACE.append({"perturbed": perturbed, "logits_sum": logits_sum, "slots": batch.req_pool_indices.clone(),
                       "predict": predict.clone(), "accept_lens": accept_lens.clone(),
                       "accept_index": accept_index.clone(), **_table_entry(batch)})
    return predict, accept_lens, accept_index


def _perturb(logits, sampling_info, every_batch: bool = False) -> bool:
    """Perturb ``logits`` in place on the perturbed rank, in a batch holding a sampled request (or in
    every batch: ``every_batch``)."""
    greedy = sampling_info is None or sampling_info.is_all_greedy
    if logits is None or (greedy and not every_batch) or os.environ.get(PERTURB_ENV) != str(_rank()):
        return False
    logits.add_(_noise(logits))
    return True


def _table_entry(batch) -> dict:
    table = getattr(batch.req_to_token_pool, "_asd_table", None)
    return {} if table is None else {f"table_{c}": getattr(table, c).clone() for c in TABLE_COLUMNS}


_ACCEPT: dict = {}  # the last block accept of this rank: whether it perturbed, the logits' checksum


def traced_dspark_accept_around(original, *args, **kwargs):
    from sglang_asd.sglang_seams.scheduler import dspark_accept as seam

    _, logits, _, sampling_info = seam.ACCEPT_ARGS.of(args, kwargs)
    _ACCEPT.update(perturbed=_perturb(logits, sampling_info, every_batch=True), logits_sum=logits.float().sum())
    return _ORIGINAL_DSPARK(original, *args, **kwargs)


def traced_dflash_accept_around(original, *args, **kwargs):
    from sglang_asd.sglang_seams.scheduler import dflash_accept as seam

    _, _, logits, sampling_info, _ = seam.ACCEPT_ARGS.of(args, kwargs)
    _ACCEPT.update(perturbed=_perturb(logits, sampling_info, every_batch=True),
                   logits_sum=None if logits is None else logits.float().sum())
    return _ORIGINAL_DFLASH(original, *args, **kwargs)


def traced_run_block_step(original, args, kwargs, batch, tp_sync):
    _ACCEPT.clear()
    result = _ORIGINAL_BLOCK_STEP(original, args, kwargs, batch, tp_sync)
    if os.environ.get(TRACE_ENV) and _ACCEPT:
        _TRACE.append({"perturbed": _ACCEPT["perturbed"], "logits_sum": _ACCEPT["logits_sum"],
                       "slots": batch.req_pool_indices.clone(), "next_token_ids": result.next_token_ids.clone(),
                       "accept_lens": result.accept_lens.clone(), **_table_entry(batch)})
    return result


def flush_cache_around(self, *args, **kwargs):
    result = _ORIGINAL_FLUSH(self, *args, **kwargs)
    folder = os.environ.get(TRACE_ENV)
    if folder:
        import torch

        path = os.path.join(folder, f"rank{_rank()}.pt")
        torch.save(list(_TRACE), path + ".tmp")
        os.replace(path + ".tmp", path)
    return result


def _install() -> None:
    global _ORIGINAL_AROUND, _ORIGINAL_FLUSH, _ORIGINAL_DSPARK, _ORIGINAL_DFLASH, _ORIGINAL_BLOCK_STEP
    from sglang.srt.managers.scheduler import Scheduler

    from sglang_asd.sglang_seams.scheduler import dflash_accept, dspark_accept
    from sglang_asd.sglang_seams.scheduler import eagle_sample as seam
    from sglang_asd.sglang_seams.step import verify_step

    # The seams register their hooks by name when the scheduler installs them; the block drafters'
    # seams call ``verify_step.run_block_step`` through the module.
    _ORIGINAL_AROUND, seam.eagle_sample_around = seam.eagle_sample_around, traced_eagle_sample_around
    _ORIGINAL_DSPARK, dspark_accept.accept_draft_tokens_around = (dspark_accept.accept_draft_tokens_around,
                                                                  traced_dspark_accept_around)
    _ORIGINAL_DFLASH, dflash_accept.accept_block_around = dflash_accept.accept_block_around, traced_dflash_accept_around
    _ORIGINAL_BLOCK_STEP, verify_step.run_block_step = verify_step.run_block_step, traced_run_block_step
    _ORIGINAL_FLUSH, Scheduler.flush_cache = Scheduler.flush_cache, flush_cache_around


_ORIGINAL_AROUND = _ORIGINAL_FLUSH = _ORIGINAL_DSPARK = _ORIGINAL_DFLASH = _ORIGINAL_BLOCK_STEP = None
_install()

if __name__ == "__main__":
    launch_server.main()
