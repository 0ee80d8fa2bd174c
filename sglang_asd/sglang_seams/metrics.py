"""Prometheus metrics ``sglang:asd_*``, counted in the scheduler from host data SGLang already copied.

Created only when the server runs with ``--enable-metrics``, on the scheduler that exports
SGLang's own metrics (attention-TP rank 0), so TP ranks do not double count. SGLang runs
prometheus_client in multiprocess mode, so counters made in the scheduler appear on the HTTP
server's ``/metrics``.
"""

from __future__ import annotations

from typing import Optional


class ASDMetrics:
    def __init__(self, labels: dict):
        from prometheus_client import Counter, Gauge

        names = list(labels)
        self._labels = labels
        self.exceptions = Counter(
            "sglang:asd_exceptions_total", "Draft tokens accepted as ASD exceptions (tokens).", names)
        self.regret = Counter(
            "sglang:asd_regret_spent_nats_total", "Regret charged to request ledgers (nats).", names)
        self.suffix = Counter(
            "sglang:asd_suffix_tokens_total",
            "Exact draft tokens committed after an exception through realized-prefix suffix reuse (tokens).", names)
        self.exhausted = Counter(
            "sglang:asd_budget_exhausted_total",
            "Requests that finished with less than 1% of their budget left (requests).", names)
        self.active = Gauge(
            "sglang:asd_active_ledgers", "Request-pool slots holding an ASD ledger row now (requests).", names,
            multiprocess_mode="livesum")
        self.requests = Counter(
            "sglang:asd_requests_total",
            "Requests by whether ASD applied, and why not (requests).", names + ["applied", "reason"])

    def observe_round(self, exceptions: int, regret: float, suffix_tokens: int) -> None:
        if exceptions:
            self.exceptions.labels(**self._labels).inc(exceptions)
            self.regret.labels(**self._labels).inc(regret)
        if suffix_tokens:
            self.suffix.labels(**self._labels).inc(suffix_tokens)

    def observe_request(self, reason: Optional[str]) -> None:
        self.requests.labels(**self._labels, applied=str(reason is None).lower(), reason=reason or "").inc()

    def set_active(self, n: int) -> None:
        self.active.labels(**self._labels).set(n)

    def observe_finished(self, budget: float, remaining: float) -> None:
        if budget > 0 and remaining < 0.01 * budget:
            self.exhausted.labels(**self._labels).inc()
