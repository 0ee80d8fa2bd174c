"""``bench.speed`` against a real NGRAM server: every pass starts from an empty n-gram corpus.

SGLang's NGRAM drafts from a corpus of every request the server has seen. A speed run sends the
same prompts in every pass, so without a reset a later pass drafts from the earlier passes'
outputs and accepts far more than the first (on the demo model: 1.8, 4.3, 6.4 tokens per round in
three strict passes). ``bench.speed`` flushes such a server before each pass.
"""

import json

import pytest

from sglang_asd.bench import speed

pytestmark = pytest.mark.server


def test_strict_passes_on_an_ngram_server_accept_alike(servers, tmp_path):
    server = servers.get("ngram")
    rc = speed.main(["--url", server.url, "--budgets", "0,8", "--num-prompts", "2", "--max-new-tokens", "32",
                     "--repeats", "2", "--out", str(tmp_path)])   # one round: strict, b8 per repeat
    assert rc == 0
    passes = [json.loads(line) for line in (tmp_path / "speed_passes.jsonl").read_text().splitlines()]
    strict = [p for p in passes if p.get("kind") == "pass" and p["arm"] == "strict"]
    assert len(strict) == 2 and all(p["fixed_work_ok"] for p in strict)
    # Budget 0 is strict greedy on a float32 model: with the corpus reset, both strict passes make the
    # same drafts and accept the same tokens; a corpus kept from the first pass raises the second.
    assert strict[0]["accept_length"] == strict[1]["accept_length"], [p["accept_length"] for p in strict]
