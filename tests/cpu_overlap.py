"""Test-only: SGLang's overlap scheduler with speculative decoding on CPU.

SGLang 0.5.23 switches the overlap scheduler off for speculative decoding on CPU
(``_disable_overlap_schedule_for_cpu`` in ``srt/arg_groups/speculative_hook.py``: "not implemented").
Undone here, the overlap loop serves on CPU once its one Triton kernel has a CPU path: the spec
extras gather of ``srt/managers/overlap_utils.py`` (``gather_spec_extras``, one fused Triton
launch; Triton has no CPU driver). ``gather_spec_extras`` below is the same row gather in torch.

What this exercises: the host side of the overlap scheduler (batch N+1 is launched before batch
N's results are processed, so a request finished by a stop token is still in batch N+1, and its
slot is freed and reused while N+1 is in flight). What it cannot: stream asynchrony, since every
op runs on the CPU when it is launched; ``tests/seams/test_ledger_table.py`` drives that order.
Imported first by ``tests.overlap_asd_server`` / ``tests.overlap_stock_server``, so it applies in
every process (spawned children import the main module first).
"""

from __future__ import annotations


def gather_spec_extras(indices, topk_p_buf, topk_index_buf, output_tokens_buf, hidden_states_buf):
    rows = indices.long()  # [m]
    hidden = None if hidden_states_buf is None else hidden_states_buf[rows]
    return topk_p_buf[rows], topk_index_buf[rows], output_tokens_buf[rows], hidden


def apply() -> None:
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.managers import overlap_utils

    speculative_hook._disable_overlap_schedule_for_cpu = lambda server_args: None
    overlap_utils.gather_spec_extras = gather_spec_extras
