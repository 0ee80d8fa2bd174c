"""SGLang general plugin (entry point ``sglang.srt.plugins: sglang_asd``).

``python -m sglang_asd.launch_server`` installs and verifies the ASD hooks itself, with the
``--asd-*`` settings. This entry point covers the other way in: a stock ``sglang serve`` /
``python -m sglang.launch_server`` with sglang-asd installed beside it. SGLang calls ``load()`` in
the launcher, every scheduler and the detokenizer; it installs the hooks of the process it runs
in, with the default settings (strict unless a request sends ``asd_budget``), and raises
``SystemExit`` if a hook is not in place (SGLang only logs ordinary plugin errors, and a server
that silently ignored budgets would mislead its clients). Disable it with ``SGLANG_PLUGINS``.
"""

from __future__ import annotations

import multiprocessing

from sglang_asd.server_settings import ASDServerSettings


def load() -> None:
    from sglang_asd import sglang_seams
    from sglang_asd.sglang_seams.state import runtime

    if runtime.is_set():  # our launcher already installed and verified the hooks here
        return
    try:
        role = _process_role()
        if role == "frontend":
            sglang_seams.install_frontend_hooks(ASDServerSettings())
        elif role == "scheduler":
            sglang_seams.install_scheduler_hooks(ASDServerSettings())
    except sglang_seams.HookNotInstalled as e:
        raise SystemExit(str(e)) from e


def _process_role() -> str:
    """``frontend`` (launcher/HTTP), ``scheduler``, or ``other`` (detokenizer, DP controller)."""
    proc = multiprocessing.current_process()
    if proc.name == "MainProcess":
        return "frontend"
    target = getattr(proc, "_target", None)
    target = getattr(target, "func", target)  # functools.partial
    return "scheduler" if "scheduler" in getattr(target, "__name__", "") else "other"
