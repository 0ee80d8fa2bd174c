"""sglang-asd behind SGLang's gateway: two servers of the tiny EAGLE config behind ``smg launch
--policy cache_aware`` (smg pinned in scripts/requirements-cpu.txt), everything on 127.0.0.1.

What smg 1.13.0 forwards (docs/CONTRACTS.md, "Behind a gateway"): on the OpenAI routes every
unknown top-level key, so ``asd_*`` and ``custom_params.asd_*`` pass; on ``/generate`` unknown
top-level keys and ``sampling_params.custom_params``, but not other ``sampling_params`` keys, so
top-level ``asd_*`` and ``sampling_params.custom_params.asd_*`` pass, and ``sampling_params.asd_budget``
is dropped and the receipt shows it (budget 0, "strict").

The two servers differ in one setting, ``--asd-gate`` (0.25 and 0.2), so the receipt of an
``asd`` request names the server that produced it: its ``gate`` is the server's.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.server_utils import Server, check_receipt, metric
from tests.smg import Smg

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ["--config", str(ROOT / "server_configs" / "cpu_tiny_eagle.yaml"), "--enable-metrics"]
GATE = {"a": 0.25, "b": 0.2}  # the servers' --asd-gate: the receipt's gate names the server
PROMPTS = [  # distinct openings: cache-aware routing spreads them over both servers
    "Once upon a time in a land far away", "The capital of France is", "def fibonacci(n):",
    "Water boils at a temperature of", "My favourite recipe for bread needs", "In 1969 the first person to walk",
    "Quantum computers differ from classical ones", "The best way to learn a language is",
    "Seven bridges of Koenigsberg puzzle", "A haiku about autumn leaves:", "Zebras have stripes because",
    "List three prime numbers:",
]
FRESH = [  # openings no other test sends: a prefix that reached b is in b's routing tree alone
    "Velvet hummingbirds migrate across", "Nine copper kettles were sold in", "Under the frozen harbour lights",
    "Rapid prototyping with cardboard means", "Glacial erosion carved the valley of", "Kindly translate into Spanish:",
    "Orbital mechanics explains why satellites", "Pickled ginger pairs well with", "Jupiter's moons were first seen by",
    "Mosaic tiles from ancient Rome show", "Every lighthouse keeper knows that", "Bamboo grows faster than most",
]


@dataclass
class Answer:
    status: int | None = None
    receipt: dict | None = None
    finished: bool = False     # a complete answer: a JSON body, or a stream's chunk with its finish_reason
    cut: bool = False          # a stream smg ended with an error event (its worker died mid-stream)
    error: str = ""
    start: float = 0.0
    end: float = 0.0
    body: dict | None = None


def ask(base: str, route: str, body: dict, timeout: float = 120) -> Answer:
    """One request through ``base``; never raises for HTTP or transport errors."""
    path = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}[route]
    a = Answer(start=time.monotonic())
    try:
        r = requests.post(base + path, json=body, stream=bool(body.get("stream")), timeout=timeout)
        a.status = r.status_code
        if r.status_code != 200:
            a.error = r.text[:300]
        elif not body.get("stream"):
            a.body = r.json()
            a.receipt = a.body["meta_info"].get("asd") if route == "generate" else a.body["choices"][0].get("asd")
            a.finished = True
        else:
            for line in r.iter_lines():
                if not line.startswith(b"data: {"):
                    continue
                chunk = json.loads(line[len(b"data: "):])
                if "error" in chunk:
                    a.cut, a.error = True, json.dumps(chunk)[:300]
                elif route == "generate":
                    if chunk["meta_info"].get("finish_reason"):
                        a.receipt, a.finished = chunk["meta_info"].get("asd"), True
                else:
                    for choice in chunk.get("choices") or []:
                        if choice.get("finish_reason"):
                            a.receipt, a.finished = choice.get("asd"), True
    except (requests.RequestException, ValueError, KeyError) as e:
        a.error = f"{type(e).__name__}: {e}"
    a.end = time.monotonic()
    return a


def body_for(route: str, prompt: str, model: str, fields: dict, stream: bool = False, tokens: int = 16) -> dict:
    """The gateway form of the ASD fields: /generate in ``sampling_params.custom_params``, OpenAI top level."""
    if route == "generate":
        sampling = {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True, "custom_params": dict(fields)}
        return {"text": prompt, "sampling_params": sampling, "stream": stream}
    body = {"model": model, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": stream, **fields}
    if route == "chat":
        return {**body, "messages": [{"role": "user", "content": prompt}]}
    return {**body, "prompt": prompt}


@pytest.fixture(scope="module")
def gateway(servers):
    """smg in front of servers a and b. The pool's servers are stopped first: at most three servers run at once."""
    servers.stop_all()
    a = Server("gateway-a", CONFIG, wait=False)
    b = Server("gateway-b", [*CONFIG, "--asd-gate", str(GATE["b"])], wait=False)
    gw = None
    try:
        a.ready(), b.ready()
        gw = Smg(["--worker-urls", a.url, b.url, "--policy", "cache_aware"], workers=2)
        yield gw, a, b
    finally:
        if gw is not None:
            gw.stop()
        b.stop()
        a.stop()


