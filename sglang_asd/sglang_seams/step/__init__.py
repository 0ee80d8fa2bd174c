"""The ASD verify step and what it needs, hooking nothing: ``verify_step`` (open, decide, settle:
one step for every drafter, called by the verify seams in ``scheduler/``) and ``warmup`` (every
verify kernel variant compiled before ready, and serving checked against that list)."""
