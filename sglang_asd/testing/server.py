"""Start a server as a child process, wait until it serves, stop it: ``LaunchedServer``.

    with LaunchedServer("--asd-max-budget 32", log_path) as url: ...

The child is ``python -m sglang_asd.launch_server ARGS`` (or another ``module``, e.g.
``sglang_asd.stock_server``) in a session of its own; stopping it signals that session's process
group, by id, and nothing else. Its output goes to ``log_path``, so a failed start can be read.
Used by the benchmark tools' ``--launch`` (``sglang_asd.bench.server``), the tests' server pool
and the GPU kit.

Ports are picked free and bound later, by a child that first spends tens of seconds importing: SGLang
does the same for its own rendezvous port (``get_free_port_below_ephemeral``, 22000-29999). Another
process can take a port in that window (servers started side by side, as the test pool and the GPU
kit do), so a server that exits before serving with "address already in use" in its log is started
again, on a new HTTP port unless the caller chose one, at most ``START_ATTEMPTS`` times.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import requests


def group_cpu_seconds(pgid: int) -> Optional[float]:
    """User + system CPU seconds of the live processes of process group ``pgid``, from
    ``/proc/PID/stat`` (fields 5, 14, 15); None where there is no ``/proc``."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on: the name may hold spaces
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


# HTTP ports for launched servers: under the kernel's ephemeral range (where outgoing connections,
# this tool's own requests included, take their local ports) and below SGLang's rendezvous range.
HTTP_PORTS = range(12000, 22000)
PORT_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
START_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1", ports: range = HTTP_PORTS, attempts: int = 64) -> int:
    """A port of ``ports`` that nothing holds now (bound without SO_REUSEADDR, so one with connections
    still in TIME_WAIT counts as taken); the kernel's choice if ``attempts`` random picks all fail."""
    for port in random.sample(ports, attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def flag_value(argv: list[str], name: str) -> Optional[str]:
    """The value of ``name`` in an argument list (``--name V`` or ``--name=V``), None when absent."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def wait_healthy(base_url: str, timeout: float, proc: Optional[subprocess.Popen] = None,
                 log_path: Optional[Path] = None) -> None:
    """Poll ``/health_generate`` (a real one-token generation), then ``/health``, until one is 200."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = _tail(log_path) if log_path else ""
            raise RuntimeError(f"server exited with status {proc.returncode} before it served{tail}")
        for path in ("/health_generate", "/health"):
            try:
                r = requests.get(base_url + path, timeout=30)
                if r.status_code == 200:
                    return
                last = f"{path} -> HTTP {r.status_code}"
            except requests.RequestException as e:
                last = f"{path} -> {type(e).__name__}"
        time.sleep(2.0)
    raise TimeoutError(f"server at {base_url} not healthy after {timeout:.0f} s (last: {last})")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"; last lines of {path}:\n" + "\n".join(text)


class LaunchedServer:
    """Context manager: ``with LaunchedServer("--asd-max-budget 32", log) as url: ...``."""

    def __init__(self, args: str | list[str], log_path: Path, timeout: float = 900.0, python: str = sys.executable,
                 module: str = "sglang_asd.launch_server", env: Optional[dict] = None):
        self.argv = shlex.split(args) if isinstance(args, str) else list(args)
        self.module = module
        self.env = env
        self.host = flag_value(self.argv, "--host") or "127.0.0.1"
        self.own_port = flag_value(self.argv, "--port") is None  # ours to change when a start finds it taken
        if self.own_port:
            self.argv += ["--port", str(free_port(self.host))]
        if flag_value(self.argv, "--host") is None:
            self.argv += ["--host", self.host]
        self.log_path = Path(log_path)
        self.timeout = timeout
        self.python = python
        self.proc: Optional[subprocess.Popen] = None
        self._log_start = 0  # where the current start's lines begin in the log

    @property
    def url(self) -> str:
        return f"http://{self.host}:{flag_value(self.argv, '--port')}"

    def __enter__(self) -> str:
        self.start()
        return self.wait()

    def start(self) -> None:
        """Start the server process and return at once (``wait`` blocks until it serves)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self._log_start = log.tell()
        cmd = [self.python, "-m", self.module, *self.argv]
        log.write(("$ " + shlex.join(cmd) + "\n").encode())
        log.flush()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        log.close()

    def wait(self) -> str:
        """Block until the started server is healthy; on failure stop it and raise. A start that
        failed on a port another process took is retried (module docstring)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                wait_healthy(self.url, self.timeout, self.proc, self.log_path)
                return self.url
            except RuntimeError:  # the server exited before it served
                self.stop()
                if attempt == START_ATTEMPTS or not self._port_was_taken():
                    raise
            except BaseException:
                self.stop()
                raise
            if self.own_port:
                i = self.argv.index("--port")
                self.argv[i + 1] = str(free_port(self.host))
            with self.log_path.open("a") as log:
                log.write(f"[sglang_asd] start {attempt} of {START_ATTEMPTS} found a port in use; starting "
                          f"again (HTTP port {flag_value(self.argv, '--port')})\n")
            self.start()
        raise AssertionError("unreachable")

    def _port_was_taken(self) -> bool:
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return PORT_IN_USE.search(log.read().decode(errors="replace")) is not None
        except OSError:
            return False

    def __exit__(self, *exc) -> None:
        self.stop()

    def cpu_seconds(self) -> Optional[float]:
        """CPU seconds used so far by the server's processes (its session's process group)."""
        return None if self.proc is None else group_cpu_seconds(self.proc.pid)

    def stop(self, grace: float = 60.0) -> Optional[int]:
        """Stop the server; returns the launcher's exit status (0 = clean shutdown)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        # SIGTERM to the launcher: SGLang drains and takes its children (scheduler, detokenizer) down.
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of its session (start_new_session=True: the group id is the launcher's pid).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.wait()
