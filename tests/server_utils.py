"""Real SGLang servers (CPU, float32) for tests, on top of the benchmark launcher."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import requests

from sglang_asd.bench.server import LaunchedServer

START_TIMEOUT_S = float(os.environ.get("SGLANG_ASD_TEST_START_TIMEOUT", 600))


class Server:
    """A running server: ``module`` is ``sglang_asd.launch_server`` or ``sglang_asd.stock_server``."""

    def __init__(self, name: str, args: list[str], module: str = "sglang_asd.launch_server"):
        self.name = name
        self.log_path = Path(tempfile.mkdtemp(prefix=f"sglang_asd_test_{name}_")) / "server.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._launched = LaunchedServer([*args, "--dtype", "float32", "--log-level", "warning"], self.log_path,
                                        timeout=START_TIMEOUT_S, module=module, env=env)
        t0 = time.time()
        self.url = self._launched.__enter__()
        self.started_s = time.time() - t0

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
        return self._launched.stop(grace=timeout)
