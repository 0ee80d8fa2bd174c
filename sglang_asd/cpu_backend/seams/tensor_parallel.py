"""Seams that keep SGLang's tensor-parallel groups on its CPU path, only with the CPU stand-in
(never on a GPU install).

Process: every scheduler (TP rank), ASD and stock servers alike. SGLang's CPU path already runs
tensor parallelism over gloo: ``GroupCoordinator.all_reduce`` / ``all_gather`` of a CPU tensor call
``torch.ops.sgl_kernel.shm_allreduce`` / ``shm_allgather`` only where ``is_shm_available`` holds
(AMX or arm64, which the stand-in never claims), and otherwise ``torch.distributed`` on the group's
gloo ``device_group``. So the stand-in provides no collective of its own: the model's all-reduce is
gloo's, summed in the order gloo sums (for two ranks ``a + b``, the same on both ranks). What stops a
TP server on a CPU host with torch's CUDA wheel is set-up, fixed here.

``sglang.srt.distributed.device_communicators.pynccl_wrapper.NCCLLibrary.__init__``
- Kind: AROUND; raises instead of loading the library.
- Why: ``GroupCoordinator`` builds a ``PyNcclCommunicator`` for every group of more than one rank
  unless the library is missing ("e.g. in a non-GPU environment", SGLang's own fallback: the
  communicator is then disabled and gloo serves). torch's CUDA wheel, the one a CPU host gets from
  the registry, ships ``libnccl`` anyway, so the library loads and rank set-up dies in
  ``torch.cuda.device(cpu)`` ("Expected a cuda device, but got: cpu"). Raising here takes SGLang's
  missing-library branch, as on a CPU build of torch.
- Upstream: ``PyNcclCommunicator`` should disable itself for a CPU device. Removal: when it does.

``sglang.srt.distributed.bootstrap._init_cpu_threads_env``
- Kind: AROUND; on a server of more than one rank, or where ``SGLANG_CPU_OMP_THREADS_BIND`` is set
  (by the user, or by our launchers for more ranks than NUMA nodes: ``launch_server.cpu_threads_bind``),
  binds this rank's OpenMP threads to the cores SGLang chose for it (its group of that variable, else
  its NUMA node) with ``torch.ops.sgl_kernel.init_cpu_threads_env`` (the stand-in's plain-Python
  version), then calls the original (which, without AMX, only logs that binding and shared-memory all-reduce are off).
- Why: SGLang binds a rank to its cores only on an AMX or arm64 CPU. Unbound, every rank of a TP
  server starts as many threads as the host has cores, and two ranks spinning on the same cores
  serve many times slower than one bound rank per core.
- Upstream: the binding should not depend on AMX. Removal: when it does not.

Neither touches the verify step or the ledger (set-up only, before the first forward).
- Tested on: sglang 0.5.23 (``tests/integration/test_tp_cpu.py``).
"""

from __future__ import annotations

import logging
import os

from sglang_asd.hooks.registry import Seam

logger = logging.getLogger(__name__)

NCCL_LIBRARY_INIT = "sglang.srt.distributed.device_communicators.pynccl_wrapper.NCCLLibrary.__init__"
INIT_CPU_THREADS_ENV = "sglang.srt.distributed.bootstrap._init_cpu_threads_env"
THREADS_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"  # SGLang's: "0-3|4-7", one group of cores per rank


def nccl_library_around(original, self, *args, **kwargs):
    raise RuntimeError("NCCL is not used on a CPU host (sglang_asd.cpu_backend): tensor parallelism runs over gloo")


def init_cpu_threads_env_around(original, *args, local_omp_cpuid=None, **kwargs):
    import torch

    if local_omp_cpuid and (os.environ.get(THREADS_BIND_ENV, "").strip() or _ranks() > 1):
        logger.info("sglang_asd: %s", torch.ops.sgl_kernel.init_cpu_threads_env(local_omp_cpuid))
    return original(*args, local_omp_cpuid=local_omp_cpuid, **kwargs)


def _ranks() -> int:
    """Scheduler processes of this server (SGLang's count for its thread binding)."""
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    return parallel.dp_size * parallel.tp_size * parallel.pp_size


def hooks() -> list:
    """Scheduler-process hooks: none on a GPU install."""
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed():
        return []
    return [(NCCL_LIBRARY_INIT, nccl_library_around), (INIT_CPU_THREADS_ENV, init_cpu_threads_env_around)]


SEAMS = (Seam("scheduler", hooks),)
