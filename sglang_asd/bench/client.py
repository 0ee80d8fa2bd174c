"""One client for every benchmark tool: build a request, send it, read the answer into a ``GenResult``.

Routes (``api``): ``generate`` (native ``/generate``, ASD fields in ``sampling_params.custom_params``,
the form that also passes SGLang's gateway, smg, which drops unknown ``sampling_params`` keys),
``completions`` (``/v1/completions``) and ``chat`` (``/v1/chat/completions``), ASD fields top level
as OpenAI clients send them through ``extra_body``. A request is greedy (temperature 0) unless it
says otherwise; a sampled one may carry a seed, sent as ``sampling_params.sampling_seed`` on
/generate and as ``seed`` on the OpenAI routes (SGLang 0.5.23's ``protocol.py`` maps it to
``sampling_seed``). ``top_p`` and the seed are sent only when set (1 and None send nothing), so a
greedy request's body is the same as before they existed. What is read back (names as in docs/CONTRACTS.md and SGLang 0.5.23):

- text, ``completion_tokens`` (``meta_info`` on /generate, ``usage`` on OpenAI routes);
- SGLang's speculative stats ``spec_verify_ct`` (verify rounds), ``spec_accept_length``
  (completion tokens per verify round, bonus included), ``spec_num_correct_drafts`` (from
  ``meta_info``; on OpenAI routes from ``sglext.spec_tokens_details``, which needs
  ``return_spec_tokens_details``). Absent when the server runs without speculative decoding;
- the ASD receipt (``meta_info["asd"]``; OpenAI: ``choices[0].asd`` or top-level ``asd``);
- timings measured here: ``latency_s`` (request sent -> last byte), and on streams ``ttft_s``
  (-> first chunk with output) and ``tpot_s`` = (latency - ttft) / (tokens - 1), the mean
  inter-token latency of that request.

``send`` takes any ``requests.Session``-like object, so the locust users (gevent) and the
thread-pool runners share this code.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Any, Iterator, Optional

APIS = ("generate", "completions", "chat")
PATHS = {"generate": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}
SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_num_correct_drafts", "spec_accept_rate")


@dataclasses.dataclass(frozen=True)
class GenRequest:
    text: str                          # raw prompt (generate, completions) / user message (chat)
    max_new_tokens: int
    budget: Optional[float] = None     # asd_budget; None = send nothing (server default applies)
    ignore_eos: bool = False           # True = fixed work: exactly max_new_tokens tokens
    stream: bool = False
    api: str = "generate"
    model: str = "default"             # OpenAI routes only
    tag: str = ""                      # caller's label (prompt id), copied into the result
    fields: Optional[dict] = None      # more ASD request fields (an arm's), e.g. {"asd_gate": 0.5}
    temperature: float = 0.0           # 0 = greedy
    top_p: float = 1.0
    seed: Optional[int] = None         # SGLang's sampling_seed; None = send none

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {APIS}, got {self.api!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        for key in self.fields or {}:
            if not key.startswith("asd_"):
                raise ValueError(f"fields may only hold asd_* request fields, got {key!r}")
        given = (self.fields or {}).get("asd_budget")
        if self.budget is not None and given is not None and float(given) != float(self.budget):
            raise ValueError(f"budget {self.budget} and fields asd_budget {given} disagree")

    def asd_fields(self) -> dict:
        """Every ASD field the request sends: ``asd_budget`` (from ``budget``) and ``fields``."""
        out = {} if self.budget is None else {"asd_budget": self.budget}
        out.update(self.fields or {})
        return out


@dataclasses.dataclass
class GenResult:
    tag: str
    api: str
    stream: bool
    budget: Optional[float]
    seed: Optional[int] = None           # the request's sampling_seed (None: none sent)
    ok: bool = False
    error: Optional[str] = None
    status: Optional[int] = None
    text: str = ""
    completion_tokens: Optional[int] = None
    prompt_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    latency_s: Optional[float] = None
    ttft_s: Optional[float] = None
    tpot_s: Optional[float] = None
    server_e2e_s: Optional[float] = None
    spec_verify_ct: Optional[int] = None
    spec_accept_length: Optional[float] = None
    spec_num_correct_drafts: Optional[int] = None
    spec_accept_rate: Optional[float] = None
    receipt: Optional[dict] = None
    start_time: Optional[float] = None   # wall clock (time.time()) when sent

    @property
    def spent(self) -> Optional[float]:
        return None if not self.receipt else self.receipt.get("spent")

    @property
    def asd_applied(self) -> Optional[bool]:
        return None if not self.receipt else self.receipt.get("applied")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def build_payload(req: GenRequest) -> tuple[str, dict]:
    """(path, JSON body) of one request."""
    if req.api == "generate":
        sampling: dict[str, Any] = {"temperature": req.temperature, "max_new_tokens": req.max_new_tokens,
                                    "ignore_eos": req.ignore_eos}
        if req.top_p != 1.0:
            sampling["top_p"] = req.top_p
        if req.seed is not None:
            sampling["sampling_seed"] = req.seed
        if req.asd_fields():
            sampling["custom_params"] = req.asd_fields()
        return PATHS["generate"], {"text": req.text, "sampling_params": sampling, "stream": req.stream}
    body: dict[str, Any] = {"model": req.model, "max_tokens": req.max_new_tokens, "temperature": req.temperature,
                            "ignore_eos": req.ignore_eos, "stream": req.stream,
                            "return_spec_tokens_details": True}
    if req.top_p != 1.0:
        body["top_p"] = req.top_p
    if req.seed is not None:
        body["seed"] = req.seed
    if req.stream:
        body["stream_options"] = {"include_usage": True}
    body.update(req.asd_fields())
    if req.api == "chat":
        body["messages"] = [{"role": "user", "content": req.text}]
    else:
        body["prompt"] = req.text
    return PATHS[req.api], body


# ---------------------------------------------------------------- reading answers


def _finish_type(finish: Any) -> Optional[str]:
    if isinstance(finish, dict):
        return finish.get("type")
    return finish


def _take_spec(res: GenResult, details: Any) -> None:
    if isinstance(details, list):
        details = details[0] if details else None
    if not isinstance(details, dict):
        return
    for key in SPEC_KEYS:
        if details.get(key) is not None:
            setattr(res, key, details[key])


def _take_meta(res: GenResult, meta: dict) -> None:
    """Fields of a /generate ``meta_info`` (cumulative on every stream chunk)."""
    if meta.get("completion_tokens") is not None:
        res.completion_tokens = int(meta["completion_tokens"])
    if meta.get("prompt_tokens") is not None:
        res.prompt_tokens = int(meta["prompt_tokens"])
    if meta.get("finish_reason") is not None:
        res.finish_reason = _finish_type(meta["finish_reason"])
    if meta.get("e2e_latency") is not None:
        res.server_e2e_s = float(meta["e2e_latency"])
    if isinstance(meta.get("asd"), dict):
        res.receipt = meta["asd"]
    _take_spec(res, meta)


def _take_openai(res: GenResult, body: dict, chat: bool, stream: bool) -> Optional[str]:
    """Fields of an OpenAI response or stream chunk; returns the text (delta on streams)."""
    text = None
    usage = body.get("usage")
    if isinstance(usage, dict):
        if usage.get("completion_tokens") is not None:
            res.completion_tokens = int(usage["completion_tokens"])
        if usage.get("prompt_tokens") is not None:
            res.prompt_tokens = int(usage["prompt_tokens"])
    sglext = body.get("sglext")
    if isinstance(sglext, dict):
        _take_spec(res, sglext.get("spec_tokens_details"))
    if isinstance(body.get("asd"), dict):
        res.receipt = body["asd"]
    for choice in body.get("choices") or []:
        if choice.get("index", 0) != 0:
            continue
        if chat:
            part = choice.get("delta" if stream else "message") or {}
            text = part.get("content")
        else:
            text = choice.get("text")
        if choice.get("finish_reason") is not None:
            res.finish_reason = choice["finish_reason"]
        if isinstance(choice.get("asd"), dict):
            res.receipt = choice["asd"]
    return text


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error", body.get("message", body))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)
    return str(body)


def _sse_events(resp) -> Iterator[dict]:
    """JSON objects of a ``text/event-stream`` body (``data: {...}`` lines, until ``[DONE]``)."""
    for raw in resp.iter_lines():
        if not raw:
            continue
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def _read_stream(res: GenResult, req: GenRequest, resp, t0: float) -> None:
    text = ""
    for event in _sse_events(resp):
        if "error" in event and "choices" not in event and "meta_info" not in event:
            raise RuntimeError(_error_text(event))
        if req.api == "generate":
            meta = event.get("meta_info") or {}
            chunk = event.get("text")
            ids = event.get("output_ids")
            before = res.completion_tokens or 0
            _take_meta(res, meta)
            # SGLang streams cumulative text by default and deltas with
            # --incremental-streaming-output; cumulative chunks carry every output id so far.
            if chunk is not None:
                cumulative = ids is None or res.completion_tokens is None or len(ids) == res.completion_tokens
                text = chunk if cumulative else text + chunk
            got_output = (res.completion_tokens or 0) > before
        else:
            delta = _take_openai(res, event, chat=req.api == "chat", stream=True)
            if delta:
                text += delta
            got_output = bool(delta)
        if got_output and res.ttft_s is None:
            res.ttft_s = time.perf_counter() - t0
    res.text = text


def send(session, base_url: str, req: GenRequest, timeout: float = 600.0) -> GenResult:
    """Send one request and read it completely. Never raises for HTTP or protocol errors:
    they come back as ``ok=False`` with ``error`` set."""
    path, body = build_payload(req)
    budget = req.asd_fields().get("asd_budget")
    res = GenResult(tag=req.tag, api=req.api, stream=req.stream, budget=None if budget is None else float(budget),
                    seed=req.seed, start_time=time.time())
    t0 = time.perf_counter()
    try:
        # No redirects: a benchmark talks to the host it was given and nowhere else.
        resp = session.post(base_url.rstrip("/") + path, json=body, stream=req.stream, timeout=timeout,
                            allow_redirects=False)
        res.status = resp.status_code
        if resp.status_code != 200:
            try:
                detail = _error_text(resp.json())
            except ValueError:
                detail = resp.text[:500]
            res.error = f"HTTP {resp.status_code}: {detail}"
            return res
        if req.stream:
            _read_stream(res, req, resp, t0)
        elif req.api == "generate":
            out = resp.json()
            out = out[0] if isinstance(out, list) else out
            res.text = out.get("text") or ""
            _take_meta(res, out.get("meta_info") or {})
        else:
            res.text = _take_openai(res, resp.json(), chat=req.api == "chat", stream=False) or ""
        res.ok = True
    except Exception as e:  # network errors, bad JSON, error events inside a stream
        res.error = f"{type(e).__name__}: {e}"
    finally:
        res.latency_s = time.perf_counter() - t0
    if res.ok and res.ttft_s is not None and res.completion_tokens and res.completion_tokens > 1:
        res.tpot_s = (res.latency_s - res.ttft_s) / (res.completion_tokens - 1)
    return res


def served_model(session, base_url: str, timeout: float = 10.0) -> str:
    """The first model id of ``/v1/models``, or ``"default"`` if the server does not say."""
    try:
        data = session.get(base_url.rstrip("/") + "/v1/models", timeout=timeout).json()
        return data["data"][0]["id"]
    except Exception:
        return "default"


def parse_budgets(spec: str) -> list[float]:
    """``"0,2,8"`` -> ``[0.0, 2.0, 8.0]`` (order kept, duplicates dropped)."""
    out: list[float] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"budgets must be comma-separated numbers >= 0, got {part!r}") from None
        if not value >= 0 or value == float("inf"):
            raise ValueError(f"budgets must be finite numbers >= 0, got {part!r}")
        if value not in out:
            out.append(value)
    if not out:
        raise ValueError(f"budgets must list at least one number, got {spec!r}")
    return out
