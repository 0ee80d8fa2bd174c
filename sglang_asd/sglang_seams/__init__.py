"""The only package of sglang-asd that imports SGLang: hooks, the device ledger, API, receipts.

Every seam is a module named after what it hooks and documents target, hook kind, process, why,
how, upstream status, removal plan and tested versions. ``install_*`` registers the hooks with
SGLang's ``HookRegistry``, applies them and then checks that every target (and every by-name
binding of it) really is wrapped: SGLang only logs a hook that failed to apply, and a server that
silently verified strictly would lie to its users, so a missing hook stops the process.

Processes:
- launcher / HTTP server (tokenizer manager): ``install_frontend_hooks`` (request validation,
  OpenAI fields, receipts in responses; CPU platform facts for argument resolution) and, with the
  CPU stand-in, ``install_launcher_cpu_hooks`` (children start by fork: ``start_method``; DSPARK/DFLASH argument resolution: ``block_drafters``;
  unless ``SGLANG_ASD_CPU_SAMPLING=off``, SGLang's sampling verify on CPU: ``install_cpu_sampling``).
- each scheduler (every TP rank): ``install_scheduler_hooks`` (the CPU sampling verify when on,
  first; ledger, also on a PD decode server's request pool, verify, receipts, metrics,
  and, with ``--asd-standalone-draft-fix`` only, the STANDALONE draft's KV convention:
  ``standalone_draft``).
- detokenizer: nothing.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable, Iterable

from sglang_asd.server_settings import ASDServerSettings

logger = logging.getLogger(__name__)

_HOOK_MARK = "__sglang_asd_hook__"


class HookNotInstalled(RuntimeError):
    pass


def _marked(hook: Callable) -> Callable:
    setattr(hook, _HOOK_MARK, True)
    return hook


def _is_wrapped(obj) -> bool:
    """True if ``obj`` is a HookRegistry wrapper around one of our hooks (at any depth)."""
    fn = getattr(obj, "__func__", obj)
    seen = 0
    while fn is not None and seen < 16:
        closure = getattr(fn, "__closure__", None) or ()
        if any(getattr(c.cell_contents, _HOOK_MARK, False) for c in closure if _cell_ok(c)):
            return True
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return False


def _cell_ok(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def _resolve(path: str):
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError:
        owner_path, _, owner_attr = module.rpartition(".")
        owner = getattr(importlib.import_module(owner_path), owner_attr)
        return owner.__dict__.get(attr, getattr(owner, attr))


def _register_and_apply(hooks: Iterable[tuple[str, Callable]], preload: Iterable[str] = ()) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for module in preload:  # by-name importers must be loaded before the registry rebinds names
        importlib.import_module(module)
    for target, hook in hooks:
        if target in HookRegistry._patched or any(h is hook for _, h, _ in HookRegistry._hooks.get(target, ())):
            continue
        HookRegistry.register(target, _marked(hook), HookType.AROUND)
    HookRegistry.apply_hooks()


def check_installed(targets: Iterable[str], bindings: Iterable[tuple[str, str]] = ()) -> None:
    """Raise unless every target and every ``(module, name)`` binding is our wrapper."""
    missing = [t for t in targets if not _is_wrapped(_resolve(t))]
    for module, name in bindings:
        if not _is_wrapped(getattr(importlib.import_module(module), name)):
            missing.append(f"{module}.{name}")
    if missing:
        raise HookNotInstalled(
            "sglang_asd: these hooks are not in place, refusing to serve (ASD would silently be strict): "
            + ", ".join(missing)
        )


def check_own(hooks: Iterable[tuple[str, Callable]], what: str) -> None:
    """Raise unless each target's wrapper chain holds that very hook (``check_installed`` accepts any
    sglang-asd hook, and ``_register_and_apply`` skips a target another seam already wraps)."""
    missing = [t for t, hook in hooks if not _holds(_resolve(t), hook)]
    if missing:
        raise HookNotInstalled(f"sglang_asd: {what} hooks are not in place, refusing to serve: " + ", ".join(missing))


def _holds(obj, hook: Callable) -> bool:
    fn = getattr(obj, "__func__", obj)
    for _ in range(16):
        if fn is None:
            return False
        if any(_cell_ok(c) and c.cell_contents is hook for c in getattr(fn, "__closure__", None) or ()):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _check_draft_backend() -> None:
    from sglang_asd.cpu_backend.seams import block_drafters

    if not block_drafters.draft_backend_listed():
        raise HookNotInstalled(f"sglang_asd: {block_drafters.DRAFT_BACKEND!r} is not among SGLang's draft attention "
                               "backends; DSPARK/DFLASH cannot serve on CPU")


def scheduler_hooks(settings: ASDServerSettings) -> list[tuple[str, Callable]]:
    """Every scheduler-side hook, one list per hooked SGLang class or function (each from its module)."""
    from sglang_asd.sglang_seams.scheduler import (
        decode_req_to_token_pool,
        dflash_accept,
        dspark_accept,
        eagle_sample,
        req_to_token_pool,
        scheduler,
        standalone_draft,
    )

    hooks = (eagle_sample.hooks() + dspark_accept.hooks() + dflash_accept.hooks() + req_to_token_pool.hooks()
             + decode_req_to_token_pool.hooks() + scheduler.hooks())
    if settings.standalone_draft_fix:
        hooks += standalone_draft.hooks()
    return hooks


def install_cpu_path_hooks() -> list[tuple[str, Callable]]:
    """Scheduler process on CPU: SGLang paths that need a CPU fix (``cpu_paths``; the PD mooncake
    sender: ``pd_transfer``), and the block drafters' CPU seams (none on a GPU install)."""
    from sglang_asd.cpu_backend.seams import block_drafters, cpu_paths, pd_transfer

    hooks = cpu_paths.hooks() + pd_transfer.hooks()
    drafters = block_drafters.scheduler_hooks()
    if hooks or drafters:
        preload = (("sglang.srt.managers.scheduler",) + (pd_transfer.PRELOAD if pd_transfer.hooks() else ())
                   + (block_drafters.SCHEDULER_PRELOAD if drafters else ()))
        _register_and_apply(hooks + drafters, preload=preload)
        check_installed([t for t, _ in hooks + drafters])
    if drafters:
        check_own(drafters, "the CPU block-drafter")
        block_drafters.add_draft_backend()
        _check_draft_backend()
        install_chain_sampling()
    return hooks + drafters