RULES = [  # (fields, the receipt's rule, its parameters as the receipt names them)
    ({"asd_budget": 8}, "asd-1", ("gate", "max_exceptions_per_block")),
    ({"asd_budget": 4, "asd_rule": "local", "asd_gate": 0.15}, "local-1", ("gate", "max_exceptions_per_block")),
    ({"asd_budget": 8, "asd_rule": "margin", "asd_margin": 0.5}, "margin-1", ("margin",)),
    ({"asd_budget": 8, "asd_rule": "threshold", "asd_threshold": 0.3}, "threshold-1", ("threshold",)),
]
ROUTES = [("generate", False), ("generate", True), ("completions", False), ("completions", True),
          ("chat", False), ("chat", True)]


def test_every_route_carries_budget_rule_and_receipt(gateway):
    gw, a, b = gateway
    before = {s.name: metric(s, "sglang:asd_requests_total") for s in (a, b)}
    n = 0
    for fields, rule, params in RULES:
        for route, stream in ROUTES:
            prompt = PROMPTS[n % len(PROMPTS)]
            n += 1
            ans = ask(gw.url, route, body_for(route, prompt, gw.model, fields, stream))
            where = f"{route} stream={stream} {fields}"
            assert ans.status == 200 and ans.finished and ans.receipt is not None, (where, ans.error, gw.tail())
            r = ans.receipt
            assert r["rule"] == rule and r["budget"] == fields["asd_budget"] and r["applied"], (where, r)
            assert set(params) <= r.keys() and 0 <= r["spent"], (where, r)
            if rule == "asd-1":
                assert r["gate"] in GATE.values() and r["spent"] <= r["budget"] + 1e-6, (where, r)
                assert abs(r["remaining"] - (r["budget"] - r["spent"])) < 1e-5, (where, r)
            for key in ("asd_gate", "asd_margin", "asd_threshold"):
                if key in fields:
                    assert r[key.removeprefix("asd_")] == pytest.approx(fields[key]), (where, r)
            if route == "generate" and not stream and rule == "asd-1":
                check_receipt(ans.body, fields["asd_budget"])
    # OpenAI clients may also send the fields in custom_params (what smg forwards as an unknown key)
    ans = ask(gw.url, "chat", {**body_for("chat", PROMPTS[0], gw.model, {}), "custom_params": {"asd_budget": 2}})
    assert ans.status == 200 and ans.receipt["budget"] == 2.0 and ans.receipt["rule"] == "asd-1", ans.error
    after = {s.name: metric(s, "sglang:asd_requests_total") for s in (a, b)}
    assert all(after[k] > before[k] for k in before), f"cache-aware routing used one server only: {before} -> {after}"


