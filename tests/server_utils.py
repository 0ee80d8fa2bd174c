"""Real SGLang servers (CPU, float32) for tests, on top of the shared launcher (``sglang_asd.testing.server``).

Servers log at info level: tests that read the log (the verify warm-up's variant lines) then use the
pool's servers instead of starting their own.
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
import time
from pathlib import Path

import requests

from sglang_asd.testing.server import LaunchedServer

# One server pair (stock and ASD) for the paged-KV and the streaming-session tests: paged KV (page 4)
# with streaming sessions on, so neither starts servers of its own.
PAGED_STREAMING = ("--page-size", "4", "--enable-streaming-session")

# SGLang's memory check at start-up reads the machine's available memory before and after loading the
# weights and charges the whole drop to this server: another server starting beside it (the pool starts
# pairs side by side) can fail it under the launcher's CPU default of 0.3. The KV pool stays capped by
# the launcher's --max-total-tokens 65536 (a tiny model's pool is 0.04 GB), so 0.8 changes no decision.
SERVER_DEFAULTS = ("--dtype", "float32", "--log-level", "info", "--mem-fraction-static", "0.8")

START_TIMEOUT_S = float(os.environ.get("SGLANG_ASD_TEST_START_TIMEOUT", 600))


class Server:
    """A server: ``module`` is ``sglang_asd.launch_server`` or ``sglang_asd.stock_server``.

    ``wait=False`` returns as soon as the process is started (the pool starts servers side by side);
    ``ready()`` then blocks until it serves. ``env``: variables added to the test process's.
    """

    def __init__(self, name: str, args: list[str], module: str = "sglang_asd.launch_server", wait: bool = True,
                 env: dict | None = None):
        self.name = name
        self.module = module
        self.log_path = Path(tempfile.mkdtemp(prefix=f"sglang_asd_test_{name}_")) / "server.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self._launched = LaunchedServer([*SERVER_DEFAULTS, *args], self.log_path, timeout=START_TIMEOUT_S,
                                        module=module, env=env)
        self._t0 = time.time()
        self.started_s: float | None = None  # seconds from start to serving, once ready
        self._launched.start()
        if wait:
            self.ready()

    @property
    def url(self) -> str:  # a start that found its port taken restarts on another (LaunchedServer.wait)
        return self._launched.url

    def ready(self) -> "Server":
        if self.started_s is None:
            self._launched.wait()
            self.started_s = time.time() - self._t0
        return self

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

    def kill(self) -> None:
        """SIGKILL the server's whole process group at once, as a crash would (``stop`` still reaps it)."""
        os.killpg(self._launched.proc.pid, signal.SIGKILL)


def check_receipt(out: dict, budget: float, cap: int = 2) -> dict:
    """The receipt of a /generate response agrees with the output and never overspends."""
    meta = out["meta_info"]
    r = meta["asd"]
    n = len(out["output_ids"])
    assert r["applied"] and r["reason"] is None and r["budget"] == budget
    assert 0 <= r["spent"] <= budget + 1e-6 and abs(r["remaining"] - (budget - r["spent"])) < 1e-5
    assert r["exceptions"] == len(r["events"]) or r["events_truncated"]
    assert r["exceptions"] <= cap * meta.get("spec_verify_ct", 0)  # absent: no verify round ran
    assert abs(sum(e["regret"] for e in r["events"]) - r["spent"]) < 1e-4
    positions = [e["pos"] for e in r["events"]]
    assert positions == sorted(set(positions)) and all(0 <= p < n for p in positions)
    for e in r["events"]:
        assert out["output_ids"][e["pos"]] == e["draft"] != e["target"] and e["regret"] >= 0
    return r


def tp_traces(server, folder: str, ranks: int = 2) -> list[list[dict]]:
    """Every rank's trace of a TP server of ``tests/tp_asd_server.py`` (tracing into ``folder``), as of a
    ``/flush_cache`` issued now (each rank writes its own). SGLang refuses a flush (HTTP 400) while its
    scheduler still holds a request, which it may for a moment after the client has every answer:
    retried, and only the traces of the flush that succeeded are read."""
    import pytest
    import torch

    paths = [os.path.join(folder, f"rank{r}.pt") for r in range(ranks)]
    deadline = time.time() + 60
    while True:
        before = [os.path.getmtime(p) if os.path.exists(p) else 0.0 for p in paths]
        r = requests.post(server.url + "/flush_cache", timeout=60)
        if r.status_code == 200:
            break
        assert r.status_code == 400 and time.time() < deadline, f"/flush_cache: HTTP {r.status_code}: {r.text[:200]}"
        time.sleep(1.0)
    while time.time() < deadline:
        if all(os.path.exists(p) and os.path.getmtime(p) > b for p, b in zip(paths, before)):
            return [torch.load(p) for p in paths]
        time.sleep(0.2)
    pytest.fail(f"the ranks did not write their traces after /flush_cache:\n{server.tail()}")


def metric(server, name: str) -> float:
    """The sum over labels of a Prometheus sample on the server's ``/metrics``."""
    text = requests.get(server.url + "/metrics").text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def assert_ranks_agree(rank0: list[dict], rank1: list[dict], budget: float, label: str = "",
                       perturbed_charge: bool = False) -> None:
    """Rank 1's trace (``tests/tp_asd_server.py``) equals rank 0's at every verify step in everything but its
    own perturbed logits: rank 1 took rank 0's decision wherever its logits differed. Some batch must have
    been perturbed, and some step must hold a charged ledger row (0 < remaining < ``budget``; with
    ``perturbed_charge``, a perturbed step), so the comparison saw regret."""
    import torch

    assert len(rank0) == len(rank1) > 0
    perturbed = [i for i, e in enumerate(rank1) if e["perturbed"]]
    assert perturbed, "no batch held a sampled request: rank 1 was never perturbed"
    assert any(not torch.equal(rank0[i]["logits_sum"], rank1[i]["logits_sum"]) for i in perturbed)
    charged = False
    for i, (a, b) in enumerate(zip(rank0, rank1)):
        assert not a["perturbed"], "rank 0 is the reference"
        assert a.keys() == b.keys()
        for key in a.keys() - {"perturbed", "logits_sum"}:
            assert torch.equal(a[key], b[key]), f"{label}step {i} (perturbed: {b['perturbed']}): rank 1's {key} is not rank 0's"
        remaining = a.get("table_remaining", torch.zeros(1))
        charged |= (b["perturbed"] or not perturbed_charge) and bool(((remaining > 0) & (remaining < budget)).any())
    assert charged, "no step charged a ledger row where it counts: the rank comparison saw no regret"
