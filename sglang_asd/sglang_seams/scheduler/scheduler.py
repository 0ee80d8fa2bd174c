"""Seams on ``sglang.srt.managers.scheduler.Scheduler`` (every hook on that class is here).

``Scheduler._create_generation_req`` (AROUND, scheduler process)
- Why: the ledger lives on the scheduler's request object, created with the request from the
  ``asd_*`` keys of ``sampling_params.custom_params`` (validated again here: the HTTP layer already
  answered bad values with a 400, but the scheduler must not trust its input).
- How: call the original, then attach ``req.asd_ledger`` (a ``RequestLedger``: budget, rule and
  its parameters, its scope resolved against the served model, ``state/scope_vocab.py``) with the reason ASD does not apply, if any (strict choice, server without
  speculative decoding, unsupported mode; for a sampled request, ``sampling_reason``: this
  process's SGLang verifies sampled rows greedily or not at all through the hooked sampler,
  rejection sampling, or thresholds other than 1). A sampled request's ledger is the sampled
  rule's (``asd-sampled-1``: the budget in nats of KL, ``policy/sampled.py``).
- Upstream: SGLang documents this method as the "extension point for request-local state".

``Scheduler.get_output_streamer_class`` (AROUND, scheduler process)
- Why: receipts travel in ``meta_info["asd"]``.
- How: return a subclass of SGLang's streamer that adds a request-level customized-info key
  ``"asd"`` (SGLang's ``build_additional_customized_info`` extension point).
- Upstream: both are SGLang extension points; nothing to upstream.

``Scheduler.init_metrics_collector`` (AROUND, scheduler process)
- Why: the ``sglang:asd_*`` metrics (``metrics.py``) are created beside SGLang's own collectors, on
  the rank that exports them, so TP ranks do not double count.
- How: call the original; if it created a metrics collector, create ours.
- Upstream: an extension point in spirit; nothing to upstream.

``Scheduler.init_model_worker`` (AROUND, scheduler process)
- Why: every verify kernel variant is compiled before the scheduler reports ready, and serving is
  checked to launch only those (``step/warmup.py`` holds the why and how).
- How: call the original (model, draft, CUDA graphs), check that the server's scope resolves
  against the served model (``--asd-strict-spans`` markers single tokens, ``--asd-scope
  reasoning``'s think tokens; else the server does not start), then ``warmup.warm_up``.
- Upstream: a plain extension of start-up; nothing to upstream. Removal: never, while the kernel
  is ours.

Removal plan for the other three: none needed beyond following SGLang's extension points.
Tested on 0.5.23.
"""

from __future__ import annotations

import logging
from typing import Optional

from sglang_asd.hooks.registry import Seam
from sglang_asd.sglang_seams.state.request_ledger import (
    REASON_NO_SPEC,
    REASON_REJECTION_SAMPLING,
    REASON_SAMPLING,
    REASON_STRICT,
    REASON_THRESHOLDS,
    RequestASD,
    RequestLedger,
)
from sglang_asd.sglang_seams.modes import process_unsupported_mode
from sglang_asd.sglang_seams.step import warmup
from sglang_asd.sglang_seams.state.runtime import get_runtime
from sglang_asd.sglang_seams.state.scope_vocab import scheduler_vocab

logger = logging.getLogger(__name__)

CREATE_REQ = "sglang.srt.managers.scheduler.Scheduler._create_generation_req"
STREAMER_CLASS = "sglang.srt.managers.scheduler.Scheduler.get_output_streamer_class"
INIT_METRICS = "sglang.srt.managers.scheduler.Scheduler.init_metrics_collector"
INIT_MODEL_WORKER = "sglang.srt.managers.scheduler.Scheduler.init_model_worker"
RECEIPT_KEY = "asd"


def _is_sampled(sampling_params) -> bool:
    return sampling_params.top_k != 1 and sampling_params.temperature >= 1e-6  # greedy: top_k 1 after normalize()


def _reason(choice: RequestASD, sampling_params, spec_enabled: bool, unsupported: Optional[str],
            spec_algorithm=None):
    if not spec_enabled:
        return REASON_NO_SPEC
    if unsupported is not None:
        return unsupported
    if _is_sampled(sampling_params):  # where the sampled rule cannot run, say so first (even at budget 0)
        if spec_algorithm is not None and (spec_algorithm.is_dspark() or spec_algorithm.is_dflash_family()
                                           or spec_algorithm.is_uno()):
            return REASON_SAMPLING
        reason = sampling_reason()
        if reason is not None:
            return reason
        return REASON_STRICT if choice.is_sampled_strict else None
    if choice.is_strict:
        return REASON_STRICT
    return None


def sampling_reason() -> Optional[str]:
    """Why this scheduler cannot serve a sampled request with the sampled rule, or None (computed
    once per process): SGLang's verify takes the sampling branch through the hooked
    ``tree_speculative_sampling_target_only`` (``eagle_sample.sampling_hooks``) only where
    ``_verify_uses_greedy`` is False for a sampled batch (not on CPU, where SGLang commits argmax,
    unless ``SGLANG_ASD_CPU_SAMPLING=on`` serves it), without rejection sampling (a different sampler, not hooked),
    and the sampled rule's bound holds only at SGLang's default thresholds 1 / 1. DSPARK and DFLASH
    verify in their own accept, which has no sampled seam, and UNO's sampled requests get the same
    reason (``_reason``): tree UNO samples a batch without a ``sampling_seed`` whose top-k are all
    <= 128 (CUDA, no min-p) with its sparse sampler (``sample_uno_tree_target_tokens``, then the
    greedy walk), never calling the hooked kernel, and which batches do depends on the other
    requests in them, so no UNO sampled row is relaxed; linear UNO is refused (``modes.py``)."""
    runtime = get_runtime()
    if runtime.sampling_reason is None:
        runtime.sampling_reason = _sampling_reason() or ""
    return runtime.sampling_reason or None


