"""LaunchedServer (sglang_asd/testing/server.py): start a child, wait until it serves, stop it; report a
failed start with its log; and the benchmark tools launching their servers through it (bench/server.py).
The child here is the fake server behind a shim interpreter (the real launcher is covered by the
server-marked tests)."""

import os
import stat
import sys
from pathlib import Path

import pytest
import requests

from sglang_asd.testing.server import LaunchedServer

FAKE = Path(__file__).with_name("fake_server.py")


def _shim(tmp_path, body):
    path = tmp_path / "python-shim"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_launch_serves_and_stops(tmp_path):
    shim = _shim(tmp_path, f'exec {sys.executable} {FAKE} "$@"')
    server = LaunchedServer("--asd-max-budget 32", tmp_path / "server.log", timeout=30, python=shim)
    with server as url:
        assert url.startswith("http://127.0.0.1:")
        assert requests.get(url + "/health", timeout=5).status_code == 200
        pid = server.proc.pid
    assert server.proc is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    log = (tmp_path / "server.log").read_text()
    assert "sglang_asd.launch_server --asd-max-budget 32 --port" in log


def test_failed_start_reports_the_log(tmp_path):
    shim = _shim(tmp_path, 'echo "model not found" >&2; exit 3')
    with pytest.raises(RuntimeError, match="(?s)exited with status 3.*model not found"):
        with LaunchedServer("", tmp_path / "server.log", timeout=30, python=shim):
            pass


def test_start_that_finds_its_port_taken_is_retried_on_a_new_port(tmp_path):
    """The first start dies as SGLang's scheduler does when its rendezvous port was taken meanwhile;
    the second one serves, on another HTTP port."""
    runs = tmp_path / "runs"
    shim = _shim(tmp_path, f'echo run >> {runs}\nif [ $(wc -l < {runs}) -eq 1 ]; then\n'
                           '  echo "DistNetworkError: port: 26308, code: -98, name: EADDRINUSE" >&2; exit 1\nfi\n'
                           f'exec {sys.executable} {FAKE} "$@"')
    server = LaunchedServer("", tmp_path / "server.log", timeout=30, python=shim)
    first = server.url
    with server as url:
        assert requests.get(url + "/health", timeout=5).status_code == 200
        assert url == server.url != first
    assert runs.read_text().count("run") == 2
    log = (tmp_path / "server.log").read_text()
    assert f"start 1 of 3 found a port in use; starting again (HTTP port {url.rsplit(':', 1)[1]})" in log


def test_port_clashes_are_retried_a_bounded_number_of_times(tmp_path):
    runs = tmp_path / "runs"
    shim = _shim(tmp_path, f'echo run >> {runs}; echo "OSError: [Errno 98] Address already in use" >&2; exit 1')
    with pytest.raises(RuntimeError, match="(?s)exited with status 1.*Address already in use"):
        with LaunchedServer("--port 23456", tmp_path / "server.log", timeout=30, python=shim) as url:
            pass
    assert runs.read_text().count("run") == 3
    assert (tmp_path / "server.log").read_text().count("--port 23456") == 3   # a port the caller chose stays


def test_other_start_failures_are_not_retried(tmp_path):
    runs = tmp_path / "runs"
    shim = _shim(tmp_path, f'echo run >> {runs}; echo "model not found" >&2; exit 3')
    with pytest.raises(RuntimeError, match="exited with status 3"):
        with LaunchedServer("", tmp_path / "server.log", timeout=30, python=shim):
            pass
    assert runs.read_text().count("run") == 1


def test_free_port_is_below_the_ephemeral_range_and_free(tmp_path):
    import socket

    from sglang_asd.testing.server import HTTP_PORTS, free_port

    port = free_port()
    assert port in HTTP_PORTS
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))   # nothing holds it
        s.listen()
        held = range(port, port + 1)
        assert free_port(ports=held, attempts=1) != port   # taken: falls back to the kernel's choice


def test_plain_launch_args_drop_every_speculative_flag():
    from sglang_asd.bench.server import plain_launch_args

    launch = ("--model-path fixture:qwen --speculative-algorithm STANDALONE --speculative-draft-model-path "
              "fixture:draft --speculative-num-steps=4 --speculative-eagle-topk 1 --asd-max-budget 64 "
              "--asd-standalone-draft-fix --dtype bfloat16")
    assert plain_launch_args(launch) == ("--model-path fixture:qwen --asd-max-budget 64 --asd-standalone-draft-fix "
                                         "--dtype bfloat16")
    with pytest.raises(ValueError, match="needs --launch with --model-path"):
        plain_launch_args("--asd-max-budget 32")


def test_speed_launches_both_servers_and_stops_them(tmp_path, monkeypatch):
    """--launch + bare --plain-launch: two children (the fake server behind a shim), one plain."""
    import json

    from sglang_asd.bench import server, speed

    shim = _shim(tmp_path, f'exec {sys.executable} {FAKE} "$@"')
    started = []

    class ShimServer(LaunchedServer):
        def __init__(self, args, log_path, timeout=900.0):
            super().__init__(args, log_path, timeout, python=shim)
            started.append(self)

    monkeypatch.setattr(server, "LaunchedServer", ShimServer)
    out = tmp_path / "out"
    rc = speed.main(["--launch", "--model-path m --speculative-algorithm FAKE", "--plain-launch", "--budgets", "0,8",
                     "--num-prompts", "2", "--max-new-tokens", "6", "--concurrency", "2", "--repeats", "1",
                     "--out", str(out)])
    assert rc == 0 and len(started) == 2 and all(s.proc is None for s in started)
    result = json.loads((out / "speed.json").read_text())
    assert result["config"]["plain_launch"] == "--model-path m"
    assert result["plain_server"]["speculative_algorithm"] is None
    assert [r["arm"] for r in result["arms"]] == ["plain", "strict", "b8"]
    assert "--model-path m --port" in (out / "plain_server.log").read_text()
    # launched servers: the CPU time of their processes during each pass is logged
    assert all(p["server_cpu_s"] is not None and p["server_cpu_s"] >= 0 for p in result["passes"])
    for p in result["passes"]:
        if p["server_cpu_s"]:
            assert p["cpu_s_per_token"] == pytest.approx(p["server_cpu_s"] / p["output_tokens"])


def test_group_cpu_seconds_reads_proc():
    from sglang_asd.testing.server import group_cpu_seconds

    mine = group_cpu_seconds(os.getpgid(0))   # this test run's own process group has used CPU
    assert mine is not None and mine > 0
    assert group_cpu_seconds(2 ** 22 + 12345) == 0.0   # no such group


def test_sigterm_stops_the_launched_server(tmp_path):
    """``kill PID`` of a benchmark must not leave its server behind."""
    import signal
    import subprocess
    import time

    shim = _shim(tmp_path, f'exec {sys.executable} {FAKE} "$@"')
    code = f"""
import sys, time, types
from sglang_asd.bench import server
class Shim(server.LaunchedServer):
    def __init__(self, a, log, timeout=900.0):
        super().__init__(a, log, timeout, python={shim!r})
server.LaunchedServer = Shim
args = types.SimpleNamespace(launch="", url=None, out=__import__("pathlib").Path({str(tmp_path)!r}), launch_timeout=30)
with server.target_servers(args) as targets:
    print(targets.urls["speculative"], flush=True)
    time.sleep(60)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    url = child.stdout.readline().strip()
    assert requests.get(url + "/health", timeout=5).status_code == 200
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 128 + signal.SIGTERM
    time.sleep(0.5)
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "/health", timeout=5)
