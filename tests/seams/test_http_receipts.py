"""Receipts in the HTTP process (``sglang_seams/frontend/http_api.py``): nothing is kept per request.

Drives the hooks as SGLang calls them (``TokenizerManager.generate_request`` inside the OpenAI
stream generators and inside ``/generate``), with stand-ins for what SGLang yields.
"""

import asyncio
import json

from sglang_asd.sglang_seams.frontend import http_api

RECEIPT = {"applied": True, "spent": 0.5}


def _content(rid, finished):
    """One output as TokenizerManager builds it: meta_info goes through update_request_meta_info."""
    meta = {"id": rid}
    finish = {"type": "length"} if finished else None
    http_api.update_request_meta_info_around(_sglang_update_meta, None, meta, None, {"asd": [[RECEIPT]]}, 0, finish)
    return {"text": "x", "meta_info": meta, "index": 0}


def _sglang_update_meta(self, meta_info, state, customized_info, index, finish_reason):
    meta_info["finish_reason"] = finish_reason
    for key, values in customized_info.items():
        meta_info[key] = values[index]


def _per_request_state():
    """Every non-empty dict, list or set held at module level by the HTTP seam."""
    return {k: v for k, v in vars(http_api).items()
            if not k.startswith("__") and isinstance(v, (dict, list, set)) and v}


async def _sglang_generate_request(self, obj, request=None):
    """What TokenizerManager.generate_request yields for one request: a few chunks, then the last."""
    for step in range(3):
        yield _content(obj["rid"], finished=step == 2)


def _generate_request(obj):
    return http_api.generate_request_around(_sglang_generate_request, None, obj)


async def _sglang_openai_stream(self, adapted_request, request=None, raw_request=None):
    """The shape of OpenAIServingChat._generate_chat_stream: iterate generate_request, emit SSE chunks."""
    async for content in _generate_request(adapted_request):
        finish = content["meta_info"]["finish_reason"]
        data = {"id": content["meta_info"]["id"],
                "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": finish and finish["type"]}]}
        yield f"data: {json.dumps(data)}\n\n"
    yield "data: [DONE]\n\n"


async def _drain(agen):
    return [x async for x in agen]


def test_generate_requests_leave_nothing_behind():
    async def many():
        for i in range(3000):
            outputs = await _drain(_generate_request({"rid": f"r{i}"}))
            assert outputs[-1]["meta_info"]["asd"] == RECEIPT
    asyncio.run(many())
    assert _per_request_state() == {}


def test_an_openai_stream_gets_its_receipt_in_the_finish_chunk_and_leaves_nothing_behind():
    chunks = asyncio.run(_drain(http_api.streaming_around(_sglang_openai_stream, None, {"rid": "s1"})))
    data = [json.loads(c[len("data: "):]) for c in chunks if c.startswith("data: {")]
    assert [("asd" in d["choices"][0]) for d in data] == [False, False, True]
    assert data[-1]["choices"][0]["asd"] == RECEIPT
    assert _per_request_state() == {}


def test_a_stream_closed_early_leaves_nothing_behind():
    async def first_then_close():
        agen = http_api.streaming_around(_sglang_openai_stream, None, {"rid": "s2"})
        await agen.__anext__()
        assert len(http_api._OPENAI_STREAMS) == 1
        await agen.aclose()  # the client went away
    asyncio.run(first_then_close())
    assert _per_request_state() == {}
