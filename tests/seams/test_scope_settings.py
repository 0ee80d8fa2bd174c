"""Scope fields and flags (``policy.scope``, ``server_settings``, ``state/scope_vocab.py``, the HTTP
layer): a request may only tighten the server's scope; markers resolve against the served
tokenizer; ``asd_scope='reasoning'`` takes its markers from SGLang's reasoning parser."""

from __future__ import annotations

import types

import pytest

from sglang_asd.policy.scope import ReasoningMarkers, Scope
from sglang_asd.server_settings import ASDServerSettings, split_argv
from sglang_asd.sglang_seams.frontend.http_api import rewrite_body
from sglang_asd.sglang_seams.state.request_ledger import RequestASD
from sglang_asd.sglang_seams.state.scope_vocab import ScopeVocab, mixes_decode


def test_server_flags_build_the_scope():
    settings, rest = split_argv(["--asd-strict-prefix", "4", "--asd-scope", "reasoning", "--asd-strict-spans",
                                 '["tool_call", ["(", ")"]]', "--model-path", "m"])
    assert rest == ["--model-path", "m"]
    assert settings.scope == Scope(4, "reasoning", (("<tool_call>", "</tool_call>"), ("(", ")")))
    assert split_argv(["--asd-strict-spans", "tool_call,code"])[0].scope.strict_spans == (
        ("<tool_call>", "</tool_call>"), ("```", "```"))
    assert split_argv([])[0].scope.unscoped
    with pytest.raises(ValueError, match="asd_strict_prefix must be an integer >= 0, got -2"):
        split_argv(["--asd-strict-prefix", "-2"])


def test_requests_may_only_tighten_the_servers_scope():
    settings = ASDServerSettings.from_mapping({"strict_prefix": 4, "strict_spans": "tool_call"})
    choice = RequestASD.from_custom_params({"asd_budget": 8, "asd_strict_prefix": 9, "asd_scope": "reasoning",
                                            "asd_strict_spans": [["(", ")"], "tool_call"]}, settings)
    assert choice.scope == Scope(9, "reasoning", (("<tool_call>", "</tool_call>"), ("(", ")")))
    assert RequestASD.from_custom_params({"asd_budget": 8}, settings).scope == settings.scope
    with pytest.raises(ValueError, match=r"asd_strict_prefix must be an integer >= 4 \(the server's --asd-strict-prefix\), got 3"):
        RequestASD.from_custom_params({"asd_strict_prefix": 3}, settings)
    reasoning = ASDServerSettings.from_mapping({"scope": "reasoning"})
    with pytest.raises(ValueError, match="asd_scope must be 'reasoning'"):
        RequestASD.from_custom_params({"asd_scope": "all"}, reasoning)


def test_http_layer_moves_scope_fields_into_custom_params():
    body = rewrite_body("/v1/completions", {"prompt": "x", "asd_budget": 8, "asd_strict_prefix": 3,
                                            "asd_strict_spans": ["tool_call"]}, ASDServerSettings())
    assert body["custom_params"] == {"asd_budget": 8.0, "asd_strict_prefix": 3,
                                     "asd_strict_spans": [["<tool_call>", "</tool_call>"]]}
    native = rewrite_body("/generate", {"text": "x", "asd_scope": "reasoning", "sampling_params": {}},
                          ASDServerSettings())
    assert native["sampling_params"]["custom_params"] == {"asd_scope": "reasoning"}
    with pytest.raises(ValueError, match="asd_scope must be one of"):
        rewrite_body("/generate", {"text": "x", "asd_scope": 1}, ASDServerSettings())


class _Tokenizer:
    """A tokenizer with a few single tokens (what ``single_token_id`` reads: ``encode``)."""

    VOCAB = {"<think>": 5, "</think>": 6, "<tool_call>": 7, "</tool_call>": 8}

    def encode(self, text, add_special_tokens=False):
        return [self.VOCAB[text]] if text in self.VOCAB else [ord(c) for c in text]


def test_a_server_that_mixes_decode_into_prefill_refuses_scopes_with_markers():
    """Mixed chunked prefill decodes running requests outside the verify step, where the device scope
    state does not see the token: a marker scope is refused naming the field and the value; a strict
    prefix (only undercounted there, so strict longer) is served."""
    mixed = ScopeVocab(_Tokenizer(), "qwen3", mixed_decode=True)
    with pytest.raises(ValueError, match=r"^asd_scope='reasoning' needs a server without mixed chunked prefill"):
        mixed.markers(Scope(scope="reasoning"))
    with pytest.raises(ValueError, match=r"^asd_strict_spans=\[\['<tool_call>', '</tool_call>'\]\] needs a server "
                                         r"without mixed chunked prefill"):
        mixed.markers(Scope(strict_spans=(("<tool_call>", "</tool_call>"),)))
    assert mixed.markers(Scope(strict_prefix=4)).strict_prefix == 4
    assert ScopeVocab(_Tokenizer(), "qwen3").markers(Scope(scope="reasoning")).require  # not mixing: served


@pytest.mark.parametrize("mixed_chunk,chunk,algorithm,mixes", [
    (True, 64, "EAGLE", True), (True, 64, "DFLASH", True), (True, None, "EAGLE", False), (True, -1, "EAGLE", False),
    (True, 0, "EAGLE", False), (False, 64, "EAGLE", False), (True, 64, "STANDALONE", False), (True, 64, "NGRAM", False),
    (True, 64, None, False)])
def test_mixing_is_read_as_sglang_resolves_it(mixed_chunk, chunk, algorithm, mixes):
    """The scheduler mixes only with chunked prefill on (``Scheduler.init_chunked_prefill``), and SGLang
    turns ``enable_mixed_chunk`` off at launch for the algorithms that cannot mix."""
    args = types.SimpleNamespace(enable_mixed_chunk=mixed_chunk, chunked_prefill_size=chunk,
                                 speculative_algorithm=algorithm)
    assert mixes_decode(args) is mixes


def test_reasoning_markers_come_from_sglangs_reasoning_parser():
    qwen3 = ScopeVocab(_Tokenizer(), "qwen3")
    assert qwen3.reasoning == ReasoningMarkers(start=5, end=6, starts_inside=False)
    assert ScopeVocab(_Tokenizer(), "qwen3-thinking").reasoning.starts_inside  # a template that opens the span
    assert ScopeVocab(_Tokenizer(), None).reasoning is None
    markers = qwen3.markers(Scope(strict_prefix=2, scope="reasoning", strict_spans=(("<tool_call>", "</tool_call>"),)))
    assert markers.state_after([1, 5, 2]) & markers.require
    assert markers.allowed(markers.state_after([5, 9]), 3, 10, 11)
    assert not markers.allowed(markers.state_after([5, 9, 6]), 3, 10, 11), "after </think>: strict"
    assert not markers.allowed(markers.state_after([5, 7]), 3, 10, 11), "inside a tool call: strict"
    assert not markers.allowed(markers.state_after([5]), 3, 6, 11), "a marker is never relaxed"
    assert not markers.allowed(markers.state_after([5]), 1, 10, 11), "inside the prefix: strict"
    with pytest.raises(ValueError, match="needs a server started with --reasoning-parser"):
        ScopeVocab(_Tokenizer(), None).markers(Scope(scope="reasoning"))
    with pytest.raises(ValueError, match="not a single token"):
        qwen3.markers(Scope(strict_spans=(("<answer>", "</answer>"),)))
