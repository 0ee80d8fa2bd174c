"""STANDALONE with the draft equal to the target accepts every draft token, and stays greedy.

On ``tiny-llama`` (random attention: every prediction depends on the whole context) the draft
only proposes what the target will verify if its KV cache holds exactly the target's tokens,
so full acceptance checks ``sglang_seams/scheduler/standalone_draft.py`` end to end: the prefill
draft-extend, the root forward and the draft-extend after each verify (24 new tokens = 6 rounds),
radix-cache hits (the second identical request, and a prompt that leaves a cached prefix right
where an earlier one continued), chunked batches of several requests. Page size 1, radix cache on.
"""

import pytest
import requests

from tests.conftest import CONFIGS

pytestmark = pytest.mark.server

MAX_NEW = 24  # a multiple of num_steps + 1: the last round is not cut short


def _full_accept_length() -> float:
    args = CONFIGS["standalone_self"]
    return float(int(args[args.index("--speculative-num-steps") + 1]) + 1)


# "1, 2, 3, 4, 5, 6" and "1, 2, 3, 9" share a cached prefix that the first one continued differently.
PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away",
           "1, 2, 3, 4, 5, 6", "1, 2, 3, 9"]


@pytest.fixture(scope="module")
def plain_outputs(servers):
    server = servers.get("plain", stock=True)
    return [server.generate(p, max_new_tokens=MAX_NEW, ignore_eos=True)["output_ids"] for p in PROMPTS]


@pytest.fixture(scope="module")
def server(servers, plain_outputs):  # plain first: the pool keeps one configuration alive at a time
    return servers.get("standalone_self")


def _check(out: dict, expected_ids: list[int], label: str) -> None:
    meta = out["meta_info"]
    assert out["output_ids"] == expected_ids, f"{label}: speculative greedy must equal plain greedy"
    assert meta["spec_accept_length"] == pytest.approx(_full_accept_length()), (
        f"{label}: a draft equal to the target must accept every token, got accept length "
        f"{meta['spec_accept_length']} over {meta['spec_verify_ct']} rounds"
    )


def test_self_draft_accepts_everything_one_by_one(server, plain_outputs):
    for prompt, expected in zip(PROMPTS, plain_outputs):
        _check(server.generate(prompt, max_new_tokens=MAX_NEW, ignore_eos=True), expected, repr(prompt))


def test_self_draft_accepts_everything_on_a_prefix_cache_hit(server, plain_outputs):
    first = server.generate(PROMPTS[0], max_new_tokens=MAX_NEW, ignore_eos=True)
    again = server.generate(PROMPTS[0], max_new_tokens=MAX_NEW, ignore_eos=True)
    assert again["meta_info"]["cached_tokens"] > 0, "the second identical request must hit the radix cache"
    _check(first, plain_outputs[0], "first request")
    _check(again, plain_outputs[0], "prefix-cache hit")


def test_self_draft_accepts_everything_in_a_batch(server, plain_outputs):
    body = {"text": PROMPTS, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    for prompt, out, expected in zip(PROMPTS, r.json(), plain_outputs):
        _check(out, expected, f"batched {prompt!r}")
