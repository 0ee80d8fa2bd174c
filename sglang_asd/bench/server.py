"""Where a benchmark's requests go: a running server (``--url``), or CPU servers it starts itself
(``--launch``, and for the plain arm ``--plain-launch``), or none (``--report-only``: rebuild the
report from the run log).

A launched server is ``python -m sglang_asd.launch_server ARGS`` as a child process: the tool
waits until it serves and stops it (its whole process group, by id) at the end. Only children
this module started are ever signalled. Their logs go next to the benchmark's output
(``server.log``, ``plain_server.log``) so a failed start can be read.

Ports are picked free and bound later, by a child that first spends tens of seconds importing: SGLang
does the same for its own rendezvous port (``get_free_port_below_ephemeral``, 22000-29999). Another
process can take a port in that window (servers started side by side, as the test pool and the GPU
kit do), so a server that exits before serving with "address already in use" in its log is started
again, on a new HTTP port unless the caller chose one, at most ``START_ATTEMPTS`` times.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from typing import Iterator, Optional

import requests

DERIVED = "<derived>"  # --plain-launch given without ARGS: the --launch args minus speculation
# What a server says about itself that identifies a measurement (a resumed run must match it).
IDENTITY_KEYS = ("model_path", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "speculative_draft_model_path", "dtype", "device", "version",
                 "cpu_gemm")
INFO_KEYS = IDENTITY_KEYS + ("attention_backend", "disable_radix_cache", "disable_cuda_graph", "tp_size",
                             "launch_command")


def add_server_args(p) -> None:
    """``--url`` (a running server), ``--launch='ARGS'`` (start a CPU server) or ``--report-only``
    (no server: rebuild the report from ``--out``'s run log); one is required."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of a running server, e.g. http://127.0.0.1:30000")
    where.add_argument("--launch", metavar="'SERVER ARGS'",
                       help="start python -m sglang_asd.launch_server with these args; write --launch='ARGS' "
                            "(one quoted string; '' = the CPU demo)")
    where.add_argument("--report-only", action="store_true",
                       help="contact no server: write the report from the run log in --out (also of a run "
                            "that is still going or stopped)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run log in --out (same configuration), skipping completed work")
    p.add_argument("--launch-timeout", type=float, default=900.0, help="seconds to wait for a launched server")


def add_plain_args(p) -> None:
    """The plain arm: a second server without speculative decoding, measured on the same prompts."""
    plain = p.add_mutually_exclusive_group()
    plain.add_argument("--plain-url", help="base URL of a running server without speculative decoding")
    plain.add_argument("--plain-launch", nargs="?", const=DERIVED, metavar="'SERVER ARGS'",
                       help="start a server without speculative decoding; bare = the --launch args without "
                            "the --speculative-* flags (which must name --model-path)")


def plain_launch_args(launch: str) -> str:
    """``--launch`` args minus every ``--speculative-*`` flag (and its value): the same target on
    the same settings, decoding without a draft."""
    argv = shlex.split(launch)
    if _flag(argv, "--model-path") is None and _flag(argv, "--model") is None:
        raise ValueError(f"--plain-launch without args needs --launch with --model-path, got --launch={launch!r} "
                         "(for the demo: --plain-launch='--model-path fixture:smollm2-135m')")
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--speculative-"):
            takes_value = "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 2 if takes_value else 1
            continue
        out.append(arg)
        i += 1
    return shlex.join(out)


def plain_launch(args) -> Optional[str]:
    """The plain server's launch args (None when it is not launched)."""
    value = getattr(args, "plain_launch", None)
    if value != DERIVED:
        return value
    if args.launch is None:
        raise ValueError("--plain-launch without args needs --launch (or give --plain-launch='ARGS' / --plain-url)")
    return plain_launch_args(args.launch)


@dataclasses.dataclass
class Targets:
    """Where a run's requests go: the server under test (``speculative``) and the server without
    speculative decoding (``plain``, None when there is no plain arm), by role; ``launched``
    holds the ones this run started, whose CPU time can be read."""

    urls: dict[str, Optional[str]]
    launched: dict[str, "LaunchedServer"]

    def cpu_seconds(self, role: str) -> Optional[float]:
        """CPU seconds the ``role`` server has used so far (None unless this run launched it)."""
        server = self.launched.get(role)
        return None if server is None else server.cpu_seconds()


@contextlib.contextmanager
def target_server(args) -> Iterator[str]:
    """The base URL of ``--url``, or of a server started from ``--launch`` for the ``with`` block."""
    with target_servers(args) as targets:
        yield targets.urls["speculative"]


@contextlib.contextmanager
def target_servers(args) -> Iterator[Targets]:
    """The servers of a run for the ``with`` block: each from its ``--*url`` or started from
    its ``--*launch``."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(stop_on_sigterm())
        launched: dict[str, LaunchedServer] = {}
        if args.launch is None:
            url = args.url.rstrip("/")
        else:
            print(f"starting server (log: {args.out / 'server.log'}) ...", file=sys.stderr)
            launched["speculative"] = LaunchedServer(args.launch, args.out / "server.log", args.launch_timeout)
            url = stack.enter_context(launched["speculative"])
        plain_url = getattr(args, "plain_url", None)
        plain_args = plain_launch(args)
        if plain_args is not None:
            print(f"starting plain server (log: {args.out / 'plain_server.log'}) ...", file=sys.stderr)
            launched["plain"] = LaunchedServer(plain_args, args.out / "plain_server.log", args.launch_timeout)
            plain_url = stack.enter_context(launched["plain"])
        yield Targets({"speculative": url, "plain": plain_url.rstrip("/") if plain_url else None}, launched)


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


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM (``kill PID``) raises SystemExit, so launched servers are stopped
    and the run log stays consistent; the previous handler is restored afterwards."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def server_info(url: str, attempts: int = 4, timeout: float = 60.0) -> dict:
    """What the server says about itself (model, speculative settings), best effort:
    ``/server_info`` (SGLang >= 0.5.23), else ``/get_server_info``; nested groups are searched.
    A busy server (a loaded CPU) can take long to answer: each route is tried ``attempts`` times
    with ``timeout`` seconds each before giving up, since an empty answer fails a ``--resume``."""
    info = None
    for _ in range(attempts):
        for path in ("/server_info", "/get_server_info"):
            try:
                r = requests.get(url + path, timeout=timeout)
                if r.status_code == 200:
                    info = r.json()
                    break
            except (requests.RequestException, ValueError):
                continue
        if info is not None:
            break
    if not isinstance(info, dict):
        return {}
    found: dict = {}

    def visit(d: dict, depth: int) -> None:
        for k, v in d.items():
            if k in INFO_KEYS and k not in found and not isinstance(v, dict):
                found[k] = v
            elif isinstance(v, dict) and depth < 2:
                visit(v, depth + 1)

    visit(info, 0)
    return {k: found[k] for k in INFO_KEYS if k in found}


def with_launch_facts(info: dict, launched: bool) -> dict:
    """``info`` plus what a server started by this run shows only through the environment it
    inherited: on CPU, the linear-layer mode (``cpu_gemm``, ``SGLANG_ASD_CPU_GEMM``,
    cpu_backend/seams/cpu_paths.py), part of a measurement's identity."""
    if launched and info.get("device") == "cpu":
        from sglang_asd.cpu_backend.seams.cpu_paths import gemm_mode

        info = {**info, "cpu_gemm": gemm_mode()}
    return info


def identity(info: dict) -> dict:
    """The part of ``server_info`` that a resumed run must share with the stored one."""
    return {k: info[k] for k in IDENTITY_KEYS if k in info}


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
        self.own_port = _flag(self.argv, "--port") is None  # ours to change when a start finds it taken
        if self.own_port:
            self.argv += ["--port", str(free_port(self.host))]
        if _flag(self.argv, "--host") is None:
            self.argv += ["--host", self.host]
        self.log_path = Path(log_path)
        self.timeout = timeout
        self.python = python
        self.proc: Optional[subprocess.Popen] = None
        self._log_start = 0  # where the current start's lines begin in the log

    @property
    def url(self) -> str:
        return f"http://{self.host}:{_flag(self.argv, '--port')}"

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
                          f"again (HTTP port {_flag(self.argv, '--port')})\n")
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
