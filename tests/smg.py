"""``smg launch`` (SGLang's gateway, pinned in scripts/requirements-cpu.txt) for the tests: in its own
session on 127.0.0.1, metrics on a loopback port, stopped with its whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from sglang_asd.testing.server import free_port

SMG = Path(sys.executable).with_name("smg")
START_S = 120  # smg's start (it reads each worker's model info) and the workers' registration


class Smg:
    """``smg launch ROUTING...`` (``--worker-urls ... --policy ...``, or ``--pd-disaggregation --prefill
    ... --decode ...``), ready once ``workers`` workers are registered and a model is listed."""

    def __init__(self, routing: list[str], workers: int):
        self.port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.mkdtemp(prefix="sglang_asd_test_smg_")) / "smg.log"
        assert SMG.exists(), f"smg is not installed beside {sys.executable} (scripts/requirements-cpu.txt pins it)"
        cmd = [str(SMG), "launch", "--host", "127.0.0.1", "--port", str(self.port), *routing,
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
               "--shutdown-grace-period-secs", "2", "--log-level", "warn"]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"smg exited with {self.proc.returncode}:\n{self.tail()}"
            try:
                registered = requests.get(self.url + "/workers", timeout=2).json().get("workers", [])
                models = requests.get(self.url + "/v1/models", timeout=2).json().get("data", [])
                if len(registered) == workers and models:
                    self.model = models[0]["id"]
                    return
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise AssertionError(f"smg did not register {workers} workers in {START_S} s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def retries(self) -> float:
        """smg's count of re-sent requests (``smg_worker_retries_total``, every route)."""
        text = requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("smg_worker_retries_total{"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
