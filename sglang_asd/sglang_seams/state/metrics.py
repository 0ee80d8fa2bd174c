"""Prometheus metrics ``sglang:asd_*``, counted in the scheduler from host data SGLang already copied.

Created only when the server runs with ``--enable-metrics``, on the scheduler that exports
SGLang's own metrics (attention-TP rank 0), so TP ranks do not double count. SGLang runs
prometheus_client in multiprocess mode, so counters made in the scheduler appear on the HTTP
server's ``/metrics``. Every counter carries a ``rule`` label (asd, local, margin, threshold, or
asd-sampled for sampled requests: the request's rule), so rules compare by the same counts;
``sglang:asd_budget_exhausted_total`` counts the rules whose budget is a request ledger (asd and
asd-sampled). Sampled requests' relaxed nodes and their KL charges have their own counters.
``sglang:asd_scope_skipped_total`` counts the greedy verifier's nodes kept strict by a request's
scope (``verify.torch_verify``: mismatched nodes whose parent is on the accepted path, which the
rule's node gates passed and the scope did not allow; at most one per row and round on a chain),
and the sampled verifier's levels where the scope kept the relaxation the unscoped rule would have
made (``verify.sampled_verify``; rule ``asd-sampled``).
"""

from __future__ import annotations

from typing import Optional


class ASDMetrics:
    def __init__(self, labels: dict):
        from prometheus_client import Counter, Gauge

        names = list(labels)
        self._labels = labels
        ruled = names + ["rule"]
        self.exceptions = Counter(
            "sglang:asd_exceptions_total", "Draft tokens accepted as exceptions, by rule (tokens).", ruled)
        self.regret = Counter(
            "sglang:asd_regret_spent_nats_total",
            "Regret of accepted exceptions, by rule; charged to request ledgers under asd (nats).", ruled)
        self.suffix = Counter(
            "sglang:asd_suffix_tokens_total",
            "Exact draft tokens committed after an exception through realized-prefix suffix reuse (tokens).", ruled)
        self.scope_skipped = Counter(
            "sglang:asd_scope_skipped_total",
            "Draft nodes hanging from the accepted path that the rule's node gates would have accepted as exceptions "
            "but the request's scope kept strict (prefix, reasoning span, strict spans, markers) (nodes).", ruled)
        self.exhausted = Counter(
            "sglang:asd_budget_exhausted_total",
            "asd requests that finished with less than 1% of their budget left (requests).", ruled)
        self.relaxed = Counter(
            "sglang:asd_relaxed_nodes_total",
            "Verify nodes relaxed by the sampled rule (charged whether or not the token was accepted) (nodes).", ruled)
        self.kl = Counter(
            "sglang:asd_kl_spent_nats_total",
            "KL divergence from exact speculative sampling charged to sampled requests' ledgers (nats).", ruled)
        self.active = Gauge(
            "sglang:asd_active_ledgers", "Request-pool slots holding an ASD ledger row now (requests).", names,
            multiprocess_mode="livesum")
        self.requests = Counter(
            "sglang:asd_requests_total",
            "Requests by whether ASD applied, and why not, by rule (requests).", names + ["applied", "reason", "rule"])

    def observe_round(self, exceptions: int, regret: float, suffix_tokens: int, rule: str = "asd",
                      scope_skipped: int = 0) -> None:
        if exceptions:
            self.exceptions.labels(**self._labels, rule=rule).inc(exceptions)
            self.regret.labels(**self._labels, rule=rule).inc(regret)
        if suffix_tokens:
            self.suffix.labels(**self._labels, rule=rule).inc(suffix_tokens)
        if scope_skipped:
            self.scope_skipped.labels(**self._labels, rule=rule).inc(scope_skipped)

    def observe_relaxed(self, nodes: int, kl: float, rule: str = "asd-sampled") -> None:
        if nodes:
            self.relaxed.labels(**self._labels, rule=rule).inc(nodes)
            self.kl.labels(**self._labels, rule=rule).inc(kl)

    def observe_request(self, reason: Optional[str], rule: str = "asd") -> None:
        self.requests.labels(**self._labels, applied=str(reason is None).lower(), reason=reason or "", rule=rule).inc()

    def set_active(self, n: int) -> None:
        self.active.labels(**self._labels).set(n)

    def observe_finished(self, budget: float, remaining: Optional[float], rule: str = "asd") -> None:
        """``remaining`` None: a rule without a ledger, which cannot exhaust one."""
        if remaining is not None and budget > 0 and remaining < 0.01 * budget:
            self.exhausted.labels(**self._labels, rule=rule).inc()
