"""Locust load test of a running sglang-asd server (``/generate`` and the OpenAI routes).

Users (closed loop, one request at a time each):
- ``FixedWorkUser``: ``ignore_eos`` and ``--max-new-tokens`` exactly: every request is the same work;
- ``NaturalStopUser``: stops at EOS, capped at ``--natural-max-new-tokens``.
Per request, drawn from seeded mixes: the budget (``--budget-mix 0:0.5,8:0.5``), the route
(``--api-mix generate:1,chat:1,completions:1``), streaming (``--stream-share``), and the prompt
(shipped GSM8K / MT-Bench subsets, ``--prompt-tasks``). All requests are greedy. OpenAI requests name
the model ``/v1/models`` lists, so the test also runs through a gateway (smg routes by model name).

Each finished request is reported to locust (name = user kind and budget, time = end-to-end)
and, with ``--records-out FILE``, appended to FILE as one JSON line (the shared client's
``GenResult`` plus ``user``): ``run_headless.py`` summarizes those. ``--max-requests N`` stops
the test after N requests have finished (in-flight ones complete first).

Usually run through ``python load_tests/run_headless.py``; directly:
``locust -f load_tests/locustfile.py --headless --host http://127.0.0.1:30000 -u 4 -r 2 -t 30s``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys

import gevent
import requests
from locust import User, constant, events, task

try:
    import sglang_asd.bench  # noqa: F401
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sglang_asd.bench import datasets  # noqa: E402
from sglang_asd.bench.client import APIS, GenRequest, send, served_model  # noqa: E402
from sglang_asd.bench.loadmix import budget_value, choice_of, parse_mix, pick  # noqa: E402


@events.init_command_line_parser.add_listener
def _add_options(parser):
    parser.add_argument("--budget-mix", default="0:1", help="asd_budget values and weights, e.g. 0:0.5,8:0.5")
    parser.add_argument("--api-mix", default="generate:1", help="routes and weights: generate, chat, completions")
    parser.add_argument("--stream-share", type=float, default=0.5, help="share of streamed requests (0..1)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per fixed-work request")
    parser.add_argument("--natural-max-new-tokens", type=int, default=256, help="cap of natural-stop requests")
    parser.add_argument("--prompt-tasks", default="gsm8k,mtbench", help="prompt sources (shipped subsets)")
    parser.add_argument("--user-mix", default="fixed:1,natural:1", help="weights of the user kinds")
    parser.add_argument("--max-requests", type=int, default=0, help="stop after this many requests (0 = no limit)")
    parser.add_argument("--records-out", default="", help="append one JSON line per request to this file")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-user random draws")


class _Shared:
    """Per-process state: parsed mixes, prompts, the request budget, the records file."""

    def __init__(self, environment):
        opts = environment.parsed_options
        self.budgets = parse_mix(opts.budget_mix, budget_value, "--budget-mix")
        self.apis = parse_mix(opts.api_mix, choice_of(APIS), "--api-mix")
        if not 0 <= opts.stream_share <= 1:
            raise ValueError(f"--stream-share must be in [0, 1], got {opts.stream_share}")
        for name in ("max_new_tokens", "natural_max_new_tokens"):
            if getattr(opts, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(opts, name)}")
        tasks = datasets.parse_tasks(opts.prompt_tasks)
        self.prompts = [p for t in tasks for p in datasets.load_prompts(t)]
        self.opts = opts
        self.issued = 0
        self.in_flight = 0
        self.finished = 0
        self.quitting = False
        self.user_ids = itertools.count()
        self.model = None  # the served model's name (OpenAI routes), asked once: a gateway (smg) routes by it
        self.records = open(opts.records_out, "a", buffering=1) if opts.records_out else None

    def record(self, row: dict) -> None:
        if self.records is not None:
            self.records.write(json.dumps(row) + "\n")


_SHARED: dict[int, _Shared] = {}


def _shared(environment) -> _Shared:
    key = id(environment)
    if key not in _SHARED:
        _SHARED[key] = _Shared(environment)
    return _SHARED[key]


@events.init.add_listener
def _apply_user_mix(environment, **_kwargs):
    opts = environment.parsed_options
    if opts is None:
        return
    weights = dict(parse_mix(opts.user_mix, choice_of(("fixed", "natural")), "--user-mix"))
    for cls in (FixedWorkUser, NaturalStopUser):
        if weights.get(cls.kind, 0) > 0:
            cls.weight = max(1, round(weights[cls.kind] * 100))
    _shared(environment)  # fail fast on bad options, before any user starts


@events.quitting.add_listener
def _close_records(environment, **_kwargs):
    shared = _SHARED.pop(id(environment), None)
    if shared is not None and shared.records is not None:
        shared.records.close()


class _ASDUser(User):
    abstract = True
    wait_time = constant(0)
    kind = ""

    def on_start(self) -> None:
        self.shared = _shared(self.environment)
        self.rng = random.Random(f"{self.shared.opts.seed}-{self.kind}-{next(self.shared.user_ids)}")
        self.session = requests.Session()
        if self.shared.model is None:
            self.shared.model = served_model(self.session, self.host)

    def _limit_reached(self) -> bool:
        limit = self.shared.opts.max_requests
        return bool(limit) and self.shared.issued >= limit

    def _maybe_quit(self) -> None:
        s = self.shared
        if self._limit_reached() and s.in_flight == 0 and not s.quitting:
            s.quitting = True
            gevent.spawn(self.environment.runner.quit)

    def _request(self, ignore_eos: bool, max_new_tokens: int) -> None:
        s = self.shared
        if self._limit_reached():
            self._maybe_quit()
            gevent.sleep(0.05)
            return
        s.issued += 1
        s.in_flight += 1
        prompt = self.rng.choice(s.prompts)
        budget = pick(self.rng, s.budgets)
        req = GenRequest(text=prompt.text, max_new_tokens=max_new_tokens, budget=budget, ignore_eos=ignore_eos,
                         stream=self.rng.random() < s.opts.stream_share, api=pick(self.rng, s.apis), tag=prompt.id,
                         model=s.model)
        try:
            res = send(self.session, self.host, req, timeout=s.opts.request_timeout)
        finally:
            s.in_flight -= 1
        s.finished += 1
        self.environment.events.request.fire(
            request_type=req.api + ("+stream" if req.stream else ""),
            name=f"{self.kind} B={budget:g}",
            response_time=(res.latency_s or 0.0) * 1000.0,
            response_length=res.completion_tokens or 0,
            exception=None if res.ok else RuntimeError(res.error),
            context={"budget": budget, "user": self.kind},
        )
        s.record({**res.to_dict(), "user": self.kind, "ignore_eos": ignore_eos, "max_new_tokens": max_new_tokens})
        self._maybe_quit()


class FixedWorkUser(_ASDUser):
    """Fixed work: ignore_eos, exactly ``--max-new-tokens`` tokens per request."""

    kind = "fixed"

    @task
    def fixed(self) -> None:
        self._request(ignore_eos=True, max_new_tokens=self.shared.opts.max_new_tokens)


class NaturalStopUser(_ASDUser):
    """Natural stop: EOS ends the request, ``--natural-max-new-tokens`` caps it."""

    kind = "natural"

    @task
    def natural(self) -> None:
        self._request(ignore_eos=False, max_new_tokens=self.shared.opts.natural_max_new_tokens)