def install_chain_sampling() -> None:
    """Scheduler on CPU (ASD and stock servers): the block drafters' sampling accept
    (``cpu_backend/seams/chain_sampling.py``: sampled as on a GPU with ``SGLANG_ASD_CPU_SAMPLING=on``,
    greedily as SGLang's CPU path verifies EAGLE without it), applied and checked."""
    from sglang_asd.cpu_backend.seams import chain_sampling

    if not chain_sampling.wanted():
        return
    chain_sampling.apply()
    if missing := chain_sampling.missing():
        raise HookNotInstalled("sglang_asd: the CPU sampling accept of DSPARK/DFLASH is not in place, refusing to "
                               "serve (a sampled request would stop the scheduler): " + ", ".join(missing))


def install_cpu_sampling() -> bool:
    """Launcher and scheduler on CPU unless ``SGLANG_ASD_CPU_SAMPLING=off`` (ASD and stock servers):
    SGLang's speculative sampling verify served on CPU (``cpu_backend/seams/sampling.py``), applied
    and checked; returns whether it is on. In a scheduler it must precede the choice of the
    scheduler hooks: ``eagle_sample`` wraps the sampling kernel only where the platform has one."""
    from sglang_asd.cpu_backend.seams import sampling

    if not sampling.wanted():
        return False
    sampling.apply()
    if missing := sampling.missing():
        raise HookNotInstalled("sglang_asd: SGLANG_ASD_CPU_SAMPLING is on, but SGLang's CPU sampling verify is not in "
                               "place, refusing to serve (sampled requests would verify greedily): " + ", ".join(missing))
    return True


