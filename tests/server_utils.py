"""Start and stop real SGLang servers (CPU, float32) for tests. One server per configuration."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = float(os.environ.get("SGLANG_ASD_TEST_START_TIMEOUT", 300))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess: ``module`` is ``sglang_asd.launch_server`` or ``sglang_asd.stock_server``."""

    def __init__(self, name: str, args: list[str], module: str = "sglang_asd.launch_server"):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.gettempdir()) / f"sglang_asd_test_{name}_{self.port}.log"
        cmd = [sys.executable, "-m", module, *args, "--host", "127.0.0.1", "--port", str(self.port),
               "--dtype", "float32", "--log-level", "warning"]
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.started_s = None
        t0 = time.time()
        self._wait_ready()
        self.started_s = time.time() - t0

    def _wait_ready(self) -> None:
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"server {self.name} did not become ready in {START_TIMEOUT_S}s:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def generate(self, text=None, input_ids=None, **sampling) -> dict:
        body = {"sampling_params": {"temperature": 0, **sampling}}
        body.update({"text": text} if text is not None else {"input_ids": input_ids})
        r = requests.post(self.url + "/generate", json=body, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM to the launcher (SGLang drains and takes its children down); SIGKILL the group if not."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of the session, if any
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._log.close()
        return self.proc.returncode
