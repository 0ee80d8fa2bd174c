"""Process-setup ops of the ``sgl_kernel`` CPU build, in plain Python.

SGLang calls these from ``srt/distributed/bootstrap.py::_init_cpu_threads_env``
only when ``cpu_has_amx_support()`` or the host is arm64. With the stand-in,
``cpu_has_amx_support()`` is False (``convert_weight_packed`` is deliberately
not provided), so on x86 they are never reached; on arm64 they let a single
rank start. The shared-memory collectives (``shm_allreduce``/``shm_allgather``)
are not provided, so there ``initialize`` refuses more than one rank instead of
failing later at the first all-reduce. On x86 tensor parallelism runs over gloo
(``seams/tensor_parallel.py`` binds each rank with ``init_cpu_threads_env``).
"""

from __future__ import annotations

import os

import torch


def _parse_cpu_ids(cpu_ids: str) -> list[int]:
    ids: list[int] = []
    for part in cpu_ids.replace("|", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            ids.extend(range(int(lo), int(hi) + 1))
        else:
            ids.append(int(part))
    return ids


def init_cpu_threads_env(cpu_ids: str) -> str:
    """Bind this process to ``cpu_ids`` ("0-3,8") and use one torch thread per core."""
    ids = _parse_cpu_ids(cpu_ids)
    if not ids:
        return "cpu binding skipped: empty cpu id list"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, ids)
    torch.set_num_threads(len(ids))
    return f"bound to cpus {ids} with {len(ids)} torch threads"


def initialize(size: int, rank: int) -> None:
    """Shared-memory all-reduce setup: only a single rank is supported by the stand-in."""
    if size > 1:
        raise NotImplementedError(
            f"sglang_asd.cpu_backend has no shared-memory collectives; tensor parallel size must be 1, got {size}"
        )


OPS = {
    "init_cpu_threads_env": ("(str cpu_ids) -> str", init_cpu_threads_env),
    "initialize": ("(int size, int rank) -> ()", initialize),
}
