"""A stand-in HTTP server with the response shapes of SGLang 0.5.23 + sglang-asd, for testing the
benchmark tools' plumbing fast and without a model. It is NOT evidence about SGLang: the tests
that make claims about the real server use the ``asd_server_url`` fixture (``@pytest.mark.server``).

Shapes copied from: ``sglang/srt/entrypoints/http_server.py`` (``/generate``, SSE ``data:`` lines,
``[DONE]``), ``managers/tokenizer_manager.py`` (``meta_info``: ``completion_tokens``,
``finish_reason``, ``e2e_latency``, ``spec_verify_ct``, ``spec_accept_length``, cumulative stream
text), ``entrypoints/openai/protocol.py`` (``usage``, ``sglext.spec_tokens_details``) and
docs/CONTRACTS.md (receipts, 400 messages).

Behaviour: a "token" is a word. Budget 0 answers the shipped GSM8K / MATH / MMLU prompts
correctly; a budget >= 8 gets every fourth item wrong and spends regret. Speculative stats: accept
length 2 when strict, 3 with a budget; each verify round sleeps ``ROUND_S``, so a budget is faster.
``FakeServer(plain=True)`` stands for a server without speculative decoding: one token per
round, no speculative stats, no receipts.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_asd.bench import datasets

ROUND_S = 0.002
MAX_BUDGET = 64.0


def _answers() -> dict[str, tuple[str, dict]]:
    out = {}
    for task in ("gsm8k", "math500", "mmlu"):
        for p in datasets.load_prompts(task):
            out[p.text] = (task, p.item)
    return out


ANSWERS = _answers()


def _wrong(item_id: str) -> bool:
    return int(hashlib.sha256(item_id.encode()).hexdigest(), 16) % 4 == 0


def compose(prompt: str, max_new: int, ignore_eos: bool, budget: float) -> tuple[list[str], str]:
    """Output words and the finish reason ("length" | "stop")."""
    if ignore_eos:
        return [f"t{i}" for i in range(max_new)], "length"
    task, item = ANSWERS.get(prompt, (None, None))
    off = budget >= 8 and item is not None and _wrong(item["id"])
    if task == "gsm8k":
        words = ["Step", "one.", "####", str(int(item["answer"]) + (1 if off else 0))]
    elif task == "math500":
        words = ["Thus", "\\boxed{" + (item["answer"] + "1" if off else item["answer"]) + "}"]
    elif task == "mmlu":
        words = ["ABCD"[("ABCD".index(item["answer"]) + (1 if off else 0)) % 4]]
    else:
        n = 5 + int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 20
        words = [f"w{i}" if not (budget > 0 and i == 3) else "changed" for i in range(n)]
    return words[:max_new], ("stop" if len(words) <= max_new else "length")


def receipt(budget: float, n_tokens: int) -> dict:
    applied = budget > 0
    spent = min(budget, 0.05 * n_tokens) if applied else 0.0
    return {"applied": applied, "reason": None if applied else "budget_zero", "rule": "asd-1",
            "budget": budget, "spent": spent, "remaining": budget - spent, "gate": 0.25,
            "max_exceptions_per_block": 2, "exceptions": 1 if applied and n_tokens else 0,
            "suffix_tokens": 0, "events": [], "events_truncated": False}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    plain = False  # True: no speculative decoding (see FakeServer)
    bodies: list = []  # every POST body received, in order (tests read what a tool sent)

    def log_message(self, *args):  # quiet
        pass

    def _json(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path in ("/health", "/health_generate"):
            return self._json(200, {})
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        if self.path in ("/server_info", "/get_server_info"):
            return self._json(200, {"model_path": "fake-model", "speculative_algorithm": None if self.plain else "FAKE",
                                    "attention_backend": "fake", "launch_command": "--model-path fake-model"})
        self._json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        Handler.bodies.append(body)
        if self.path == "/generate":
            sp = body.get("sampling_params") or {}
            prompt, max_new, stream = body.get("text", ""), sp.get("max_new_tokens", 128), body.get("stream", False)
            # both forms the real server reads: sampling_params.asd_budget and its custom_params.asd_budget
            budget = sp.get("asd_budget", (sp.get("custom_params") or {}).get("asd_budget", 0.0))
            ignore_eos = sp.get("ignore_eos", False)
        elif self.path in ("/v1/completions", "/v1/chat/completions"):
            prompt = body["messages"][-1]["content"] if "messages" in body else body.get("prompt", "")
            max_new, stream = body.get("max_tokens", 128), body.get("stream", False)
            ignore_eos, budget = body.get("ignore_eos", False), body.get("asd_budget", 0.0)
        else:
            return self._json(404, {"error": {"message": "not found"}})
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 <= budget <= MAX_BUDGET:
            return self._json(400, {"error": {"message": f"asd_budget must be a finite number in [0, {MAX_BUDGET:g}], got {budget}"}})
        words, finish = compose(prompt, max_new, ignore_eos, float(budget))
        accept = 1.0 if self.plain else (3.0 if budget > 0 else 2.0)
        if self.path == "/generate":
            self._generate(words, finish, float(budget), accept, stream)
        else:
            self._openai(words, finish, float(budget), accept, stream, chat="messages" in body,
                         spec=body.get("return_spec_tokens_details", False))

    @staticmethod
    def _rounds(words, accept):
        """Yield (tokens so far, verify rounds so far) after each simulated verify round."""
        n, step = 0, 0
        while n < len(words):
            step += 1
            n = min(len(words), math.floor(step * accept))
            time.sleep(ROUND_S)
            yield n, step

    def _meta(self, words, n, step, finish, budget, t0, done):
        meta = {"id": "r", "prompt_tokens": 7, "completion_tokens": n, "e2e_latency": time.perf_counter() - t0,
                "finish_reason": ({"type": finish} if done else None)}
        if self.plain:
            return meta
        meta["asd"] = receipt(budget, n)
        if step:
            meta.update(spec_verify_ct=step, spec_accept_length=n / step, spec_num_correct_drafts=n - step)
        return meta

    def _sse_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, obj) -> None:
        self.wfile.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")
        self.wfile.flush()

    def _generate(self, words, finish, budget, accept, stream):
        t0 = time.perf_counter()
        if not stream:
            n, step = 0, 0
            for n, step in self._rounds(words, accept):
                pass
            return self._json(200, {"text": " ".join(words), "output_ids": list(range(len(words))),
                                    "meta_info": self._meta(words, n, step, finish, budget, t0, True)})
        self._sse_start()
        for n, step in self._rounds(words, accept):
            self._sse({"text": " ".join(words[:n]), "output_ids": list(range(n)),
                       "meta_info": self._meta(words, n, step, finish, budget, t0, n == len(words))})
        self._sse(b"[DONE]")

    def _openai(self, words, finish, budget, accept, stream, chat, spec):
        t0 = time.perf_counter()
        n, step = 0, 0
        usage = lambda n: {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}  # noqa: E731
        details = lambda n, step: {"spec_accept_length": n / step if step else 0.0, "spec_verify_ct": step}  # noqa: E731
        if not stream:
            for n, step in self._rounds(words, accept):
                pass
            text = " ".join(words)
            choice = {"index": 0, "finish_reason": finish}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            resp = {"id": "x", "object": "chat.completion" if chat else "text_completion", "model": "fake-model",
                    "choices": [choice], "usage": usage(n)}
            if not self.plain:
                choice["asd"] = resp["asd"] = receipt(budget, n)
            if spec and not self.plain:
                resp["sglext"] = {"spec_tokens_details": details(n, step)}
            return self._json(200, resp)
        self._sse_start()
        sent = 0
        for n, step in self._rounds(words, accept):
            delta = (" " if sent else "") + " ".join(words[sent:n])
            sent = n
            choice = {"index": 0, "finish_reason": finish if n == len(words) else None}
            if n == len(words) and not self.plain:
                choice["asd"] = receipt(budget, n)
            choice.update({"delta": {"content": delta}} if chat else {"text": delta})
            self._sse({"id": "x", "choices": [choice], "model": "fake-model"})
        if spec and not self.plain:
            self._sse({"id": "x", "choices": [], "model": "fake-model", "sglext": {"spec_tokens_details": details(n, step)}})
        self._sse({"id": "x", "choices": [], "model": "fake-model", "usage": usage(n)})
        self._sse(b"[DONE]")


class FakeServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, plain: bool = False):
        handler = type("PlainHandler", (Handler,), {"plain": True}) if plain else Handler
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    # python tests/bench/fake_server.py [-m ignored] [--host H] [--port P] [other flags ignored]
    # (accepts a launch_server command line, so it can stand in for one in LaunchedServer tests)
    argv = sys.argv[1:]
    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 30000
    # a launch_server command line with a model and no speculative algorithm = a plain server
    server = FakeServer(host, port, plain="--model-path" in argv and "--speculative-algorithm" not in argv)
    print(server.url, flush=True)
    server.httpd.serve_forever()
