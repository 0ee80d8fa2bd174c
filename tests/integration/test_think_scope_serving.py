"""Scopes on a tokenizer with think and tool-call markers: ``asd_scope: "reasoning"`` on a server
started with ``--reasoning-parser auto`` (SGLang detects qwen3 from the chat template), and the
``tool_call`` span preset. One ASD server:
``tiny-llama-think`` + its noisy EAGLE head (``sglang_asd/fixtures/tiny_think.py``), with SGLang's
overlap scheduler (``tests/cpu_overlap.py``), so batch N+1 is scheduled before batch N's commit is
processed on the host.

The target's greedy text passes ``<think> .. </think> .. <tool_call> .. </tool_call>`` at known
places of its orbit (the stamp's ``chain``), and the draft predicts each marker from the token
before it and misses right after it. Every receipt event is checked against the pure scope rule
(``policy.scope``) replayed over the request's prompt and output ids, with the markers' ids from
the fixture (the server takes them from SGLang's reasoning parser).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools

import pytest
import requests

from sglang_asd.policy.scope import ReasoningMarkers, Scope, resolve, single_token_id
from tests.server_utils import metric

pytestmark = [pytest.mark.server, pytest.mark.server_group("think")]

BUDGET = 64.0
THINK, THINK_END, TOOL_CALL, TOOL_CALL_END = "<think>", "</think>", "<tool_call>", "</tool_call>"


@functools.lru_cache(maxsize=1)
def fixture() -> tuple:
    """(tokenizer, stamp) of tiny-llama-think."""
    from transformers import AutoTokenizer

    from sglang_asd.fixtures import fixture_path, info

    tok = AutoTokenizer.from_pretrained(str(fixture_path("tiny-llama-think")))
    return tok, info("tiny-llama-think")


def marker(name: str) -> int:
    return fixture()[1]["marker_ids"][name]


def offset_of(name: str) -> int:
    return fixture()[1]["layout"][name]


def prompt(offset: int, think: bool = True) -> list[int]:
    """Prompt ids whose greedy continuation starts at chain ``offset`` (from ``<think>``): the four
    chain tokens before it, from before ``<think>`` if ``think`` (so a prompt past it opens the
    reasoning span, as a template that opens ``<think>`` does)."""
    tok, stamp = fixture()
    chain, first = stamp["chain"], stamp["chain_from"]
    start = (min(offset, 0) if think else offset) - 4
    return [tok.bos_token_id] + chain[start - first:offset - first]


def markers_of(scope: Scope):
    tok, _ = fixture()
    return resolve(scope, single_token_id(tok), ReasoningMarkers(start=marker(THINK), end=marker(THINK_END)))


def scope_of(params: dict) -> Scope:
    return Scope().tightened(strict_prefix=params.get("asd_strict_prefix"), scope=params.get("asd_scope"),
                             strict_spans=params.get("asd_strict_spans"))


def generate(server, input_ids, **params) -> dict:
    body = {"input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": 32, "ignore_eos": True,
                                                        **params}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def disallowed(out: dict, prompt_ids: list[int], scope: Scope) -> list:
    """The receipt events of ``out`` at positions ``scope`` forbids (replayed over prompt + output). A
    sampled row's event is a relaxed node, committed or not (``accepted``)."""
    m = markers_of(scope)
    receipt = out["meta_info"]["asd"]
    output = out["output_ids"]
    bad = []
    for e in receipt["events"]:
        token, target = (e["draft"], e["target"]) if "draft" in e else (e["token"], -1)  # greedy / sampled event
        assert output[e["pos"]] == token or not e.get("accepted", True)
        if not m.allowed(m.state_after(prompt_ids + output[:e["pos"]]), e["pos"], token, target):
            bad.append(e)
    return bad


@pytest.fixture(scope="module")
def server(servers):
    return servers.get("think", overlap=True)


# (scope fields, the marker drafted mid-block, whether the prompt holds <think>, whether the position right
# behind the marker may relax)
SWITCHES = {
    "</think> closes the reasoning span": ({"asd_scope": "reasoning"}, THINK_END, True, False),
    "<tool_call> opens a strict span": ({"asd_strict_spans": ["tool_call"]}, TOOL_CALL, True, False),
    "<think> opens the reasoning span": ({"asd_scope": "reasoning"}, THINK, False, True),
    "</tool_call> closes a strict span": ({"asd_strict_spans": ["tool_call"]}, TOOL_CALL_END, True, True),
}


@pytest.mark.parametrize("case", list(SWITCHES))
def test_a_marker_mid_block_switches_the_scope_in_the_same_round(server, case):
    """The prompt ends two tokens before the marker: the prefill's token is the one before it, and
    the first round drafts the marker (exact) and, right behind it, a near miss that the unscoped
    rule takes as an exception. That position's scope is the one the marker just set."""
    fields, name, think, relaxed = SWITCHES[case]
    ids = prompt(offset_of(name) - 1, think=think)
    unscoped = generate(server, ids, asd_budget=BUDGET, max_new_tokens=8)
    assert unscoped["output_ids"][1] == marker(name)
    assert [e["pos"] for e in unscoped["meta_info"]["asd"]["events"]][:1] == [2], unscoped["meta_info"]["asd"]
    scoped = generate(server, ids, asd_budget=BUDGET, max_new_tokens=8, **fields)
    assert scoped["output_ids"][1] == marker(name)
    assert not disallowed(scoped, ids, scope_of(fields))
    first = scoped["meta_info"]["asd"]["events"][:1]
    if relaxed:
        assert first == unscoped["meta_info"]["asd"]["events"][:1]
        assert scoped["output_ids"][:3] == unscoped["output_ids"][:3]
    else:
        assert first == [] or first[0]["pos"] > 2
        assert scoped["output_ids"][2] != unscoped["output_ids"][2]
        assert scoped["meta_info"]["asd"]["scope"]["skipped"] >= 1


