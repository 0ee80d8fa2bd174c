"""The ASD seams in SGLang: hooks, the device ledger, the verify step, API fields and receipts.

Hook modules, one per hooked SGLang class or function, each with target, kind, process, why,
how, upstream status, removal plan and tested versions in its docstring, and its hooks and
by-name bindings declared in ``SEAMS`` (``sglang_asd.hooks.registry``):
- ``frontend/``: the launcher / HTTP server (tokenizer manager, OpenAI serving classes);
- ``scheduler/``: every scheduler process (one per TP rank).
Hooking nothing: ``step/`` (the ASD verify step every verify seam calls, and the verify warm-up),
``state/`` (the ledgers, the per-round output, runtime settings, metrics), ``modes.py`` (serving
modes ASD refuses) and ``process.py`` (the per-process bootstrap). The CPU stand-in's own seams
are ``sglang_asd.cpu_backend.seams``, installed here beside these in an ASD server.

Each installer checks that every target and by-name binding it registered is in place and raises
``HookNotInstalled`` otherwise: a server that silently verified strictly would lie to its users.
"""

from __future__ import annotations

import logging

from sglang_asd.cpu_backend import seams as cpu_seams
from sglang_asd.hooks.registry import Hook, HookNotInstalled, chosen, hooks_of, install, seams_of
from sglang_asd.server_settings import ASDServerSettings

__all__ = ["HookNotInstalled", "frontend_hooks", "install_frontend_hooks", "install_scheduler_hooks",
           "scheduler_hooks"]

logger = logging.getLogger(__name__)


def _seams(process: str, settings: ASDServerSettings):
    from sglang_asd.sglang_seams import frontend, scheduler

    return chosen(seams_of(frontend if process == "launcher" else scheduler, process), settings)


def scheduler_hooks(settings: ASDServerSettings) -> list[Hook]:
    """Every ASD scheduler hook these settings install (the STANDALONE fix only when asked)."""
    return hooks_of(_seams("scheduler", settings))


def frontend_hooks() -> list[Hook]:
    return hooks_of(_seams("launcher", ASDServerSettings()))


def install_scheduler_hooks(settings: ASDServerSettings) -> None:
    """Scheduler process: the CPU sampling verify when on (first: it gives the platform the
    sampling kernel ``eagle_sample`` wraps), the ASD hooks, then the CPU stand-in's."""
    from sglang_asd.sglang_seams.state.runtime import set_runtime

    set_runtime(settings)
    cpu_seams.install_cpu_sampling()
    hooks = install(_seams("scheduler", settings), "the ASD scheduler")
    hooks += cpu_seams.install_cpu_path_hooks()
    logger.info("sglang_asd: %d scheduler hooks installed and verified", len(hooks))


def install_frontend_hooks(settings: ASDServerSettings) -> None:
    """Launcher / HTTP process: request fields, receipts in responses; then the CPU stand-in's
    platform fact and launcher hooks."""
    from sglang_asd.cpu_backend.seams import platform
    from sglang_asd.sglang_seams.frontend import http_api
    from sglang_asd.sglang_seams.state.runtime import set_runtime

    set_runtime(settings)
    platform.apply()
    http_api.configure(settings)
    hooks = install(_seams("launcher", settings), "the ASD frontend")
    hooks += cpu_seams.install_launcher_cpu_hooks()
    if not http_api.middleware_installed():
        raise HookNotInstalled(
            "sglang_asd: the request-field middleware is not installed on SGLang's app, refusing to serve "
            "(asd_* request fields would be rejected or ignored)"
        )
    logger.info("sglang_asd: %d frontend hooks installed and verified", len(hooks))
