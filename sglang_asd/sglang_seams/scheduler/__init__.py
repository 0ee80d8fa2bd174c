"""Seams in every scheduler process (one per TP rank), one hook module per hooked SGLang class or
function: the request's ledger, receipt, metrics and verify warm-up (``scheduler``: every
``Scheduler`` hook), its device ledger row on the request-pool slot lifecycle
(``req_to_token_pool``; a PD decode server's pool: ``decode_req_to_token_pool``), the verify step
of the tree drafters (``eagle_sample``: EAGLE family, STANDALONE, NGRAM) and of the block drafters
(``dspark_accept``, ``dflash_accept``), and the STANDALONE draft's KV convention
(``standalone_draft``, opt-in). Only hook modules live here: the installer reads each one's
``SEAMS``."""
