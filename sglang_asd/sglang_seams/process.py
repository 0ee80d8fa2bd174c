"""Per-process bootstrap: what must happen in every SGLang process before SGLang is imported.

SGLang spawns its scheduler and detokenizer processes (``mp.set_start_method("spawn")``), so
nothing the launcher did is inherited. Each spawned child first imports the launcher's main
module as ``__mp_main__`` (standard ``multiprocessing`` spawn behaviour for ``python -m``), and
``sglang_asd.launch_server`` calls :func:`prepare_process` at import, before any SGLang import.
With the CPU stand-in the children start by fork instead (``start_method.py``) and inherit the
launcher's bootstrap; everything below is idempotent, so either way ends in the same state.
The scheduler entry point is also wrapped (:func:`run_scheduler_process`), which installs and
checks the ASD hooks in that process and refuses to start the scheduler if one is missing.

No SGLang import at module level here.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)


def prepare_process() -> bool:
    """Make SGLang importable in this process. Returns True if the CPU stand-in was installed.

    On a machine without CUDA and without a real ``sgl_kernel``, installs the plain-torch stand-in
    (``sglang_asd.cpu_backend``) and selects SGLang's CPU engine. Never touches a GPU install.
    """
    from sglang_asd import cpu_backend

    installed = cpu_backend.install()
    if installed:
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        # SGLang wraps a few small speculative helpers in torch.compile (e.g. the EAGLE tree's
        # top-k selection); on CPU inductor compiles them with the C++ toolchain on first use, a
        # stall of tens of seconds per process for ops that take microseconds eagerly.
        import torch._dynamo

        torch._dynamo.config.disable = True
    return installed


def run_scheduler_process(asd_settings, *args, **kwargs):
    """Scheduler process entry: bootstrap, install + verify the ASD hooks, then SGLang's own entry."""
    prepare_process()
    from sglang_asd.hooks.arguments import SeamSignatureMismatch
    from sglang_asd.sglang_seams import HookNotInstalled, install_scheduler_hooks

    try:
        install_scheduler_hooks(asd_settings)
    except (HookNotInstalled, SeamSignatureMismatch) as e:
        # One clear line; SGLang's launcher then reports the scheduler's exit and stops the server.
        print(f"sglang_asd scheduler: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_run_scheduler_process

    return sglang_run_scheduler_process(*args, **kwargs)


def run_stock_scheduler_process(*args, **kwargs):
    """Scheduler entry for ``sglang_asd.stock_server``: the CPU bootstrap, the CPU sampling verify
    (unless ``SGLANG_ASD_CPU_SAMPLING=off``) and the CPU-path fixes only."""
    prepare_process()
    from sglang_asd.cpu_backend.seams import HookNotInstalled, install_cpu_path_hooks, install_cpu_sampling

    try:
        install_cpu_sampling()
    except HookNotInstalled as e:
        print(f"sglang_asd stock scheduler: error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    install_cpu_path_hooks()
    from sglang.srt.managers.scheduler import run_scheduler_process as sglang_run_scheduler_process

    return sglang_run_scheduler_process(*args, **kwargs)
