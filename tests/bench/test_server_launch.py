"""LaunchedServer: start a child, wait until it serves, stop it; report a failed start with its log.
The child here is the fake server behind a shim interpreter (the real launcher is covered by the
server-marked tests)."""

import os
import stat
import sys
from pathlib import Path

import pytest
import requests

from sglang_asd.bench.server import LaunchedServer

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