def _sampling_reason() -> Optional[str]:
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative import eagle_utils

    from sglang_asd.sglang_seams.scheduler import eagle_sample

    spec = get_spec()
    if spec.speculative_use_rejection_sampling:
        return REASON_REJECTION_SAMPLING
    greedy = eagle_utils._verify_uses_greedy(is_all_greedy=False, is_cpu=eagle_utils._is_cpu, is_hip=eagle_utils._is_hip,
                                             is_xpu=eagle_utils._is_xpu, use_rejection_sampling=False)
    if greedy or not eagle_sample.sampling_hooks():
        return REASON_SAMPLING
    if spec.speculative_accept_threshold_single != 1 or spec.speculative_accept_threshold_acc != 1:
        return REASON_THRESHOLDS
    return None


def create_generation_req_around(original, self, recv_req, *args, **kwargs):
    req = original(self, recv_req, *args, **kwargs)
    runtime = get_runtime()
    params = req.sampling_params
    try:
        choice = RequestASD.from_custom_params(params.custom_params, runtime.settings)
    except ValueError as e:  # the HTTP layer rejects these first; a direct engine call may not
        logger.warning("request %s: %s; serving it strictly", req.rid, e)
        choice = RequestASD.strict()
    markers = None
    if not choice.scope.unscoped:
        try:
            markers = scheduler_vocab(self).markers(choice.scope)
        except ValueError as e:  # the HTTP layer refuses these first; a direct engine call may not
            logger.warning("request %s: %s; serving it strictly", req.rid, e)
            choice = RequestASD.strict()
    reason = _reason(choice, params, not self.spec_algorithm.is_none(), _unsupported_mode(), self.spec_algorithm)
    req.asd_ledger = RequestLedger(choice=choice, reason=reason, sampled=_is_sampled(params),
                                   max_events=runtime.settings.max_receipt_events, markers=markers)
    if runtime.metrics is not None:
        runtime.metrics.observe_request(reason, rule=req.asd_ledger.rule)
    return req


def _unsupported_mode() -> Optional[str]:
    """``modes.process_unsupported_mode`` (computed once per process)."""
    runtime = get_runtime()
    if runtime.unsupported_mode is None:
        runtime.unsupported_mode = process_unsupported_mode() or ""
    return runtime.unsupported_mode or None


def output_streamer_class_around(original, self):
    base = original(self)
    return _streamer_subclass(base)


_STREAMER_CACHE: dict = {}


def _receipt_of(req) -> list:
    ledger = getattr(req, "asd_ledger", None)
    if ledger is None:
        return []
    if req.finished() and not ledger.finalized:
        ledger.finalized = True
        metrics = get_runtime().metrics
        if metrics is not None and ledger.applied:
            metrics.observe_finished(ledger.choice.budget, ledger.remaining, rule=ledger.rule)
    return [ledger.receipt()]


def _streamer_subclass(base):
    cls = _STREAMER_CACHE.get(base)
    if cls is not None:
        return cls

    class ASDOutputStreamer(base):
        __slots__ = ()
        has_additional_customized_info = True

        def build_additional_customized_info(self, reqs):
            info = super().build_additional_customized_info(reqs)
            info[RECEIPT_KEY] = [_receipt_of(r) for r in reqs]
            return info

        def is_request_level_customized_info_key(self, key: str) -> bool:
            return key == RECEIPT_KEY or super().is_request_level_customized_info_key(key)

    ASDOutputStreamer.__name__ = ASDOutputStreamer.__qualname__ = f"ASD{base.__name__}"
    _STREAMER_CACHE[base] = ASDOutputStreamer
    return ASDOutputStreamer


def init_metrics_collector_around(original, self, *args, **kwargs):
    """Create ``sglang:asd_*`` counters next to SGLang's own, on the rank that exports them."""
    result = original(self, *args, **kwargs)
    if getattr(self, "metrics_collector", None) is not None:
        from sglang.srt.runtime_context import get_serving

        from sglang_asd.sglang_seams.state.metrics import ASDMetrics

        get_runtime().metrics = ASDMetrics({"model_name": get_serving().served_model_name})
    return result


def init_model_worker_around(original, self, *args, **kwargs):
    """Warm every verify kernel variant up once the model worker exists (``step/warmup.py``)."""
    result = original(self, *args, **kwargs)
    scope = get_runtime().settings.scope
    if not scope.unscoped:  # the server's scope must resolve against the served model: refuse to start if not
        try:
            scheduler_vocab(self).markers(scope)
        except ValueError as e:
            raise RuntimeError(f"sglang_asd: --asd-scope / --asd-strict-spans: {e}") from None
    warmup.warm_up(self)
    return result


def hooks():
    return [
        (CREATE_REQ, create_generation_req_around),
        (STREAMER_CLASS, output_streamer_class_around),
        (INIT_METRICS, init_metrics_collector_around),
        (INIT_MODEL_WORKER, init_model_worker_around),
    ]


SEAMS = (Seam("scheduler", hooks),)
