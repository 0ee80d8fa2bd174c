"""Aggregates over a set of request results, shared by the speed benchmark, the audit and the
load-test summary. Inputs are ``GenResult`` objects or their ``to_dict()`` form.

- ``accept_length``: total completion tokens / total verify rounds (``spec_verify_ct``) over the
  requests that report them (SGLang's per-request ``spec_accept_length``, pooled);
- ``accept_length_mean``: the plain mean of the per-request ``spec_accept_length``;
- ``verify_ct_mean``: verify rounds per request;
- ``spent_mean``/``spent_total``, ``exceptions_mean``: from the ASD receipts (a greedy rule's
  ``exceptions``; the sampled rule's receipt counts its relaxed verify nodes, ``relaxed``, instead);
- ``applied_share``: requests whose receipt says ``applied: true`` (None if no receipts came).
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Optional

from sglang_asd.bench import stats


def _get(r: Any, key: str) -> Any:
    return r.get(key) if isinstance(r, dict) else getattr(r, key, None)


def _receipt(r: Any) -> Optional[dict]:
    rec = _get(r, "receipt")
    return rec if isinstance(rec, dict) else None


def result_metrics(results: Iterable[Any]) -> dict:
    results = list(results)
    ok = [r for r in results if _get(r, "ok")]
    tokens = [_get(r, "completion_tokens") for r in ok]
    spec = [r for r in ok if _get(r, "spec_verify_ct")]
    spec_tokens = sum(_get(r, "completion_tokens") or 0 for r in spec)
    spec_rounds = sum(_get(r, "spec_verify_ct") for r in spec)
    receipts = [rec for rec in (_receipt(r) for r in ok) if rec is not None]
    reasons = collections.Counter(str(rec.get("reason")) for rec in receipts if not rec.get("applied"))
    return {
        "requests": len(results),
        "errors": len(results) - len(ok),
        "output_tokens": sum(t or 0 for t in tokens),
        "completion_tokens_mean": stats.mean(tokens),
        "accept_length": spec_tokens / spec_rounds if spec_rounds else None,
        "accept_length_mean": stats.mean(_get(r, "spec_accept_length") for r in ok),
        "verify_ct_mean": stats.mean(_get(r, "spec_verify_ct") for r in ok),
        "spent_mean": stats.mean(rec.get("spent") for rec in receipts),
        "spent_total": sum(rec.get("spent") or 0.0 for rec in receipts) if receipts else None,
        "exceptions_mean": stats.mean(rec.get("exceptions", rec.get("relaxed")) for rec in receipts),
        "receipts": len(receipts),
        "applied_share": (sum(1 for rec in receipts if rec.get("applied")) / len(receipts)) if receipts else None,
        "not_applied_reasons": dict(reasons),
    }


def first_errors(results: Iterable[Any], limit: int = 5) -> list[str]:
    """Distinct error messages, first ``limit``, for a report."""
    seen: list[str] = []
    for r in results:
        err = _get(r, "error")
        if err and err not in seen:
            seen.append(err)
            if len(seen) >= limit:
                break
    return seen
