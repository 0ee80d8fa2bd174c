"""Seams in every scheduler process (one per TP rank), one module per hooked SGLang class or
function: the request's ledger, receipt, metrics and verify warm-up (``scheduler``: every
``Scheduler`` hook), its device ledger row on the request-pool slot lifecycle
(``req_to_token_pool``), the verify step (``eagle_sample``) and the STANDALONE draft's KV
convention (``standalone_draft``, opt-in). Two helpers hook nothing: ``verify_warmup`` (the
warm-up and the serving check, called from ``scheduler`` and ``eagle_sample``) and
``arguments`` (SGLang parameters read by name, bound at install)."""