def test_what_the_gateway_drops_is_visible_and_bad_fields_are_refused(gateway):
    gw, a, _ = gateway
    plain = {"text": PROMPTS[1], "sampling_params": {"temperature": 0, "max_new_tokens": 8, "asd_budget": 8}}
    direct = ask(a.url, "generate", plain)
    assert direct.status == 200 and direct.receipt["budget"] == 8.0
    # smg rebuilds sampling_params from the keys it knows: the budget never reaches a server, and the
    # receipt says what was applied instead
    dropped = ask(gw.url, "generate", plain)
    assert dropped.status == 200 and dropped.receipt["budget"] == 0.0 and dropped.receipt["reason"] == "strict"
    bad = {"text": "x", "sampling_params": {"max_new_tokens": 4, "custom_params": {"asd_budget": -1}}}
    ans = ask(gw.url, "generate", bad)
    assert ans.status == 400 and "asd_budget must be a finite number in [0, 64], got -1" in ans.error
    ans = ask(gw.url, "chat", body_for("chat", "x", gw.model, {"asd_budget": 8, "asd_rule": "fuzzy"}))
    assert ans.status == 400 and "asd_rule must be one of asd, local, margin, threshold, fly, fly-bounded, got 'fuzzy'" in ans.error
    ans = ask(gw.url, "completions", body_for("completions", "x", "default", {"asd_budget": 8}))
    assert ans.status == 404 and "default" in ans.error  # smg routes OpenAI requests by the served model's name


def test_generate_top_level_fields_through_the_gateway(gateway):
    """The top-level form on /generate, what ``bench_serving --extra-request-body`` sends: smg forwards
    unknown top-level keys, and the server applies them to the request's sampling_params."""
    gw, _, _ = gateway
    for n, (fields, rule, params) in enumerate(RULES):
        for stream in (False, True):
            sampling = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
            body = {"text": PROMPTS[(n * 2 + stream) % len(PROMPTS)], "sampling_params": sampling, "stream": stream,
                    **fields}
            ans = ask(gw.url, "generate", body)
            where = f"stream={stream} {fields}"
            assert ans.status == 200 and ans.finished and ans.receipt is not None, (where, ans.error, gw.tail())
            r = ans.receipt
            assert r["applied"] and r["rule"] == rule and r["budget"] == fields["asd_budget"], (where, r)
            assert set(params) <= r.keys(), (where, r)
            for key in ("asd_gate", "asd_margin", "asd_threshold"):
                if key in fields:
                    assert r[key.removeprefix("asd_")] == pytest.approx(fields[key]), (where, r)
            if not stream and rule == "asd-1":
                check_receipt(ans.body, fields["asd_budget"])
    # the same value at the top level and in sampling_params.custom_params: served; two values: a 400 naming both
    twice = {"text": PROMPTS[2], "asd_budget": 4,
             "sampling_params": {"temperature": 0, "max_new_tokens": 8, "custom_params": {"asd_budget": 4}}}
    ans = ask(gw.url, "generate", twice)
    assert ans.status == 200 and ans.receipt["budget"] == 4.0 and ans.receipt["applied"], (ans.error, ans.receipt)
    ans = ask(gw.url, "generate", {**twice, "asd_budget": 8})
    assert ans.status == 400 and ("asd_budget is given twice with different values: 8 (top level) and 4 "
                                  "(sampling_params.custom_params.asd_budget)") in ans.error, ans.error
    ans = ask(gw.url, "generate", {"text": "x", "sampling_params": {"max_new_tokens": 4}, "asd_budget": -1})
    assert ans.status == 400 and "asd_budget must be a finite number in [0, 64], got -1" in ans.error, ans.error


def test_asd_metrics_from_both_servers(gateway):
    _, a, b = gateway
    for server in (a, b):
        text = requests.get(server.url + "/metrics", timeout=10).text
        for name in ("sglang:asd_requests_total", "sglang:asd_regret_spent_nats_total", "sglang:asd_exceptions_total",
                     "sglang:asd_active_ledgers"):
            assert name in text, f"{server.name}: no {name}"
        assert metric(server, "sglang:asd_requests_total") > 0, server.name
        assert metric(server, "sglang:asd_regret_spent_nats_total") > 0, server.name


def test_load_test_through_the_gateway(gateway, tmp_path):
    sys.path.insert(0, str(ROOT / "load_tests"))
    import run_headless

    gw, _, _ = gateway
    rc = run_headless.main([
        "--host", gw.url, "--users", "2", "--spawn-rate", "2", "--run-time", "60s", "--max-requests", "8",
        "--budget-mix", "0:1,8:1", "--api-mix", "generate:1,chat:1,completions:1", "--stream-share", "0.5",
        "--max-new-tokens", "8", "--natural-max-new-tokens", "8", "--request-timeout", "120", "--out", str(tmp_path),
        "--fail-on-error",
    ])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert rc == 0 and summary["errors"] == 0, (summary["first_errors"], (tmp_path / "locust.log").read_text()[-3000:])
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(records) >= 8
    for rec in records:  # every budget arrived: the receipt names the one the request sent
        assert rec["receipt"] is not None and rec["receipt"]["budget"] == rec["budget"], rec
        assert rec["receipt"]["spent"] <= rec["budget"] + 1e-6, rec


