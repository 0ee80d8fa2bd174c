"""One ASD verify round, shared by every verify seam: the charge, the round output, and the chain
decision of the block drafters (DSPARK, DFLASH).

Hooks nothing itself. ``eagle_sample.py`` (the EAGLE family, STANDALONE, NGRAM) decides on SGLang's
tree layout and calls ``settle_round``; ``dspark_accept.py`` and ``dflash_accept.py`` publish a
``BlockStep`` around their worker's decode step and call ``decide_chain`` from the drafter's accept.

A block drafter verifies one chain per request: ``candidates [bs, W]`` is the anchor (the last
committed token) followed by ``K = W - 1`` drafts, and logits row ``b * W + i`` scores
``candidates[b, i + 1]`` (row ``b * W + K`` gives the full-accept bonus): EAGLE's chain layout, so
``asd_verify`` decides it with chain links (next node ``i + 1``, no siblings). Where a row verifies
fewer tokens (DSPARK's cap-accept and compact modes: ``verify_lens [bs]``, the rows past it
zero-filled), its chain ends at node ``verify_lens - 1`` and the gate's suffix values use that
depth (``tree_depth_gate``): the zero-filled rows are never read, so they cannot look free.

Ordering (overlap scheduler, CUDA graphs): every call here runs in the worker's decode step, after
the target's verify forward (graph replay or eager), on the stream that runs it; the ledger rows
are gathered (staged admissions and releases applied first) and charged there, in stream order
(``state/ledger_table.py``). ``BlockStep.holds_asd`` is a host view (the table's host mask at the
batch's host slots), so the levers that read it (a folded accept disarmed, verify logits kept)
cost no sync.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Iterator, Optional

import torch

from sglang.srt.managers.auxiliary_output import append_auxiliary_output

from sglang_asd.sglang_seams.scheduler.verify_warmup import check_variant
from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable, LedgerRows
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.verify import ASDVerifyOutput, asd_verify
from sglang_asd.verify.rules import row_traits, rows_on
from sglang_asd.verify.tp import rank_consistent


def settle_round(table: ASDLedgerTable, rows: torch.Tensor, ledger_rows: LedgerRows, out: ASDVerifyOutput,
                 active: torch.Tensor, candidates: torch.Tensor, K: int) -> ASDRoundOutput:
    """Charge the device ledger and build the round's output for the host ledger.

    ``rows`` [bs] slots, ``ledger_rows`` their rows as gathered by ``begin_verify``, ``out`` the
    decision (every TP rank's, already made consistent), ``active`` [bs] the rows it decided,
    ``candidates`` [bs, W]. Only asd rows are charged: strict rows spend 0, padding rows map to
    the all-zero slot 0, local rows keep B for the next block, margin and threshold have no ledger."""
    bs = rows.shape[0]
    charged = active & row_traits(ledger_rows.rule, bs, ledger_rows.rule.device).ledger
    table.charge(rows, ledger_rows.remaining - torch.where(charged, out.spent, torch.zeros_like(out.spent)))
    return ASDRoundOutput.of_round(out, active, candidates, K)


def attach_round_output(logits_output, round_output: ASDRoundOutput) -> None:
    """Hand the round's output to SGLang with the batch's logits: copied to the host with the
    batch's tokens and consumed after they are committed (``state/round_output.py``)."""
    logits_output.auxiliary_device_output = append_auxiliary_output(logits_output.auxiliary_device_output,
                                                                    round_output)


@dataclasses.dataclass
class BlockStep:
    """One decode step of a block drafter, published around the worker's decode step."""

    table: ASDLedgerTable
    rows: torch.Tensor  # [bs] int64 request-pool slots (``batch.req_pool_indices``, device)
    holds_asd: bool  # host view: the batch holds an ASD row
    group: Optional[object]  # torch process group SGLang broadcasts rank 0's accept over, or None
    round_output: Optional[ASDRoundOutput] = None  # set by ``decide_chain``


_STEP: contextvars.ContextVar[Optional[BlockStep]] = contextvars.ContextVar("asd_block_step", default=None)


def open_step(batch, group) -> Optional[BlockStep]:
    """The step of a decode ``batch`` if the ledger table holds any ASD row, else None."""
    table = getattr(batch.req_to_token_pool, "_asd_table", None)
    if table is None or table.num_active == 0 or batch.forward_mode.is_idle():
        return None
    return BlockStep(table, batch.req_pool_indices, table.holds_rows(getattr(batch, "req_pool_indices_cpu", None)),
                     group)


@contextlib.contextmanager
def published(step: BlockStep) -> Iterator[BlockStep]:
    token = _STEP.set(step)
    try:
        yield step
    finally:
        _STEP.reset(token)


def run_step(original, args: tuple, kwargs: dict, batch, tp_sync, site: str):
    """A block drafter's decode step: SGLang's ``original(*args, **kwargs)`` with its ``BlockStep``
    published (when the ledger table holds ASD rows), then the round's output attached to the
    result. ``tp_sync``: the worker's ``SpecTpSync``; ``site``: the name of its sync site for the
    greedy accept (the group ASD broadcasts rank 0's decision over, when that site is on)."""
    step = open_step(batch, accept_group(tp_sync, site))
    if step is None:
        return original(*args, **kwargs)
    with published(step):
        result = original(*args, **kwargs)
    if step.round_output is not None:
        attach_round_output(result.logits_output, step.round_output)
    return result


def accept_group(tp_sync, site: str):
    """The torch process group over which SGLang broadcasts rank 0's accept at ``site``, or None."""
    from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

    try:
        return tp_sync._tp_group.device_group if tp_sync.enabled(SpecTpSyncSite[site]) else None
    except AttributeError as e:
        raise RuntimeError(f"sglang_asd: SGLang's speculative TP sync is not what this version reads ({e}); "
                           "this sglang_asd does not support this SGLang version") from e


def current_step() -> Optional[BlockStep]:
    """The published step that has not been decided yet, or None."""
    step = _STEP.get()
    return step if step is not None and step.round_output is None else None


def chain_links(bs: int, W: int, device, verify_lens: Optional[torch.Tensor] = None):
    """-> ``retrieve_next_token``, ``retrieve_next_sibling`` [bs, W] int64 of one chain per row:
    node i's child is i + 1 up to the last node, ``verify_lens - 1`` where given ([bs])."""
    node = torch.arange(W, device=device)
    last = torch.full((bs, 1), W - 1, device=device) if verify_lens is None else \
        (verify_lens.to(device=device, dtype=torch.int64) - 1)[:, None]
    next_token = torch.where(node[None, :] < last, node[None, :] + 1, -1)  # [bs, W]
    return next_token, torch.full((bs, W), -1, dtype=torch.int64, device=device)


def decide_chain(step: BlockStep, candidates: torch.Tensor, logits: torch.Tensor,
                 verify_lens: Optional[torch.Tensor] = None):
    """Decide the ASD rows of one chain verify, charge them, leave the round output on ``step``.

    ``candidates`` [bs, W] int64 (anchor, then K drafts), ``logits`` [bs*W, V] final (after
    penalties, bias, grammar mask), ``verify_lens`` [bs] tokens each row verified, or None (all W).
    -> ``num_correct_drafts`` [bs] int32, ``bonus`` [bs] int64, ``active`` [bs] bool: the values
    of the rows ASD decided (the caller keeps SGLang's for the others)."""
    bs, W = candidates.shape
    K = W - 1
    r = step.table.begin_verify(step.rows)
    active = rows_on(r.remaining, r.gate, r.cap, r.rule)
    next_token, next_sibling = chain_links(bs, W, candidates.device, verify_lens)
    check_variant(candidates, logits, K, r.stop_tokens, None, step.table.rules_active)
    out = asd_verify(candidates, logits, next_token, next_sibling, r.remaining, r.gate, r.cap, K,
                     stop_tokens=r.stop_tokens, rule=r.rule, rules_present=step.table.rules_active,
                     tree_depth_gate=verify_lens is not None)
    out = rank_consistent(out, step.group)
    step.round_output = settle_round(step.table, step.rows, r, out, active, candidates, K)
    # On a chain the node id is the depth: the bonus is the token emitted after node num_correct.
    bonus = out.predict.view(bs, W).gather(1, out.num_correct_drafts.long()[:, None]).squeeze(1)
    return out.num_correct_drafts, bonus.long(), active
