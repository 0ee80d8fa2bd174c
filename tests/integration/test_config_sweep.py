"""A sweep of the speculative configurations SGLang serves on CPU: none may be taken down by a request.

For every speculative algorithm served on CPU (EAGLE chains and trees, EAGLE3, STANDALONE, NGRAM, DSPARK,
DFLASH), a sample of the draft shapes SGLang starts with (``--speculative-num-steps``,
``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``, the block drafters' block sizes,
``--page-size``), edges included: topk 1, topk above the draft width (topk > draft tokens - 1, which
SGLang accepts), two draft tokens, the largest tree, pages of more than one token. Each row starts one
ASD server (SGLang's sampling verify on: ``SGLANG_ASD_CPU_SAMPLING=on``), sends one concurrent burst of
greedy and sampled requests at budgets 0 and 8 under every rule, and checks that every request is
answered with a receipt that holds (spent <= budget on the ledger rules, events that match the output;
not applied: a documented reason) and that the server still serves afterwards. A row the launcher
refuses must be refused in one line naming the flag.

Rows are data (``ROWS``); a server is started ahead of its test (two at a time: most of a start is
one core importing SGLang) and stopped after it, so the sweep holds at most two servers of its own.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import pathlib
import subprocess
import sys
from typing import Optional

import pytest
import requests

from tests.server_utils import Server

pytestmark = pytest.mark.server

CONFIG_DIR = pathlib.Path(__file__).resolve().parents[2] / "server_configs"
EAGLE = ("--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
         "--speculative-draft-model-path", "fixture:tiny-eagle-noisy")
EAGLE3 = ("--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE3",
          "--speculative-draft-model-path", "fixture:tiny-eagle3-noisy")
STANDALONE = ("--model-path", "fixture:tiny-llama", "--speculative-algorithm", "STANDALONE",
              "--speculative-draft-model-path", "fixture:tiny-llama-bigram")
NGRAM = ("--model-path", "fixture:tiny-llama", "--speculative-algorithm", "NGRAM")
DSPARK = ("--model-path", "fixture:tiny-llama-bigram", "--speculative-algorithm", "DSPARK",
          "--speculative-draft-model-path", "fixture:tiny-dspark-noisy")
DFLASH = ("--model-path", "fixture:tiny-llama-bigram", "--speculative-algorithm", "DFLASH",
          "--speculative-draft-model-path", "fixture:tiny-dflash-noisy")
# Rule parameters loose enough for the tiny drafts to take exceptions under every rule, and a sampled
# floor low enough for the tiny target's flat distributions to relax nodes (tests/integration/test_sampled_serving.py).
ASD_FLAGS = ("--asd-margin", "2", "--asd-threshold", "1", "--asd-sampled-floor", "0.05")
SAMPLING_ENV = {"SGLANG_ASD_CPU_SAMPLING": "on"}


def tree(steps: int, topk: int, draft_tokens: int) -> tuple:
    return ("--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(draft_tokens))


def paged(page_size: int) -> tuple:
    return ("--page-size", str(page_size))


MIXED = ("--enable-mixed-chunk", "--chunked-prefill-size", "16")


@dataclasses.dataclass(frozen=True)
class Row:
    """One server configuration of the sweep."""

    name: str
    args: tuple
    block_drafter: bool = False  # DSPARK / DFLASH: sampled requests are served without the sampled rule
    mixed: bool = False  # mixed chunked prefill: marker scopes are refused there (a 400), a strict prefix served

    @property
    def id(self) -> str:
        return self.name


ROWS = [
    # EAGLE: the smallest verify (two draft tokens) on pages of 4 tokens; a tree whose topk is above the draft
    # width (the root keeps W - 1 of its topk children: the sampled verifier's sibling bound is min(topk, W - 1)),
    # the shipped tiny EAGLE config with its topk raised to 4; the largest tree. The smallest verify also mixes
    # prefill chunks with decode steps (SGLang keeps --enable-mixed-chunk for EAGLE).
    Row("eagle-chain-draft2-paged-mixed", EAGLE + tree(1, 1, 2) + paged(4) + MIXED, mixed=True),
    Row("eagle-tree-topk4-draft4", ("--config", str(CONFIG_DIR / "cpu_tiny_eagle.yaml"), *tree(3, 4, 4))),
    Row("eagle-tree-largest", EAGLE + tree(6, 8, 64)),
    # EAGLE3 and STANDALONE trees (their chains serve in the pool: tests/conftest.py), topk above the width.
    Row("eagle3-tree", EAGLE3 + tree(2, 3, 6)),
    Row("standalone-tree-topk3-draft3", STANDALONE + tree(2, 3, 3)),
    # NGRAM: SGLang's defaults (12 draft tokens, BFS breadth 10), and the smallest chain on pages.
    Row("ngram-default", NGRAM),
    Row("ngram-draft2-paged", NGRAM + ("--speculative-num-draft-tokens", "2",
                                       "--speculative-ngram-max-bfs-breadth", "1") + paged(4)),
    # Block drafters: the smallest block (DFLASH block 1: the anchor alone) and a paged block wider than the
    # draft was built for (DSPARK gamma 5 on pages of 4); the pool serves DSPARK block 3 and DFLASH block 4.
    Row("dspark-block5-paged", DSPARK + ("--speculative-dspark-block-size", "5") + paged(4), block_drafter=True),
    Row("dflash-block1", DFLASH + ("--speculative-num-draft-tokens", "1"), block_drafter=True),
]

# Configurations SGLang starts with but cannot serve (its warm-up or first request fails in the scheduler,
# stock or ASD): the launcher refuses each in one line naming the flag (``launch_server.check_draft_tree``,
# ``check_cpu_sampler``).
REFUSED = {
    "eagle-tree-steps-above-draft": (EAGLE + tree(2, 4, 2), "--speculative-num-draft-tokens 2 is below"),
    "eagle3-tree-draft-above-tree": (EAGLE3 + tree(1, 2, 4), "--speculative-num-draft-tokens 4 is more than"),
    "eagle-rejection-sampling": (EAGLE + tree(3, 1, 4) + ("--speculative-use-rejection-sampling",),
                                 "--speculative-use-rejection-sampling is not served on CPU"),
}

RULES = ("asd", "local", "margin", "threshold")
GREEDY_ONLY_RULES = ("fly", "fly-bounded")  # FLy serves greedy requests (a sampled one: test_fly_serving.py)
BUDGETS = (0, 8)
PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
MAX_NEW = 24
# The receipt's reasons for not applying, documented in docs/CONTRACTS.md ("Receipts").
NOT_APPLIED = {"strict", "sampling"}


@dataclasses.dataclass(frozen=True)
class Ask:
    """One request of a row's burst."""

    sampled: bool
    budget: float
    rule: str
    min_p: float = 0.0  # SGLang's min-p (its torch sampler asserts on min-p with seeds; the CPU seam serves it)

    def body(self, i: int) -> dict:
        # Sampled: temperature 0.1 relaxes nodes on the tiny target, 0.8 is a plain sampled request.
        temperature = 0.0 if not self.sampled else (0.1 if i % 2 else 0.8)
        params = {"temperature": temperature, "max_new_tokens": MAX_NEW, "ignore_eos": True,
                  "sampling_seed": 1000 + i, "asd_budget": self.budget, "asd_rule": self.rule}
        if self.min_p:
            params["min_p"] = self.min_p
        return {"text": PROMPTS[i % len(PROMPTS)], "sampling_params": params}


