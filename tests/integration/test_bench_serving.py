"""SGLang's own benchmark client, ``python -m sglang.bench_serving``, against a tiny ASD server.

``--extra-request-body '{"asd_budget": 8}'`` merges its keys into the top level of every request the
benchmark sends: the /generate body for ``--backend sglang``, the OpenAI body for ``sglang-oai`` and
``sglang-oai-chat``. The benchmark does not show receipts, so the server's metrics do: each request
(the warm-up's and the measured ones) is counted once, by ``sglang:asd_requests_total`` with its
``applied`` label, when it finishes (docs/CONTRACTS.md, "Metrics"). The server's default budget is
0, so an applied greedy request is one whose budget arrived.

The dataset is ``random-ids`` (token ids drawn from the tokenizer's vocabulary: nothing to download)
with the tiny model's tokenizer, from the offline fixture the server was started with.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
import requests

from sglang_asd import fixtures
from tests.conftest import CONFIGS

pytestmark = pytest.mark.server

CONFIG = "eagle"
PROMPTS = 3
WARMUP = 1
BUDGET = 8
RUN_TIMEOUT_S = 300


def _tokenizer() -> str:
    args = CONFIGS[CONFIG]
    return str(fixtures.fixture_path(args[args.index("--model-path") + 1].removeprefix("fixture:")))


def _requests(server) -> dict[tuple[str, str], float]:
    """``sglang:asd_requests_total`` by (applied, rule)."""
    text = requests.get(server.url + "/metrics", timeout=10).text
    out: dict[tuple[str, str], float] = {}
    for labels, value in re.findall(r"^sglang:asd_requests_total\{([^}]*)\} (\S+)$", text, re.M):
        named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = (named.get("applied", ""), named.get("rule", ""))
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _delta(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in before.keys() | after.keys()
            if after.get(k, 0.0) != before.get(k, 0.0)}


def _bench(server, backend: str, extra: dict, out_dir) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sglang.bench_serving", "--backend", backend, "--base-url", server.url,
           "--dataset-name", "random-ids", "--num-prompts", str(PROMPTS), "--random-input-len", "16",
           "--random-output-len", "8", "--random-range-ratio", "1", "--tokenizer", _tokenizer(),
           "--extra-request-body", json.dumps(extra), "--warmup-requests", str(WARMUP), "--max-concurrency", "2",
           "--output-file", str(out_dir / "result.jsonl"), "--disable-tqdm", "--seed", "1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=out_dir)


@pytest.fixture(scope="module")
def server(servers):
    server = servers.get(CONFIG)
    # the server's default budget is 0: a request that sends none is served strict
    r = requests.post(server.url + "/generate", json={"text": "Once upon a time",
                                                      "sampling_params": {"temperature": 0, "max_new_tokens": 2}})
    assert r.status_code == 200 and r.json()["meta_info"]["asd"]["reason"] == "strict", r.text
    return server


@pytest.mark.parametrize("backend", ["sglang", "sglang-oai", "sglang-oai-chat"])
def test_bench_serving_sends_a_budget(server, backend, tmp_path):
    before = _requests(server)
    run = _bench(server, backend, {"asd_budget": BUDGET}, tmp_path)
    log = f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert run.returncode == 0, log
    result = json.loads((tmp_path / "result.jsonl").read_text().splitlines()[-1])
    assert result["completed"] == PROMPTS, log
    want = {("true", "asd"): float(PROMPTS + WARMUP)}  # every request applied (greedy: rule asd), none strict
    deadline = time.monotonic() + 10  # a request is counted when the scheduler finishes it
    while (got := _delta(before, _requests(server))) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == want, (got, log)

