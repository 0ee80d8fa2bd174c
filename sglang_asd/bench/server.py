"""Start ``python -m sglang_asd.launch_server`` as a child process for a benchmark, wait until it
serves, and stop it (its whole process group, by id) at the end.

Only the child this module started is ever signalled. Its log goes to a file next to the
benchmark's output so a failed start can be read.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

import requests


def add_server_args(p) -> None:
    """``--url`` (a running server) or ``--launch='ARGS'`` (start a CPU server): one is required."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of a running server, e.g. http://127.0.0.1:30000")
    where.add_argument("--launch", metavar="'SERVER ARGS'",
                       help="start python -m sglang_asd.launch_server with these args; write --launch='ARGS' "
                            "(one quoted string; '' = the CPU demo)")


@contextlib.contextmanager
def target_server(args) -> Iterator[str]:
    """The base URL of ``--url``, or of a server started from ``--launch`` for the ``with`` block."""
    if args.launch is None:
        yield args.url.rstrip("/")
        return
    print(f"starting server (log: {args.out / 'server.log'}) ...", file=sys.stderr)
    with LaunchedServer(args.launch, args.out / "server.log", args.launch_timeout) as url:
        yield url


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _flag(argv: list[str], name: str) -> Optional[str]:
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
        self.host = _flag(self.argv, "--host") or "127.0.0.1"
        port = _flag(self.argv, "--port")
        if port is None:
            port = str(free_port(self.host))
            self.argv += ["--port", port]
        if _flag(self.argv, "--host") is None:
            self.argv += ["--host", self.host]
        self.url = f"http://{self.host}:{port}"
        self.log_path = Path(log_path)
        self.timeout = timeout
        self.python = python
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        cmd = [self.python, "-m", self.module, *self.argv]
        log.write(("$ " + shlex.join(cmd) + "\n").encode())
        log.flush()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        log.close()
        try:
            wait_healthy(self.url, self.timeout, self.proc, self.log_path)
        except BaseException:
            self.stop()
            raise
        return self.url

    def __exit__(self, *exc) -> None:
        self.stop()

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
