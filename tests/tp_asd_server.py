"""Test-only: ``sglang_asd.launch_server`` with two hooks for the tensor-parallel tests
(``tests/integration/test_tp_cpu.py``), in every TP rank (the CPU children fork and inherit them).

- Trace (``SGLANG_ASD_TEST_TP_TRACE`` = a folder): after every ``eagle_sample`` call (every verify
  step, ASD rows or not) the rank keeps clones of what it committed (``predict``, ``accept_lens``,
  ``accept_index``), a checksum of the verify logits it saw, whether it perturbed them, and its
  whole ledger table (every column). Clones only: the step issues no host sync. SGLang runs
  ``/flush_cache`` on every rank (the request is broadcast to the TP group), and there each rank
  writes its trace to ``<folder>/rank<r>.pt`` (``torch.save`` to a temporary name, then a rename).
- Perturbation (``SGLANG_ASD_TEST_PERTURB_RANK`` = a rank): that rank adds fixed noise to its
  verify logits, in place, before SGLang's verify reads them, in every batch that holds a sampled
  request. That is the batch SGLang verifies on its sampling branch and broadcasts from rank 0
  (``eagle_utils.eagle_sample``: softmax, top-k and top-p may differ in the last bit across ranks);
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
    perturbed = (os.environ.get(PERTURB_ENV) == str(_rank()) and not batch.sampling_info.is_all_greedy)
    if perturbed:
        logits.add_(_noise(logits))
    logits_sum = logits.float().sum()
    predict, accept_lens, accept_index = _ORIGINAL_AROUND(original, *args, **kwargs)
    if os.environ.get(TRACE_ENV):
        table = getattr(batch.req_to_token_pool, "_asd_table", None)
        entry = {"perturbed": perturbed, "logits_sum": logits_sum, "slots": batch.req_pool_indices.clone(),
                 "predict": predict.clone(), "accept_lens": accept_lens.clone(), "accept_index": accept_index.clone()}
        if table is not None:
            entry.update({f"table_{c}": getattr(table, c).clone() for c in TABLE_COLUMNS})
        _TRACE.append(entry)
    return predict, accept_lens, accept_index


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
    global _ORIGINAL_AROUND, _ORIGINAL_FLUSH
    from sglang.srt.managers.scheduler import Scheduler

    from sglang_asd.sglang_seams.scheduler import eagle_sample as seam

    # The seam registers ``eagle_sample_around`` by name when the scheduler installs its hooks.
    _ORIGINAL_AROUND, seam.eagle_sample_around = seam.eagle_sample_around, traced_eagle_sample_around
    _ORIGINAL_FLUSH, Scheduler.flush_cache = Scheduler.flush_cache, flush_cache_around


_ORIGINAL_AROUND = _ORIGINAL_FLUSH = None
_install()

if __name__ == "__main__":
    launch_server.main()
