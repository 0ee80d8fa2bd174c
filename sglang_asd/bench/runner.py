"""Run a list of requests against a server at a fixed concurrency (a thread pool, one
``requests.Session`` per thread), with a tqdm progress bar. Results come back in request order;
``on_result(index, result)`` is also called, in the caller's thread, as each one completes (the
audit scores and logs items as they arrive, so a stopped run keeps them)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Callable, Optional, Sequence

import requests

from sglang_asd.bench.client import GenRequest, GenResult, send


class PassFailed(RuntimeError):
    """A pass lost requests (a server crashed or timed out): the run stops at once, so that
    ``--resume`` redoes the lost work on a healthy server instead of recording every later pass
    as failed too."""


@dataclasses.dataclass
class PassResult:
    """One pass over a request list: results in order and the wall time of the whole pass."""

    results: list[GenResult]
    wall_s: float

    @property
    def output_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.results if r.ok)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.results if not r.ok)

    @property
    def tokens_per_s(self) -> Optional[float]:
        return self.output_tokens / self.wall_s if self.wall_s > 0 and self.output_tokens else None


def run_pass(base_url: str, requests_: Sequence[GenRequest], concurrency: int, timeout: float = 600.0,
             desc: Optional[str] = None, progress: bool = True,
             on_result: Optional[Callable[[int, GenResult], None]] = None) -> PassResult:
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    local = threading.local()

    def one(req: GenRequest) -> GenResult:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return send(local.session, base_url, req, timeout=timeout)

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(requests_), desc=desc, unit="req", leave=False, dynamic_ncols=True)
    results: list[Optional[GenResult]] = [None] * len(requests_)
    t0 = time.perf_counter()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency)
    try:
        futures = {pool.submit(one, req): i for i, req in enumerate(requests_)}
        for fut in concurrent.futures.as_completed(futures):
            index = futures[fut]
            results[index] = fut.result()
            if on_result is not None:
                on_result(index, results[index])
            if bar is not None:
                bar.update(1)
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): drop the queued requests instead of sending them all first.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    return PassResult(results=[r for r in results if r is not None], wall_s=wall)


def preflight(checks: Sequence[tuple[str, str, GenRequest]], timeout: float = 600.0) -> dict[str, GenResult]:
    """Send one short request per ``(arm label, url, request)`` before hours of measurement; an
    arm the server rejects (HTTP 4xx, e.g. a gate above the server's) is a ValueError naming the
    arm and quoting the server, so a bad configuration fails in seconds, not mid-run. Returns each
    arm's result (its receipt says the settings the server gives the arm)."""
    rejected, results = [], {}
    session = requests.Session()
    for label, url, req in checks:
        res = results[label] = send(session, url, req, timeout=timeout)
        if res.status is not None and 400 <= res.status < 500:
            rejected.append(f"arm {label}: {res.error}")
    if rejected:
        raise ValueError("the server rejects " + "; ".join(rejected))
    return results