BURST = [Ask(sampled, budget, rule) for sampled in (False, True) for budget in BUDGETS
         for rule in RULES + (() if sampled else GREEDY_ONLY_RULES)]
BURST.append(Ask(True, 8, "asd", min_p=0.2))


def check_greedy(out: dict, ask: Ask) -> None:
    """A greedy receipt: applied at budget 8, strict at 0; events at their output positions, summing to
    spent; spent <= budget under asd (the rule with a ledger; the others bound each block, or count)."""
    r, ids = out["meta_info"]["asd"], out["output_ids"]
    assert r["rule"] == f"{ask.rule}-1"
    if ask.budget == 0:
        assert (r["applied"], r["reason"], r["spent"]) == (False, "strict", 0), r
        return
    assert r["applied"] is True and r["reason"] is None and r["budget"] == ask.budget, r
    assert r["exceptions"] == len(r["events"]) or r["events_truncated"]
    assert abs(sum(e["regret"] for e in r["events"]) - r["spent"]) < 1e-4
    positions = [e["pos"] for e in r["events"]]
    assert positions == sorted(set(positions)) and all(0 <= p < len(ids) for p in positions)
    for e in r["events"]:
        assert ids[e["pos"]] == e["draft"] != e["target"] and e["regret"] >= 0, e
    if ask.rule in ("asd", "fly-bounded"):  # the rules with a request ledger
        assert 0 <= r["spent"] <= ask.budget + 1e-6 and abs(r["remaining"] - (ask.budget - r["spent"])) < 1e-5


