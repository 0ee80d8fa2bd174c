"""Seam: ``sglang.srt.mem_cache.allocation.get_last_loc`` on CPU (only with the CPU stand-in).

- Hook kind: AROUND; calls SGLang's own ``get_last_loc_torch`` instead of the original.
- Process: scheduler, only when ``sglang_asd.cpu_backend`` is active (never on a GPU install).
- Why: ``get_last_loc`` picks its Triton kernel for every attention backend except
  ``torch_native``/``ascend``; with ``intel_amx`` on a CPU, Triton has no driver and the first
  decode with ``--page-size`` > 1 dies ("0 active drivers"). SGLang's plain-torch version computes
  the same thing.
- Upstream: none yet; the dispatch should also route ``device == "cpu"`` to the torch version.
- Removal: when SGLang's dispatch does that.
- Tested on: sglang 0.5.23.
"""

from __future__ import annotations

GET_LAST_LOC = "sglang.srt.mem_cache.allocation.get_last_loc"


def get_last_loc_around(original, req_to_token, req_pool_indices_tensor, prefix_lens_tensor):
    from sglang.srt.mem_cache.allocation import get_last_loc_torch

    return get_last_loc_torch(req_to_token, req_pool_indices_tensor, prefix_lens_tensor)


def hooks() -> list:
    from sglang_asd import cpu_backend

    return [(GET_LAST_LOC, get_last_loc_around)] if cpu_backend.is_installed() else []
