"""SGLang seams that exist only to serve on CPU through the stand-in (never on a GPU install), in ASD
and stock servers alike, and their installation.

Seam modules (each declares its hooks in ``SEAMS``): the linear-layer, LM-head and ``get_last_loc``
paths (``cpu_paths``), the PD mooncake sender (``pd_transfer``), how SGLang starts its children
(``start_method``), DSPARK and DFLASH on CPU (``block_drafters``). Three interventions are not
HookRegistry hooks: the platform fact that keeps the ``intel_amx`` attention backend
(``platform.apply``), SGLang's speculative sampling verify on CPU (``sampling``, on unless
``SGLANG_ASD_CPU_SAMPLING=off``) and the block
drafters' sampling accept (``chain_sampling``), module attributes set where SGLang reads them. Their environment switches are
read in ``sglang_asd.cpu_backend.env``.

Processes: the launcher (``install_launcher_cpu_hooks``: ``sglang_asd.launch_server`` through
``sglang_seams.install_frontend_hooks``, and ``sglang_asd.stock_server``) and every scheduler
(``install_cpu_path_hooks``, after the ASD hooks in an ASD server; ``install_cpu_sampling`` first).
"""

from __future__ import annotations

import sys

from sglang_asd.hooks.registry import Hook, HookNotInstalled, chosen, install, seams_of

__all__ = ["HookNotInstalled", "install_cpu_path_hooks", "install_cpu_sampling", "install_launcher_cpu_hooks"]


def install_cpu_sampling() -> bool:
    """Launcher and scheduler unless ``SGLANG_ASD_CPU_SAMPLING=off``: SGLang's speculative sampling
    verify served on CPU (``sampling.py``), applied and checked; returns whether it is on. In a
    scheduler it must precede the choice of the ASD scheduler hooks: ``eagle_sample`` wraps the
    sampling kernel only where the platform has one. A forked child inherits the launcher's; a bad
    binding stops the launcher before any child starts."""
    from sglang_asd.cpu_backend.seams import sampling

    if not sampling.wanted():
        return False
    sampling.apply()
    if missing := sampling.missing():
        raise HookNotInstalled("sglang_asd: SGLANG_ASD_CPU_SAMPLING is on, but SGLang's CPU sampling verify is not in "
                               "place, refusing to serve (sampled requests would verify greedily): " + ", ".join(missing))
    return True


def install_launcher_cpu_hooks() -> list[Hook]:
    """Launcher process: the CPU sampling verify (when on), then this package's launcher seams
    (children start by fork; DSPARK and DFLASH pass argument resolution)."""
    from sglang_asd.cpu_backend.seams import block_drafters

    install_cpu_sampling()
    hooks = install(chosen(seams_of(sys.modules[__name__], "launcher")), "the CPU launcher")
    if block_drafters.launcher_hooks():  # none on a GPU install
        _list_draft_backend()  # DFLASH's argument resolution reads the list
    return hooks


def install_cpu_path_hooks() -> list[Hook]:
    """Scheduler process: this package's scheduler seams (CPU paths, the PD sender, the block
    drafters' CPU fixes), then the block drafters' sampling accept. The caller installs the CPU
    sampling verify first."""
    from sglang_asd.cpu_backend.seams import block_drafters

    hooks = install(chosen(seams_of(sys.modules[__name__], "scheduler")), "the CPU scheduler",
                    preload=("sglang.srt.managers.scheduler",))
    if block_drafters.scheduler_hooks():  # none on a GPU install
        _list_draft_backend()
        install_chain_sampling()
    return hooks


def install_chain_sampling() -> None:
    """Scheduler on CPU (ASD and stock servers): the block drafters' sampling accept
    (``chain_sampling.py``: sampled as on a GPU with ``SGLANG_ASD_CPU_SAMPLING=on``, greedily as
    SGLang's CPU path verifies EAGLE without it), applied and checked."""
    from sglang_asd.cpu_backend.seams import chain_sampling

    if not chain_sampling.wanted():
        return
    chain_sampling.apply()
    if missing := chain_sampling.missing():
        raise HookNotInstalled("sglang_asd: the CPU sampling accept of DSPARK/DFLASH is not in place, refusing to "
                               "serve (a sampled request would stop the scheduler): " + ", ".join(missing))


def _list_draft_backend() -> None:
    """``intel_amx`` among SGLang's draft attention backends (with the block drafters' CPU seams)."""
    from sglang_asd.cpu_backend.seams import block_drafters

    block_drafters.add_draft_backend()
    if not block_drafters.draft_backend_listed():
        raise HookNotInstalled(f"sglang_asd: {block_drafters.DRAFT_BACKEND!r} is not among SGLang's draft attention "
                               "backends; DSPARK/DFLASH cannot serve on CPU")
