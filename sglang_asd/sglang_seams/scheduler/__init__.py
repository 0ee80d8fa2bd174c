"""Seams in every scheduler process (one per TP rank): the request's ledger and receipt
(``scheduler``), its device ledger row on the request-pool slot lifecycle (``req_to_token_pool``),
the verify step (``eagle_sample``), the verify warm-up (``verify_warmup``) and the STANDALONE
draft's KV convention (``standalone_draft``, opt-in)."""
