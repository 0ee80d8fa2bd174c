"""Where a benchmark's requests go: a running server (``--url``), or CPU servers it starts itself
(``--launch``, and for the plain arm ``--plain-launch``), or none (``--report-only``: rebuild the
report from the run log).

A launched server is ``python -m sglang_asd.launch_server ARGS`` as a child process
(``sglang_asd.testing.server.LaunchedServer``): the tool waits until it serves and stops it at the
end. Their logs go next to the benchmark's output (``server.log``, ``plain_server.log``) so a
failed start can be read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import signal
import sys
from typing import Iterator, Optional

import requests

from sglang_asd.testing.server import LaunchedServer, flag_value

DERIVED = "<derived>"  # --plain-launch given without ARGS: the --launch args minus speculation
# What a server says about itself that identifies a measurement (a resumed run must match it).
IDENTITY_KEYS = ("model_path", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "speculative_draft_model_path", "dtype", "device", "version",
                 "cpu_gemm", "cpu_sampling")
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
    if flag_value(argv, "--model-path") is None and flag_value(argv, "--model") is None:
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
    launched: dict[str, LaunchedServer]

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
    inherited, part of a measurement's identity: on CPU, the linear-layer mode (``cpu_gemm``,
    ``SGLANG_ASD_CPU_GEMM``, cpu_backend/seams/cpu_paths.py) and, only when on (so the identity of
    every earlier run stays what it was: runs without the field verified sampled rows greedily),
    SGLang's sampling verify (``cpu_sampling``, ``SGLANG_ASD_CPU_SAMPLING``, on unless ``off``,
    cpu_backend/seams/sampling.py: without it a sampled request verifies greedily)."""
    if launched and info.get("device") == "cpu":
        from sglang_asd.cpu_backend.env import cpu_sampling, gemm_mode

        info = {**info, "cpu_gemm": gemm_mode(), **({"cpu_sampling": "on"} if cpu_sampling() else {})}
    return info


def identity(info: dict) -> dict:
    """The part of ``server_info`` that a resumed run must share with the stored one."""
    return {k: info[k] for k in IDENTITY_KEYS if k in info}