def _jobs(n: int = 48) -> list:
    """Mixed requests: prompts starting anywhere from before <think> to past </tool_call>, with and
    without <think> in the prompt; greedy with small and large budgets, and sampled; several scopes."""
    scopes = [{"asd_scope": "reasoning"}, {"asd_strict_spans": ["tool_call"]},
              {"asd_scope": "reasoning", "asd_strict_spans": ["tool_call"], "asd_strict_prefix": 2}, {}]
    jobs = []
    for i in range(n):
        offset = -6 + (i * 7) % 34
        params = {"asd_budget": (0.5, 2.0, BUDGET)[i % 3], "max_new_tokens": 16 + i % 24, **scopes[i % len(scopes)]}
        if i % 5 == 4:
            params.update(temperature=0.1, sampling_seed=i, asd_budget=8.0)
        jobs.append((prompt(offset, think=i % 2 == 0), params))
    return jobs


@pytest.fixture(scope="module")
def churn(server) -> list:
    """(prompt ids, params, output) of the mixed requests, sent 12 at a time; the skipped-node metric's rise."""
    jobs = _jobs()
    before = metric(server, "sglang:asd_scope_skipped_total")
    with cf.ThreadPoolExecutor(12) as pool:
        outs = list(pool.map(lambda job: generate(server, job[0], **job[1]), jobs))
    return [(ids, params, out) for (ids, params), out in zip(jobs, outs)], \
        metric(server, "sglang:asd_scope_skipped_total") - before


def _after(output: list[int], name: str) -> int:
    """Output positions after the first ``name`` in ``output`` (0 if it has none)."""
    return len(output) - output.index(marker(name)) - 1 if marker(name) in output else 0


def test_reasoning_scope_relaxes_only_inside_the_think_span_under_churn(churn):
    results, _ = churn
    reasoning = [(ids, p, out) for ids, p, out in results if p.get("asd_scope") == "reasoning"]
    for ids, params, out in reasoning:
        assert out["meta_info"]["asd"]["scope"]["scope"] == "reasoning"
        assert not disallowed(out, ids, scope_of(params)), params
    events = [e for _, _, out in reasoning for e in out["meta_info"]["asd"]["events"]]
    assert events, "no exception inside the span: the check above would hold vacuously"
    assert sum(out["meta_info"]["asd"]["scope"]["skipped"] for _, _, out in reasoning) > 0
    assert sum(_after(out["output_ids"], THINK_END) for _, _, out in reasoning) >= 20, "few positions past </think>"


def test_tool_call_preset_keeps_the_tool_call_strict_under_churn(churn):
    results, _ = churn
    spans = [(ids, p, out) for ids, p, out in results if p.get("asd_strict_spans")]
    for ids, params, out in spans:
        assert out["meta_info"]["asd"]["scope"]["strict_spans"] == [[TOOL_CALL, TOOL_CALL_END]]
        assert not disallowed(out, ids, scope_of(params)), params
    tool_call = markers_of(Scope(strict_spans=((TOOL_CALL, TOOL_CALL_END),)))
    inside = sum(1 for ids, _, out in spans for pos in range(len(out["output_ids"]))
                 if tool_call.state_after(ids + out["output_ids"][:pos]) & tool_call.forbid)
    assert inside >= 20, "few positions inside a tool call"
    assert sum(len(out["meta_info"]["asd"]["events"]) for _, _, out in spans) > 0
    assert sum(out["meta_info"]["asd"]["scope"]["skipped"] for _, _, out in spans) > 0


def test_unscoped_requests_beside_scoped_ones_and_the_skipped_metric(churn):
    results, rise = churn
    for ids, params, out in results:
        if not params.get("asd_scope") and not params.get("asd_strict_spans"):
            assert out["meta_info"]["asd"]["scope"]["skipped"] == 0
    assert rise == sum(out["meta_info"]["asd"]["scope"]["skipped"] for _, _, out in results) > 0
    sampled = [out for _, params, out in results if params.get("temperature") and not scope_of(params).unscoped]
    assert sampled and all(out["meta_info"]["asd"]["rule"] == "asd-sampled-1" for out in sampled)
    assert sum(out["meta_info"]["asd"]["scope"]["skipped"] for out in sampled) > 0, "sampled rows count theirs too"


def test_scope_all_is_the_unscoped_output_token_for_token(server):
    for offset, budget in [(-3, BUDGET), (2, BUDGET), (10, 2.0), (18, BUDGET)]:
        ids = prompt(offset)
        plain = generate(server, ids, asd_budget=budget)
        same = generate(server, ids, asd_budget=budget, asd_strict_prefix=0, asd_scope="all", asd_strict_spans=[])
        assert same["output_ids"] == plain["output_ids"]
        assert [(e["pos"], e["draft"], e["target"]) for e in same["meta_info"]["asd"]["events"]] == \
            [(e["pos"], e["draft"], e["target"]) for e in plain["meta_info"]["asd"]["events"]]