def check_sampled(out: dict, ask: Ask, row: Row) -> None:
    """A sampled receipt: the sampled rule's (whatever ``asd_rule`` says), applied at budget 8 where the
    sampled rule runs, with KL spent <= budget and events that match the output; else a documented reason."""
    r, ids = out["meta_info"]["asd"], out["output_ids"]
    assert r["rule"] == "asd-sampled-1", r
    if not r["applied"]:
        # A block drafter has no sampled seam: "sampling" at any budget, said first; elsewhere budget 0 is strict.
        want = "sampling" if row.block_drafter else "strict" if ask.budget == 0 else None
        assert r["reason"] == want and r["reason"] in NOT_APPLIED and r["spent"] == 0, r
        return
    assert ask.budget > 0 and not row.block_drafter and r["reason"] is None, r
    assert 0 <= r["spent"] <= ask.budget and abs(r["remaining"] - (ask.budget - r["spent"])) < 1e-5
    assert r["relaxed"] == len(r["events"]) or r["events_truncated"]
    assert abs(sum(e["charge"] for e in r["events"]) - r["spent"]) < 1e-5
    positions = [e["pos"] for e in r["events"]]
    assert positions == sorted(set(positions)) and all(0 <= p < len(ids) for p in positions)
    for e in r["events"]:
        assert 0 < e["q"] < e["a"] <= 1 and (ids[e["pos"]] == e["token"]) == e["accepted"], e


def check_mixed_scopes(server: Server) -> None:
    """On a server that mixes prefill and decode steps, a scope with markers is a 400 naming the field
    (those steps decode where a marker goes unseen: ``state/scope_vocab.py``); a strict prefix is served."""
    body = {"text": PROMPTS[0], "sampling_params": {"temperature": 0, "max_new_tokens": 8}, "asd_budget": 8}
    for field, value in (("asd_strict_spans", ["tool_call"]), ("asd_scope", "reasoning")):
        r = requests.post(server.url + "/generate", json={**body, field: value}, timeout=60)
        assert r.status_code == 400 and f"{field}=" in r.text and "without mixed chunked prefill" in r.text, r.text
    r = requests.post(server.url + "/generate", json={**body, "asd_strict_prefix": 4}, timeout=120)
    assert r.status_code == 200 and r.json()["meta_info"]["asd"]["scope"]["strict_prefix"] == 4, r.text


class Sweep:
    """The sweep's servers: the next row's starts while the current row is tested."""

    def __init__(self):
        self.started: dict[str, Server] = {}

    def start(self, row: Row) -> None:
        if row.name not in self.started:
            self.started[row.name] = Server(f"sweep-{row.name}", [*row.args, *ASD_FLAGS], wait=False,
                                            env=SAMPLING_ENV)

    def server(self, row: Row) -> Server:
        self.start(row)
        following = ROWS.index(row) + 1
        if following < len(ROWS):
            self.start(ROWS[following])
        return self.started[row.name]

    def stop(self, row: Row) -> Optional[int]:
        server = self.started.pop(row.name, None)
        return None if server is None else server.stop()

    def stop_all(self) -> None:
        for name in list(self.started):
            self.started.pop(name).stop()


@pytest.fixture(scope="module")
def sweep():
    s = Sweep()
    yield s
    s.stop_all()


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_every_request_is_served_with_a_receipt_that_holds(sweep, row):
    server = sweep.server(row)
    try:
        server.ready()
        with cf.ThreadPoolExecutor(len(BURST)) as pool:
            answers = list(pool.map(lambda job: requests.post(server.url + "/generate", json=job[1].body(job[0]),
                                                              timeout=300), enumerate(BURST)))
        for ask, answer in zip(BURST, answers):
            assert answer.status_code == 200, (ask, answer.text, server.tail())
            out = answer.json()
            assert len(out["output_ids"]) == MAX_NEW, (ask, out["meta_info"])
            if ask.sampled:
                check_sampled(out, ask, row)
            else:
                check_greedy(out, ask)
        if row.mixed:
            check_mixed_scopes(server)
        assert requests.get(server.url + "/health_generate", timeout=60).status_code == 200, server.tail()
    finally:
        code = sweep.stop(row)
    assert code == 0, f"the server did not shut down cleanly (exit status {code}):\n{server.tail()}"


@pytest.fixture(scope="module")
def refusals():
    """The launchers of every refused configuration, started side by side (each exits after its checks)."""
    launched = {name: subprocess.Popen([sys.executable, "-m", "sglang_asd.launch_server", *args, *ASD_FLAGS],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                       env={**os.environ, **SAMPLING_ENV})
                for name, (args, _) in REFUSED.items()}
    yield launched
    for proc in launched.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_configuration_sglang_cannot_serve_is_refused_in_one_line(refusals, name):
    _, stderr = refusals[name].communicate(timeout=300)
    assert refusals[name].returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and REFUSED[name][1] in lines[0], stderr[-3000:]
