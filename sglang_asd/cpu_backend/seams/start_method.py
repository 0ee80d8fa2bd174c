"""Seam: how SGLang starts its scheduler and detokenizer processes, only with the CPU stand-in.

``sglang.srt.entrypoints.engine._set_envs_and_config``
- Kind: AROUND, in the launcher process (ASD and stock servers alike), installed only when
  ``sglang_asd.cpu_backend`` is active (never on a GPU install). After SGLang's own call, which
  ends with ``mp.set_start_method("spawn", force=True)``, the start method becomes ``fork``.
  ``SGLANG_ASD_CPU_START_METHOD=spawn`` keeps SGLang's (read at install: ``cpu_backend.env.start_method``).
- Why: SGLang spawns because a CUDA context cannot cross a fork. A spawned child starts a fresh
  interpreter and imports SGLang again: on a 2-core AVX2 host that is about 18 of a server's 40
  seconds to ready, paid once per child (scheduler and detokenizer, side by side). Forked children
  inherit the launcher's imports; a tiny EAGLE server is ready in about half the time (with
  another job running beside it: 85-88 s spawned, 37-41 s forked, same tokens; quiet, the test
  suite's stock + ASD pairs started side by side: 68 s spawned, 21-30 s forked). Test suites and
  benchmarks start dozens of servers; users of the CPU demo start one.
- Why fork is safe here: the launcher has no CUDA context (there is no GPU), and at this call it
  runs one Python thread; its only other threads are the idle OpenBLAS servers of numpy and scipy,
  which stop and restart around a fork through their own ``pthread_atfork`` handlers. The launcher
  has run no tensor op, so torch's OpenMP pool does not exist yet (a libgomp pool cannot cross a
  fork: fixtures the launcher needs are therefore built in a child process,
  ``launch_server.resolve_fixtures``; built in the launcher, they hung the forked scheduler), and no ZMQ context exists (the tokenizer manager opens its sockets after the children
  start). What the children inherit and what they do with it:
  - the CPU stand-in and ``torch._dynamo`` off (``process.prepare_process``, idempotent; a spawned
    child does the same on its own);
  - the launcher's hooks (frontend classes a scheduler never calls; HookRegistry records them as
    applied, so a child's ``apply_hooks`` does not wrap them twice) and its ASD settings
    (``runtime``), so SGLang's plugin loader in the child finds them set and returns, as it does
    in the launcher; the scheduler entry (``process.run_scheduler_process``) installs and checks
    the scheduler hooks, as it does after a spawn;
  - SGLang's launch-phase SIGQUIT handler, which kills the tree of the process it runs in. SGLang
    sends SIGQUIT to the launcher (children and its watchdog report crashes that way) and, after a
    SIGKILL, to a process ``kill_process_tree`` is killing; a child that got one would end, as the
    default action ends it after a spawn. ``kill_itself_when_parent_died`` (``PR_SET_PDEATHSIG``)
    works the same.
  Nothing here touches the verify step, the ledger or a GPU stream: the overlap scheduler's lag,
  CUDA graphs and stream order do not arise. A server started with spawn and one started with fork
  decode the same tokens (the test suite serves both ways: ``tests/conftest.py``, ``CONFIG_ENV``).
- Upstream: none; SGLang could spawn only where CUDA (or another device runtime) is initialized.
- Removal: when SGLang forks on CPU itself.
- Tested on: sglang 0.5.23.
"""

from __future__ import annotations

import logging

from sglang_asd.cpu_backend.env import START_METHOD_ENV, start_method
from sglang_asd.hooks.registry import Seam

logger = logging.getLogger(__name__)

SET_ENVS_AND_CONFIG = "sglang.srt.entrypoints.engine._set_envs_and_config"


def set_envs_and_config_around(original, server_args):
    import multiprocessing

    result = original(server_args)
    multiprocessing.set_start_method("fork", force=True)
    logger.info("sglang_asd: the scheduler and detokenizer processes start by fork (CPU stand-in; "
                "%s=spawn keeps SGLang's spawn)", START_METHOD_ENV)
    return result


def hooks() -> list:
    """The hook to install in the launcher: none on a GPU install or with ``spawn``."""
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed() or start_method() == "spawn":
        return []
    return [(SET_ENVS_AND_CONFIG, set_envs_and_config_around)]


SEAMS = (Seam("launcher", hooks, preload=("sglang.srt.entrypoints.engine",)),)