def install_scheduler_hooks(settings: ASDServerSettings) -> None:
    """Scheduler process: install, apply and verify every scheduler-side hook."""
    from sglang_asd.sglang_seams.scheduler import dflash_accept, dspark_accept, eagle_sample, standalone_draft
    from sglang_asd.sglang_seams.state.runtime import set_runtime

    set_runtime(settings)
    install_cpu_sampling()  # first: it gives the platform the sampling kernel eagle_sample wraps
    eagle_sample.check_signatures(_resolve(eagle_sample.EAGLE_SAMPLE), _resolve(eagle_sample.VERIFY_TREE_GREEDY),
                                  eagle_sample.tree_sampling_kernel())
    dspark_accept.check_signatures(_resolve(dspark_accept.FORWARD_DECODE), _resolve(dspark_accept.ACCEPT_DRAFT_TOKENS))
    dflash_accept.check_signatures(_resolve(dflash_accept.FORWARD), _resolve(dflash_accept.ACCEPT_BLOCK))
    if settings.standalone_draft_fix:
        standalone_draft.check_signatures(_resolve(standalone_draft.PREPARE_FOR_DRAFT))
    hooks = scheduler_hooks(settings)
    preload = (eagle_sample.EAGLE_SAMPLE_BINDINGS + eagle_sample.VERIFY_TREE_GREEDY_BINDINGS
               + eagle_sample.TREE_SAMPLING_BINDINGS + dspark_accept.ACCEPT_BINDINGS + dspark_accept.ADJUSTMENTS_BINDINGS)
    bindings = ([(m, "eagle_sample") for m in eagle_sample.EAGLE_SAMPLE_BINDINGS]
                + [(m, "verify_tree_greedy_func") for m in eagle_sample.VERIFY_TREE_GREEDY_BINDINGS]
                + [(m, "accept_draft_tokens") for m in dspark_accept.ACCEPT_BINDINGS]
                + [(m, "verify_logits_adjustments_are_noop") for m in dspark_accept.ADJUSTMENTS_BINDINGS])
    if eagle_sample.sampling_hooks():  # the platform has a sampling verify kernel (not CPU, unless a test serves one)
        bindings += [(m, "tree_speculative_sampling_target_only") for m in eagle_sample.TREE_SAMPLING_BINDINGS]
    if settings.standalone_draft_fix:
        preload += standalone_draft.PRELOAD
        bindings += [(m, name) for m in standalone_draft.BINDINGS
                     for name in ("prepare_for_draft", "prepare_for_draft_extend")]
    _register_and_apply(hooks, preload=preload)
    check_installed([t for t, _ in hooks], bindings=bindings)
    hooks += install_cpu_path_hooks()
    logger.info("sglang_asd: %d scheduler hooks installed and verified", len(hooks))


def install_launcher_cpu_hooks() -> list[tuple[str, Callable]]:
    """Launcher process on CPU (ASD and stock servers): SGLang's children start by fork (none on a GPU
    install, or with ``SGLANG_ASD_CPU_START_METHOD=spawn``); DSPARK and DFLASH pass argument
    resolution (``block_drafters``; none on a GPU install); unless ``SGLANG_ASD_CPU_SAMPLING=off`` the
    CPU sampling verify (``install_cpu_sampling``: a forked child inherits it, a bad binding stops
    the launcher before any child starts)."""
    from sglang_asd.cpu_backend.seams import block_drafters, start_method

    install_cpu_sampling()
    hooks = start_method.hooks() + block_drafters.launcher_hooks()
    if hooks:
        _register_and_apply(hooks, preload=("sglang.srt.entrypoints.engine", block_drafters.SPEC_HOOK))
        check_installed([t for t, _ in hooks])
    if block_drafters.launcher_hooks():
        check_own(block_drafters.launcher_hooks(), "the CPU block-drafter")
        block_drafters.add_draft_backend()  # DFLASH's argument resolution reads the list
        _check_draft_backend()
    return hooks


def frontend_hooks() -> list[tuple[str, Callable]]:
    from sglang_asd.sglang_seams.frontend import http_api

    return http_api.hooks()


def install_frontend_hooks(settings: ASDServerSettings) -> None:
    """Launcher / HTTP process: request fields, receipts in responses, CPU platform facts."""
    from sglang_asd.sglang_seams.frontend import http_api
    from sglang_asd.cpu_backend.seams import platform
    from sglang_asd.sglang_seams.state.runtime import set_runtime

    set_runtime(settings)
    platform.apply()
    http_api.configure(settings)
    hooks = frontend_hooks()
    _register_and_apply(hooks, preload=http_api.PRELOAD)
    check_installed([t for t, _ in hooks])
    hooks += install_launcher_cpu_hooks()
    if not http_api.middleware_installed():
        raise HookNotInstalled(
            "sglang_asd: the request-field middleware is not installed on SGLang's app, refusing to serve "
            "(asd_* request fields would be rejected or ignored)"
        )
    logger.info("sglang_asd: %d frontend hooks installed and verified", len(hooks))
