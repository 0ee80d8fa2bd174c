"""Serving modes in which ASD cannot run, and how they are refused.

ASD decides in the verify step (``step/verify_step.py``, called by ``scheduler/eagle_sample.py`` for
the EAGLE family, STANDALONE and NGRAM, and by ``dspark_accept.py`` and ``dflash_accept.py`` for the
block drafters) and reads its ledger through the request-pool slot hooks on ``ReqToTokenPool``
(``req_to_token_pool.py``). A mode that bypasses
either would serve every request strictly while receipts claimed otherwise, so it is refused:
- at start-up, when ``--asd-*`` flags ask for ASD (``sglang_asd.launch_server`` exits with one line);
- in every receipt otherwise (``applied: false``, ``reason: "unsupported:<mode>"``), e.g. a stock
  ``sglang serve`` that picked sglang-asd up through the plugin entry point.

Read from SGLang 0.5.23:
- PD disaggregation: a prefill server runs no verify step at all (it computes the prompt and the
  first token, and hands the KV to the decode server), so ASD is refused there and its receipts say
  ``unsupported:pd_prefill``; the client's response, and its receipt, come from the decode server.
  The decode server is supported: its request pool, ``DecodeReqToTokenPool``
  (``srt/disaggregation/decode.py``), is not a ``ReqToTokenPool`` and holds the ledger through its
  own hooks (``scheduler/decode_req_to_token_pool.py``).
- Linear UNO (``--speculative-algorithm UNO`` with ``--speculative-eagle-topk`` 1, SGLang's default
  for UNO): ``UnoWorkerV2._forward_decode`` accepts in the worker itself, greedy rows by comparing
  the draft with the target's top-1 (``_accept_and_pack``) and sampled rows with UNO's own rejection
  sampler (``run_uno_sampling``), never through ``eagle_sample``: no request is decided by ASD, so it
  is refused (``unsupported:uno_linear``). Tree UNO (topk > 1) verifies through ``run_eagle_verify``.
Every other speculative algorithm verifies greedy rows through one of the seams above: EAGLE,
EAGLE3, NEXTN/MTP, FROZEN_KV_MTP (an ``EAGLEWorkerV2``), multi-layer EAGLE and tree UNO via
``run_eagle_verify``; STANDALONE; NGRAM; DSPARK (``accept_draft_tokens``, its folded accept disarmed
in steps with ASD rows); DFLASH (``_accept_block``). Sampled rows have a seam only where SGLang's
sampling branch calls ``tree_speculative_sampling_target_only`` (``scheduler.sampling_reason`` says
where it does not). README's support matrix says which of them have run.
"""

from __future__ import annotations

from typing import Optional

# algorithm -> why ASD cannot run with it when its --speculative-eagle-topk is 1 (unset: 1)
UNSUPPORTED_CHAINS = {
    "UNO": "linear UNO accepts in its own worker, outside SGLang's verify step (tree UNO, "
           "--speculative-eagle-topk > 1, verifies through it)",
}
UNSUPPORTED_DISAGGREGATION = {
    "prefill": "a prefill server runs no verify step (serve ASD on the decode server; the prefill server runs stock)",
}


def _chain(eagle_topk) -> bool:
    """A topk of 1, or unset (SGLang's UNO reads ``speculative_eagle_topk or 1``)."""
    return int(eagle_topk or 1) <= 1


def unsupported_mode(speculative_algorithm: Optional[str], disaggregation_mode: Optional[str],
                     eagle_topk=None) -> Optional[str]:
    """``"unsupported:<mode>"`` if ASD cannot run in this mode, else None."""
    algorithm = (speculative_algorithm or "").upper()
    if algorithm in UNSUPPORTED_CHAINS and _chain(eagle_topk):
        return f"unsupported:{algorithm.lower()}_linear"
    if (disaggregation_mode or "null") in UNSUPPORTED_DISAGGREGATION:
        return f"unsupported:pd_{disaggregation_mode}"
    return None


def process_unsupported_mode() -> Optional[str]:
    """``unsupported_mode`` of this process's resolved settings (scheduler side, after SGLang has
    published them). SGLang 0.5.23 keeps the raw command line on ``ServerArgs`` and publishes the
    resolved values in namespace bags (``srt/runtime_context.py``: ``get_spec()``, ``get_disagg()``),
    which is what its own scheduler reads; a field left to SGLang's default is None on ``ServerArgs``."""
    from sglang.srt.runtime_context import get_disagg, get_spec

    spec = get_spec()
    return unsupported_mode(spec.speculative_algorithm, get_disagg().disaggregation_mode, spec.speculative_eagle_topk)


def why_unsupported(speculative_algorithm: Optional[str], disaggregation_mode: Optional[str],
                    eagle_topk=None) -> Optional[str]:
    """A one-line explanation for the start-up refusal, or None if the mode is supported."""
    algorithm = (speculative_algorithm or "").upper()
    if algorithm in UNSUPPORTED_CHAINS and _chain(eagle_topk):
        return (f"ASD cannot run with --speculative-algorithm {algorithm} and --speculative-eagle-topk "
                f"{eagle_topk or 1}: {UNSUPPORTED_CHAINS[algorithm]}")
    mode = disaggregation_mode or "null"
    if mode in UNSUPPORTED_DISAGGREGATION:
        return f"ASD cannot run with --disaggregation-mode {mode}: {UNSUPPORTED_DISAGGREGATION[mode]}"
    return None