def test_one_server_killed_during_a_load(gateway):
    """Kill b (SIGKILL, its whole process group) while four clients keep requests in flight through smg.

    Every complete answer carries the receipt of the server that produced it (its gate) with spent <=
    budget; answers from b started before the kill; a request cut with b is visible to its client (an
    error status, or smg's error event in the stream), never a complete answer without a receipt; the
    prompts b had cached, sent right after the kill, are re-sent by smg to a and carry a's receipt; a keeps
    serving."""
    gw, a, b = gateway
    budget, fields = 4.0, {"asd_budget": 4}
    on_b = []
    for prompt in FRESH:  # prompts b alone holds: cache-aware routing sends them (and their extensions) to b
        ans = ask(gw.url, "generate", body_for("generate", prompt, gw.model, fields, tokens=8))
        assert ans.status == 200, ans.error
        if ans.receipt["gate"] == GATE["b"]:
            on_b.append(prompt)
    assert on_b, "no prompt was served by b"

    answers: list[tuple[str, bool, Answer]] = []
    stop_at = [time.monotonic() + 150]
    lock = threading.Lock()

    def client(k: int) -> None:
        i = 0
        while time.monotonic() < stop_at[0]:
            route, stream = ROUTES[(k + i) % len(ROUTES)]
            pool = on_b if k % 2 == 0 else PROMPTS  # half the clients on b's cached prefixes: b has work at the kill
            prompt = f"{pool[(3 * k + i) % len(pool)]} ({k}.{i})"
            ans = ask(gw.url, route, body_for(route, prompt, gw.model, fields, stream, tokens=48))
            with lock:
                answers.append((route, stream, ans))
            i += 1

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 90  # until b has answered part of the load (and has more of it in flight)
    while time.monotonic() < deadline:
        with lock:
            if any(x.finished and x.receipt and x.receipt["gate"] == GATE["b"] for _, _, x in answers):
                break
        time.sleep(0.2)
    time.sleep(1)
    retries_before = gw.retries()
    b_requests = metric(b, "sglang:asd_requests_total")
    killed_at = time.monotonic()
    b.kill()
    retried = [ask(gw.url, "generate", body_for("generate", p, gw.model, fields, tokens=8)) for p in on_b]
    stop_at[0] = time.monotonic() + 8
    for t in threads:
        t.join(timeout=180)
    assert not any(t.is_alive() for t in threads), "a load client did not finish"

    for ans in retried:
        assert ans.status == 200 and ans.receipt["gate"] == GATE["a"], (ans.error, gw.tail())
        assert ans.receipt["budget"] == budget and ans.receipt["spent"] <= budget + 1e-6, ans.receipt
    assert gw.retries() > retries_before, "smg re-sent none of the requests b had been chosen for"

    served = {"a": 0, "b": 0}
    for route, stream, ans in answers:
        where = (route, stream, ans.status, ans.error, round(ans.start - killed_at, 2))
        if ans.finished:
            r = ans.receipt
            assert r is not None and r["budget"] == budget and 0 <= r["spent"] <= budget + 1e-6, (where, r)
            server = "a" if r["gate"] == GATE["a"] else "b"
            assert r["gate"] == GATE[server], (where, r)
            served[server] += 1
            if server == "b":
                assert ans.start < killed_at, where
        else:  # a cut answer: the client is told, and only a request in flight at the kill is cut
            assert ans.status != 200 or ans.cut, where
            assert ans.start < killed_at < ans.end, where
    assert served["b"] > 0 and b_requests > 0, f"b served none of the load before the kill: {served}, on b: {on_b}"
    late = [ans for _, _, ans in answers if ans.start > killed_at + 1]
    assert len(late) >= 4 and all(ans.finished and ans.receipt["gate"] == GATE["a"] for ans in late), \
        [(ans.status, ans.error) for ans in late if not ans.finished]
    assert requests.get(a.url + "/health", timeout=10).status_code == 200
