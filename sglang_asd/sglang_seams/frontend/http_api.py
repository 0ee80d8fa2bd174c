"""The HTTP side of ASD: the request fields and the receipts in responses (launcher process).

Request fields ``asd_budget``, ``asd_rule``, ``asd_gate``, ``asd_max_exceptions_per_block``,
``asd_margin``, ``asd_threshold``, fly's ``asd_fly_entropy_threshold``, ``asd_fly_entropy_top_k``,
``asd_fly_window_size``, the accrual's ``asd_budget_per_token`` and ``asd_budget_burst``, the sampled
rule's ``asd_sampled_floor``, ``asd_sampled_power``, ``asd_sampled_max_relaxed_per_block`` and the
scope's ``asd_strict_prefix``, ``asd_scope``, ``asd_strict_spans`` (docs/CONTRACTS.md):
- native ``/generate``: top level, where it applies to every ``sampling_params`` of the request (each
  of a batch's list; one is created when none is given), or inside ``sampling_params`` (an object or
  a list of them), directly or in its ``custom_params``. The top level is the form that works
  everywhere: SGLang's ``bench_serving --extra-request-body`` puts its keys there, and SGLang's
  gateway (smg) forwards unknown top-level keys and ``sampling_params.custom_params`` but rebuilds
  the rest of ``sampling_params`` from the keys it knows. /generate has no top-level
  ``custom_params``: an ASD field there is refused, as SGLang would ignore it;
- ``/v1/completions``, ``/v1/chat/completions``: top level (what OpenAI clients send through
  ``extra_body``) or inside ``custom_params``.
A field given at two places must hold the same value there (compared as validated); two different
values are refused naming both places: ``asd_budget is given twice with different values: 8 (top
level) and 4 (sampling_params.asd_budget)``.

An ASGI middleware validates them and moves them into ``custom_params`` (the per-request
extension point of SGLang's ``SamplingParams``, which survives IPC to the scheduler) before
FastAPI parses the body. A bad value is answered with HTTP 400 naming the field and the value, in
SGLang's error shape for that route; nothing reaches the engine.

Receipts: ``TokenizerManager.update_request_meta_info`` (AROUND) sets ``meta_info["asd"]`` to the
request's latest receipt (SGLang would accumulate it as a list); the OpenAI response builders
(AROUND) add ``choices[i].asd`` and a top-level ``asd`` (choice 0); the OpenAI stream generators
(AROUND) add ``asd`` to the chunk that carries a choice's ``finish_reason``, taking it from the
outputs their own ``TokenizerManager.generate_request`` call yields (AROUND; it collects only for
a stream registered in ``_OPENAI_STREAMS``, for as long as that stream runs). Nothing is kept per
request in this process after its response is built.

Hook targets (all AROUND, frontend process): ``TokenizerManager.update_request_meta_info``,
``TokenizerManager.generate_request``, ``OpenAIServingCompletion._build_completion_response``,
``OpenAIServingChat._build_chat_response``, ``OpenAIServingCompletion._generate_completion_stream``,
``OpenAIServingChat._generate_chat_stream``; plus the middleware (checked at start-up).

Upstream: none. Per-request extension fields on the OpenAI request models and a response-side
extension dict would remove the middleware and the response hooks; proposed in patches/.
Removal: when SGLang forwards unknown ``extra_body`` fields into ``custom_params``.
Tested on: sglang 0.5.23.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

from sglang_asd.hooks.registry import Seam
from sglang_asd.policy.config import shown
from sglang_asd.sglang_seams.state.request_ledger import (
    BUDGET_KEY,
    BURST_KEY,
    CAP_KEY,
    FLY_THRESHOLD_KEY,
    FLY_TOP_K_KEY,
    FLY_WINDOW_KEY,
    GATE_KEY,
    MARGIN_KEY,
    PER_TOKEN_KEY,
    REQUEST_KEYS,
    RULE_KEY,
    SAMPLED_CAP_KEY,
    SAMPLED_FLOOR_KEY,
    SAMPLED_POWER_KEY,
    SCOPE_KEY,
    STRICT_PREFIX_KEY,
    STRICT_SPANS_KEY,
    THRESHOLD_KEY,
    RequestASD,
)
from sglang_asd.policy.scope import validate_spans
from sglang_asd.sglang_seams.state.scope_vocab import launcher_vocab
from sglang_asd.server_settings import ASDServerSettings

RECEIPT_KEY = "asd"
GENERATE_ROUTES = ("/generate",)
OPENAI_ROUTES = ("/v1/completions", "/v1/chat/completions")

UPDATE_META = "sglang.srt.managers.tokenizer_manager.TokenizerManager.update_request_meta_info"
GENERATE_REQUEST = "sglang.srt.managers.tokenizer_manager.TokenizerManager.generate_request"
BUILD_COMPLETION = "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._build_completion_response"
BUILD_CHAT = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._build_chat_response"
STREAM_COMPLETION = "sglang.srt.entrypoints.openai.serving_completions.OpenAIServingCompletion._generate_completion_stream"
STREAM_CHAT = "sglang.srt.entrypoints.openai.serving_chat.OpenAIServingChat._generate_chat_stream"
PRELOAD = (
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.entrypoints.openai.serving_completions",
    "sglang.srt.entrypoints.openai.serving_chat",
    "sglang.srt.entrypoints.http_server",
)

_SETTINGS = ASDServerSettings()


def configure(settings: ASDServerSettings) -> None:
    global _SETTINGS
    _SETTINGS = settings


# ---------------------------------------------------------------- request validation


def validate_fields(fields: dict, settings: ASDServerSettings) -> dict:
    """Validated ASD fields of one request; raises ValueError with a user-facing message.

    The same validation as the scheduler's (``RequestASD.from_custom_params``): the budget within
    the server's maximum, the rule among the server's allowed rules, each parameter no looser than
    the server's and one that the chosen rule reads; the scope no looser than the server's, its
    markers single tokens of the served tokenizer and ``asd_scope='reasoning'`` only on a server
    with a reasoning parser (``state/scope_vocab.py``)."""
    given = {k: v for k, v in fields.items() if k in REQUEST_KEYS and v is not None}
    choice = RequestASD.from_custom_params(given, settings)
    if not choice.scope.unscoped and any(k in given for k in (SCOPE_KEY, STRICT_SPANS_KEY)):
        vocab = launcher_vocab()
        if vocab is not None:
            vocab.markers(choice.scope)
    config = choice.config
    validated = {BUDGET_KEY: choice.budget, RULE_KEY: config.rule, GATE_KEY: config.gate,
                 CAP_KEY: config.max_exceptions_per_block, MARGIN_KEY: config.margin, THRESHOLD_KEY: config.threshold,
                 FLY_THRESHOLD_KEY: config.fly_entropy_threshold, FLY_TOP_K_KEY: config.fly_entropy_top_k,
                 FLY_WINDOW_KEY: config.fly_window_size,
                 SAMPLED_FLOOR_KEY: choice.sampled.floor, SAMPLED_POWER_KEY: choice.sampled.power,
                 SAMPLED_CAP_KEY: choice.sampled.max_relaxed_per_block, PER_TOKEN_KEY: choice.rate,
                 BURST_KEY: choice.burst,
                 STRICT_PREFIX_KEY: choice.scope.strict_prefix, SCOPE_KEY: choice.scope.scope,
                 STRICT_SPANS_KEY: [list(p) for p in validate_spans(given.get(STRICT_SPANS_KEY, []))]}
    return {k: validated[k] for k in given}


TOP_LEVEL = "top level"


def _pop_fields(source: dict) -> dict:
    """Pop the ASD fields from ``source``; a null one is "not given" and is dropped."""
    popped = {k: source.pop(k) for k in REQUEST_KEYS if k in source}
    return {k: v for k, v in popped.items() if v is not None}


def _merge(places: list[tuple[Optional[str], dict]], settings: ASDServerSettings) -> dict:
    """The validated ASD fields given at ``places``: ``(prefix, fields)``, where a field named ``k``
    sits at ``prefix + k`` (prefix None: the body's top level).

    The same field may be given at several places with the same value, compared as validated (8 and
    8.0 agree; ``true`` and 1 do not: ``true`` is refused); two different values are refused naming
    both places: ``asd_budget is given twice with different values: 8 (top level) and 4
    (sampling_params.asd_budget)``. A bad value is refused as such, naming the field."""
    kept: dict[str, tuple[Any, Optional[str]]] = {}
    for prefix, fields in places:
        for k, v in fields.items():
            kept.setdefault(k, (v, prefix))
    merged = {k: v for k, (v, _) in kept.items()}
    for prefix, fields in places:
        for k, v in fields.items():
            first, first_prefix = kept[k]
            if prefix != first_prefix and _validated(k, v, merged, settings) != _validated(k, first, merged, settings):
                raise ValueError(f"{k} is given twice with different values: {shown(first)} ({_where(first_prefix, k)}) "
                                 f"and {shown(v)} ({_where(prefix, k)})")
    return validate_fields(merged, settings)


def _validated(key: str, value: Any, merged: dict, settings: ASDServerSettings) -> Any:
    """``value`` of ``key`` as validated, under the request's rule (which decides the parameters it
    reads) and, for a burst, its rate (a burst needs one)."""
    depends_on = (RULE_KEY, PER_TOKEN_KEY) if key == BURST_KEY else (RULE_KEY,)
    context = {k: merged[k] for k in depends_on if k != key and k in merged}
    return validate_fields({**context, key: value}, settings)[key]


def _where(prefix: Optional[str], key: str) -> str:
    return TOP_LEVEL if prefix is None else prefix + key


def _move_into_custom_params(holder: dict, places: list[tuple[Optional[str], dict]], custom_prefix: str,
                             settings: ASDServerSettings) -> None:
    """Merge the ASD fields of ``places`` and of ``holder["custom_params"]`` (at ``custom_prefix``),
    validated, into ``holder["custom_params"]``."""
    custom = holder.get("custom_params")
    if custom is not None and not isinstance(custom, dict):
        raise ValueError(f"{custom_prefix.rstrip('.')} must be an object, got {shown(custom)}")
    nested = {k: custom[k] for k in REQUEST_KEYS if custom and custom.get(k) is not None}
    merged = _merge([*places, (custom_prefix, nested)], settings)
    if merged:
        holder["custom_params"] = {**(custom or {}), **merged}


def _refuse_top_level_custom_params(body: dict) -> None:
    """/generate has no top-level ``custom_params`` (SGLang's ``GenerateReqInput`` ignores one, and a
    gateway forwards it): an ASD field there would have no effect, so it is refused."""
    custom = body.get("custom_params")
    for k in REQUEST_KEYS:
        if isinstance(custom, dict) and custom.get(k) is not None:
            raise ValueError(f"custom_params is not a /generate field: send {k} at the top level or in "
                             f"sampling_params, got custom_params.{k}={shown(custom[k])}")


def _rewrite_generate(body: dict, settings: ASDServerSettings) -> None:
    """A top-level field applies to every ``sampling_params`` of the request (a batch: each of the list;
    none given: a new one); each also reads its own fields and its ``custom_params``."""
    _refuse_top_level_custom_params(body)
    top = _pop_fields(body)
    params = body.get("sampling_params")
    if params is None and top:
        params = body["sampling_params"] = {}
    listed = isinstance(params, list)
    holders = [(f"sampling_params[{i}]." if listed else "sampling_params.", p)
               for i, p in enumerate(params if listed else [params]) if isinstance(p, dict)]
    if top and not holders:  # an empty list, or a malformed one SGLang refuses: the top level is still validated
        _merge([(None, top)], settings)
    for prefix, p in holders:
        _move_into_custom_params(p, [(None, top), (prefix, _pop_fields(p))], prefix + "custom_params.", settings)


def rewrite_body(path: str, body: Any, settings: ASDServerSettings) -> Any:
    """Move and validate the ASD fields of a request body in place; raises ValueError."""
    if not isinstance(body, dict):
        return body
    if path in GENERATE_ROUTES:
        _rewrite_generate(body, settings)
    else:
        _move_into_custom_params(body, [(None, _pop_fields(body))], "custom_params.", settings)
    return body


def _error_body(path: str, message: str) -> bytes:
    if path in GENERATE_ROUTES:
        return json.dumps({"error": message}).encode()
    return json.dumps(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    ).encode()


class _Digits(str):
    """An integer literal too long for ``int()`` (Python's limit on digits converted from text)."""

    def __repr__(self) -> str:
        return f"an integer of {len(self.lstrip('-'))} digits"


def _long_integer_refusal(path: str, raw: bytes) -> Optional[str]:
    """The 400 message for a body whose ASD field is an integer literal Python will not parse, else None.

    ``json.loads`` refuses the whole body then; parsed again with such literals kept as text, the ASD
    fields are validated as usual and refused as "not a number", naming the field; a long literal in
    any other field is SGLang's to answer."""
    try:
        body = json.loads(raw, parse_int=_int_or_digits)
    except ValueError:
        return None
    try:
        rewrite_body(path, body, _SETTINGS)
    except ValueError as e:
        return str(e)
    return None


def _int_or_digits(text: str):
    limit = sys.get_int_max_str_digits()
    return _Digits(text) if limit and len(text.lstrip("-")) > limit else int(text)


async def _send_400(send, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


class ASDRequestMiddleware:
    """Pure ASGI middleware (no response buffering, streaming unaffected)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT") or path not in GENERATE_ROUTES + OPENAI_ROUTES:
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None  # not JSON (or an integer literal Python will not parse): SGLang answers as always,
            refusal = _long_integer_refusal(path, raw)  # unless an ASD field holds that integer
            if refusal is not None:
                return await _send_400(send, _error_body(path, refusal))
        if body is not None:
            try:
                raw = json.dumps(rewrite_body(path, body, _SETTINGS)).encode()
            except ValueError as e:
                return await _send_400(send, _error_body(path, str(e)))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(raw)).encode()))
        scope = dict(scope, headers=headers)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def add_middleware() -> None:
    from sglang.srt.entrypoints.http_server import app

    if not middleware_installed():
        app.add_middleware(ASDRequestMiddleware)


def middleware_installed() -> bool:
    from sglang.srt.entrypoints.http_server import app

    return any(m.cls is ASDRequestMiddleware for m in app.user_middleware)


# ---------------------------------------------------------------- receipts


def update_request_meta_info_around(original, self, meta_info, state, customized_info, index, finish_reason):
    if RECEIPT_KEY in customized_info:
        customized_info = dict(customized_info)
        values = customized_info.pop(RECEIPT_KEY)[index]
        if values:
            meta_info[RECEIPT_KEY] = values[-1]
    return original(self, meta_info, state, customized_info, index, finish_reason)


# OpenAI streams that are being generated now: id(adapted_request) -> {request id: latest receipt}.
# An entry lives exactly as long as its stream generator; nothing else is kept in this process.
_OPENAI_STREAMS: dict[int, dict] = {}


async def generate_request_around(original, self, obj, *args, **kwargs):
    """Collect the receipts of an OpenAI stream's outputs as they pass (other callers: untouched)."""
    receipts = _OPENAI_STREAMS.get(id(obj))
    async for content in original(self, obj, *args, **kwargs):
        if receipts is not None and isinstance(content, dict):
            meta = content.get("meta_info") or {}
            if meta.get(RECEIPT_KEY) is not None:
                receipts[meta.get("id")] = meta[RECEIPT_KEY]
        yield content


def _with_receipts(response, ret: list):
    from fastapi.responses import Response

    receipts = [(item.get("meta_info") or {}).get(RECEIPT_KEY) for item in ret]
    if not any(r is not None for r in receipts):
        return response
    data = json.loads(response.model_dump_json(by_alias=True))
    for choice, receipt in zip(data.get("choices", []), receipts):
        choice[RECEIPT_KEY] = receipt
    data[RECEIPT_KEY] = receipts[0]
    return Response(content=json.dumps(data), media_type="application/json")


def build_response_around(original, self, request, ret, *args, **kwargs):
    return _with_receipts(original(self, request, ret, *args, **kwargs), ret)


async def streaming_around(original, self, adapted_request, *args, **kwargs):
    key = id(adapted_request)
    receipts = _OPENAI_STREAMS.setdefault(key, {})
    try:
        async for chunk in original(self, adapted_request, *args, **kwargs):
            yield _stream_chunk_with_receipt(chunk, receipts)
    finally:
        _OPENAI_STREAMS.pop(key, None)


def _stream_chunk_with_receipt(chunk, receipts: dict):
    if not isinstance(chunk, str) or not chunk.startswith("data: {") or '"finish_reason"' not in chunk:
        return chunk
    try:
        data = json.loads(chunk[len("data: "):])
    except ValueError:
        return chunk
    changed = False
    for choice in data.get("choices") or []:
        if choice.get("finish_reason") is not None:
            receipt = receipts.pop(data.get("id"), None)
            if receipt is not None:
                choice[RECEIPT_KEY] = receipt
                changed = True
    return f"data: {json.dumps(data)}\n\n" if changed else chunk


def hooks() -> list:
    add_middleware()
    return [
        (UPDATE_META, update_request_meta_info_around),
        (GENERATE_REQUEST, generate_request_around),
        (BUILD_COMPLETION, build_response_around),
        (BUILD_CHAT, build_response_around),
        (STREAM_COMPLETION, streaming_around),
        (STREAM_CHAT, streaming_around),
    ]


SEAMS = (Seam("launcher", hooks, preload=PRELOAD),)
