"""One ASD verify step, for every drafter: open, decide, settle.

SGLang verifies drafts in three shapes, and a seam hooks each where SGLang decides:
- a tree (EAGLE, EAGLE3, NEXTN/MTP, STANDALONE, NGRAM): ``eagle_sample`` opens the step, and the
  decision is made inside the verify function SGLang's branch calls (``scheduler/eagle_sample.py``);
- a chain (DSPARK, DFLASH): the worker's decode step opens it and the drafter's accept decides
  (``scheduler/dspark_accept.py``, ``scheduler/dflash_accept.py``). A chain is EAGLE's chain layout:
  ``candidates [bs, W]`` = the anchor then ``K = W - 1`` drafts, logits row ``b * W + i`` scores
  ``candidates[b, i + 1]`` (row ``b * W + K``: the full-accept bonus), links ``i -> i + 1``
  (``chain_links``). Where a row verifies fewer tokens (DSPARK's cap layout, ``verify_lens``) its
  chain ends at node ``verify_lens - 1`` and the gate's suffix values use that depth
  (``tree_depth_gate``): the zero-filled rows past it are never read.
The hooks read SGLang's arguments, call this module and merge its decision into SGLang's result
(``torch.where`` on the rows ASD decided; every other row keeps SGLang's values). This module
holds everything else, once.

The step, numbered as in the code:
1. ``open``: the batch's ledger rows. The ledger table applies its staged admissions and
   releases, then gathers the batch's rows (remaining, gate, cap, stop tokens, rule, power, the
   output count and the accrual) and each row's ``limit``: its remaining, and under a per-token rate
   at most rate x produced + burst - spent (``state/ledger_table.py`` "Accrual"), which is the
   remaining every verifier and ``rows_on`` read in this step; the
   greedy rows ASD decides (``active``, ``verify.rules.rows_on``) and, where the caller serves
   the sampled rule and the table holds a sampled row, the sampled rows (``sampled_active``,
   ``sampled_rows_on``; disjoint from ``active`` by rule id). No table, no ASD row in it, or an
   idle batch: no step, SGLang's result as is. ``published`` makes the step the current one
   (one ContextVar) while SGLang's code runs, so the deciding hook finds it (``current``).
2. ``decide``: the greedy rows. ``asd_verify`` on the final logits (after penalties, logit bias
   and the grammar mask, which SGLang applies in place before it verifies), with SGLang's argmax
   where it has one (``target_predict``: no second pass over the vocabulary, regrets are two
   gathers); each row under its own rule, the kernel chosen from the table's host view of the
   rules in use (``rules_active``: the fused Triton kernel when every ASD row is asd or local,
   the torch verifier otherwise); then every TP rank takes one decision (below). Which SGLang
   path ran is explicit (``step.branch``): on EAGLE's greedy branch its hook decides inside
   ``verify_tree_greedy_func``; when SGLang took its sampling branch (``Branch.SAMPLING``: a batch
   holding a sampled row, on a platform whose verify samples) the greedy rows are decided after
   ``eagle_sample`` returns, the verifier computing their argmax; a chain decides in its accept.
   ``decide_sampled``: the sampled rows (``asd-sampled-1``, docs/SAMPLED.md) with
   ``asd_sampled_verify`` on the same coins and processed probabilities SGLang's sampling kernel
   used (rows other than the sampled ones get remaining 0: SGLang's walk), on fresh buffers.
3. ``settle``: the device ledger is charged in one write (asd and fly-bounded rows: their regret;
   sampled rows: their KL, ``spent`` of the sampled verifier; strict rows spend 0, padding rows map
   to the all-zero slot 0, local rows keep B for the next block, margin, threshold and fly have no
   ledger; the accrual column ``burst_left`` is lowered by the same spend, +inf staying +inf),
   and the round's receipts (``ASDRoundOutput.of_round``, ``with_sampled``) are left on the step;
   ``attach`` hands them to SGLang with the batch's logits output, copied to the host with the
   batch's tokens and consumed once SGLang has committed them (``state/round_output.py``).
   A step with no greedy decision (no greedy ASD row in the table) settles SGLang's result with
   no exception.

Ordering (overlap scheduler, CUDA graphs, stream order). Every call here runs in the worker's
verify step, after the target's verify forward (graph replay or eager), eagerly, on the stream
that runs the forward: ``eagle_sample`` and its sampling branch are host code between the forward
and the draft-extend, never captured in a graph; a block drafter's accept runs eagerly inside its
decode step before ``on_publish`` (DSPARK's accept folded into the verify graph is disarmed in a
step holding an ASD row, ``dspark_accept.py``). So the table is read (``open``, staged writes
applied first) and charged (``settle``) in this stream's order (``state/ledger_table.py``), and
batch N+1's verify reads batch N's charge although the host has not processed batch N yet. The
host ledger trails the device by one round under the overlap scheduler: receipts come from the
per-round outputs of rounds whose tokens were committed, so a request finished in round N is not
charged for the round N+1 it was still part of (the device charge of that round only lowers a
finished request's row, which its release zeroes). The rules add no ordering of their own: a
row's rule id is written only with its admission (staged, applied by ``open``), the kernel choice
reads the host view that matches exactly the rows applied at this step's issue, and only asd,
fly-bounded and sampled rows' ``remaining`` changes from round to round (fly's window is a test
inside one block's logits: it carries nothing from round to round but that charge). The accrual
adds none either: its ``burst_left`` column is charged with ``remaining``, by the same ``settle``
write order, and the limit is computed in ``open`` from the columns the previous step's ``settle``
left on this stream (charge and output count), so it lags the device by nothing and the host by
the same one round as ``remaining``. Host views (``rules_active``,
``sampled_active``, ``holds_asd``) are host state: the step never syncs with the device.

Tensor parallelism. Every rank runs the step on its own logits and ledger table; the ledgers stay
identical because every rank takes rank 0's decision exactly where SGLang makes every rank take rank
0's result (``verify.tp.rank_consistent`` over the caller's group, before the merge; docs/CONTRACTS.md,
"Tensor parallelism"): on EAGLE's ROCm greedy branch, UNO's sparse target sampling and the sampling
branch (a batch holding a sampled request; its greedy rows are decided after SGLang's broadcast, so
ASD's own broadcast makes them rank 0's; ``eagle_sample._broadcast_group`` reads SGLang's branch
predicate), and for DSPARK and DFLASH at the sync site SGLang's accept picks for the batch, where
``SGLANG_SPEC_TP_SYNC`` has it on (``decide_chain(sync_site=...)``, ``accept_group``). Elsewhere SGLang
relies on every rank holding the same logits bits (gathered vocab-parallel logits), and so does ASD:
no collective. So every rank commits rank 0's tokens and charges rank 0's regret and KL. The
broadcast is issued on the step's stream with the rest of the step (one collective, no host sync),
before ``settle`` charges the table, so the charge is rank 0's in stream order. The group is chosen
from host state of the batch being verified (its ``sampling_info.is_all_greedy``, the drafter's
branch flags), never from the previous batch's, so the overlap scheduler's one-step lag cannot pair
a batch with another batch's group.

Fused-kernel variants: the first call of each shape is checked against the start-up warm-up's
list (``step/warmup.py``: a set lookup per step).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
from contextvars import ContextVar
from typing import FrozenSet, Iterator, Optional

import torch

from sglang.srt.managers.auxiliary_output import append_auxiliary_output

from sglang_asd.sglang_seams.state.ledger_table import ASDLedgerTable, LedgerRows
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.sglang_seams.step.warmup import check_variant
from sglang_asd.verify import ASDVerifyOutput, asd_verify
from sglang_asd.verify.rules import row_traits, rows_on, sampled_rows_on
from sglang_asd.verify.dispatch import SampledVerifyOutput, asd_sampled_verify
from sglang_asd.verify.scope import committed_state, root_state
from sglang_asd.verify.tp import rank_consistent


class Branch(enum.Enum):
    """Which of SGLang's verify paths ran inside the step (set by the hook SGLang called)."""

    GREEDY = "greedy"  # EAGLE's greedy branch: ``verify_tree_greedy_func``
    SAMPLING = "sampling"  # EAGLE's sampling branch: ``tree_speculative_sampling_target_only``
    CHAIN = "chain"  # a block drafter's accept


@dataclasses.dataclass
class VerifyStep:
    """One verify step of one batch, from ``open`` to ``settle``."""

    table: ASDLedgerTable
    slots: torch.Tensor  # [bs] int64 request-pool slots (``batch.req_pool_indices``, device)
    rows: LedgerRows  # the batch's ledger rows, gathered by ``open``
    active: torch.Tensor  # [bs] bool: greedy rows ASD decides (``rows_on``)
    rules_active: FrozenSet[str]  # host view: the greedy rules the table's ASD rows use (superset of this batch's)
    sampled_active: Optional[torch.Tensor]  # [bs] bool: sampled rows (``sampled_rows_on``); None: none served
    group: Optional[object]  # process group rank 0's greedy decision is broadcast over, or None
    slots_cpu: Optional[torch.Tensor]  # [bs] the slots on the host (SGLang's ``req_pool_indices_cpu``), or None
    # What a tree verify's deciding hook needs of the call that opened the step (EAGLE):
    logits: Optional[torch.Tensor] = None  # [bs*W, V] final logits (SGLang modifies them in place before argmax)
    depth: int = 0  # K
    tree_depth_gate: bool = False  # NGRAM: the gate's K is each row's tree depth
    max_children: Optional[int] = None  # host: EAGLE's topk bounding a node's children; None: W - 1
    tp_sync: Optional[object] = None  # a block drafter's ``SpecTpSync`` (its accept picks ``group`` by site)
    # A block drafter's step: its accept decides (``decide_chain``). EAGLE's verify hooks leave it alone:
    # DFLASH's sampling accept calls the kernel the sampling branch's hook wraps.
    chain: bool = False
    # Set as the step runs:
    branch: Optional[Branch] = None  # the SGLang path that ran (None: none yet)
    decision: Optional[ASDVerifyOutput] = None  # the greedy rows' decision (every rank's)
    sampled: Optional[SampledVerifyOutput] = None  # the sampled rows' decision (every rank's)
    round_output: Optional[ASDRoundOutput] = None  # set by ``settle``

    @functools.cached_property
    def holds_asd(self) -> bool:
        """Host view: the batch holds an ASD row (no sync; with no host slots, any row in the table)."""
        return self.table.holds_rows(self.slots_cpu)


_STEP: ContextVar[Optional[VerifyStep]] = ContextVar("asd_verify_step", default=None)


# --- 1. open ------------------------------------------------------------------------------------


def open(batch, group=None, *, sampled: bool = False, **call) -> Optional[VerifyStep]:
    """Step 1: the step of ``batch`` if its ledger table holds an ASD row, else None. ``group``:
    the process group rank 0's greedy decision is broadcast over (None: ranks agree);
    ``sampled``: the caller serves the sampled rule; ``call``: the tree verify's fields
    (``logits``, ``depth``, ``tree_depth_gate``, ``max_children``)."""
    table = getattr(batch.req_to_token_pool, "_asd_table", None)
    if table is None or table.num_active == 0 or batch.forward_mode.is_idle():
        return None
    slots = batch.req_pool_indices  # [bs] device
    r = table.begin_verify(slots)  # staged admissions and releases applied first: the host views are exact now
    return VerifyStep(
        table=table, slots=slots, rows=r, active=rows_on(r.limit, r.gate, r.cap, r.rule),
        rules_active=table.rules_active,
        sampled_active=sampled_rows_on(r.limit, r.gate, r.cap, r.rule) if sampled and table.sampled_active else None,
        group=group, slots_cpu=getattr(batch, "req_pool_indices_cpu", None), **call)


@contextlib.contextmanager
def published(step: VerifyStep) -> Iterator[VerifyStep]:
    """The current step while SGLang's code runs (the deciding hook reads it with ``current``)."""
    token = _STEP.set(step)
    try:
        yield step
    finally:
        _STEP.reset(token)


def current() -> Optional[VerifyStep]:
    """The published step on which no SGLang verify path has run yet, or None (outside a step, or
    a second call in one)."""
    step = _STEP.get()
    return step if step is not None and step.branch is None else None


# --- 2. decide ----------------------------------------------------------------------------------


def decide(step: VerifyStep, candidates: torch.Tensor, logits: torch.Tensor, retrieve_next_token: torch.Tensor,
           retrieve_next_sibling: torch.Tensor, depth: int, *, target_predict: Optional[torch.Tensor] = None,
           tree_depth_gate: bool = False) -> ASDVerifyOutput:
    """Step 2, the greedy rows: ``asd_verify`` on ``candidates`` [bs, W] and the final ``logits``
    [bs*W, V] along the tree's links [bs, W], ``target_predict`` [bs, W] SGLang's argmax or None;
    every rank's decision is rank 0's. Left on ``step.decision``; the caller merges the rows of
    ``step.active``."""
    r = step.rows
    if r.scope is None:  # a scoped batch runs the torch verifier (``verify.dispatch``): no kernel variant
        check_variant(candidates, logits, depth, r.stop_tokens, target_predict, step.rules_active)
    out = asd_verify(candidates, logits, retrieve_next_token, retrieve_next_sibling, r.limit, r.gate, r.cap,
                     depth, stop_tokens=r.stop_tokens, target_predict=target_predict, rule=r.rule,
                     rules_present=step.rules_active, tree_depth_gate=tree_depth_gate, fly_top_k=r.power,
                     scope=r.scope)
    step.decision = rank_consistent(out, step.group)
    return step.decision


def decide_sampled(step: VerifyStep, predicts, accept_index, accept_token_num, candidates, retrieve_index,
                   retrieve_next_token, retrieve_next_sibling, coins, final_coins, target_probs, threshold_single,
                   threshold_acc, group=None) -> SampledVerifyOutput:
    """Step 2, the sampled rows: ``asd_sampled_verify`` into the fresh buffers ``predicts`` [bs*W],
    ``accept_index`` [bs, K+1], ``accept_token_num`` [bs] with SGLang's coins and processed
    probabilities; the receipts and ``spent`` are rank 0's over ``group`` (SGLang's sampling
    broadcast then carries rank 0's merged tokens). Left on ``step.sampled``; the caller merges the
    rows of ``step.sampled_active``."""
    r, on = step.rows, step.sampled_active
    out = asd_sampled_verify(
        predicts, accept_index, accept_token_num, candidates, retrieve_index, retrieve_next_token,
        retrieve_next_sibling, coins, final_coins, target_probs,
        remaining=torch.where(on, r.limit, torch.zeros_like(r.limit)),
        floor=r.gate, cap=r.cap, power=r.power, stop_tokens=r.stop_tokens,
        threshold_single=threshold_single, threshold_acc=threshold_acc, max_children=step.max_children,
        scope=r.scope)
    step.sampled = rank_consistent(out, group)
    return step.sampled


def chain_links(bs: int, W: int, device, verify_lens: Optional[torch.Tensor] = None):
    """-> ``retrieve_next_token``, ``retrieve_next_sibling`` [bs, W] int64 of one chain per row:
    node i's child is i + 1 up to the last node, ``verify_lens - 1`` where given ([bs])."""
    node = torch.arange(W, device=device)
    last = torch.full((bs, 1), W - 1, device=device) if verify_lens is None else \
        (verify_lens.to(device=device, dtype=torch.int64) - 1)[:, None]
    next_token = torch.where(node[None, :] < last, node[None, :] + 1, -1)  # [bs, W]
    return next_token, torch.full((bs, W), -1, dtype=torch.int64, device=device)


def decide_chain(step: VerifyStep, candidates: torch.Tensor, logits: torch.Tensor,
                 verify_lens: Optional[torch.Tensor] = None, sync_site: Optional[str] = None):
    """Steps 2 and 3 for a block drafter's accept: ``decide`` on the chain, then ``settle``.

    ``candidates`` [bs, W] int64 (anchor, then K drafts), ``logits`` [bs*W, V] final,
    ``verify_lens`` [bs] tokens each row verified, or None (all W); ``sync_site``: the
    ``SpecTpSyncSite`` name SGLang's accept syncs this batch at (it depends on the batch: greedy,
    sampled, selector), whose group, when ``step.tp_sync`` has that site on, the decision is
    broadcast over (``accept_group``).
    -> ``num_correct_drafts`` [bs] int32, ``bonus`` [bs] int64, ``active`` [bs] bool: the values
    of the rows ASD decided (the caller keeps SGLang's for the others)."""
    step.branch = Branch.CHAIN
    if step.tp_sync is not None and sync_site is not None:
        step.group = accept_group(step.tp_sync, sync_site)
    bs, W = candidates.shape
    out = decide(step, candidates, logits, *chain_links(bs, W, candidates.device, verify_lens), W - 1,
                 tree_depth_gate=verify_lens is not None)
    settle(step, candidates, W - 1)
    # On a chain the node id is the depth: the bonus is the token emitted after node num_correct.
    bonus = out.predict.view(bs, W).gather(1, out.num_correct_drafts.long()[:, None]).squeeze(1)
    return out.num_correct_drafts, bonus.long(), step.active


# --- 3. settle ----------------------------------------------------------------------------------


def settle(step: VerifyStep, candidates: torch.Tensor, depth: int, sglang_result=None) -> ASDRoundOutput:
    """Step 3: charge the device ledger (one write) and leave the round's receipts on the step.

    ``candidates`` [bs, W]; ``sglang_result``: SGLang's ``(predict, accept_index,
    num_correct_drafts)`` after the merge, settled with no exception when no greedy row was decided.
    Every row's output count (``LedgerRows.produced``) advances by its committed tokens and, when
    the batch gathered scopes, its span state moves past the committed path (``verify.scope``), in
    the same stream order as the charge (``state/ledger_table.py``)."""
    out = step.decision if step.decision is not None else _no_exception(*sglang_result, depth)
    r = step.rows
    bs = step.slots.shape[0]
    charged = step.active & row_traits(r.rule, bs, r.rule.device).ledger  # asd and fly-bounded rows only
    spent = torch.where(charged, out.spent, torch.zeros_like(out.spent))  # [bs] this round's spend per row
    if step.sampled is not None:  # the sampled rows' KL (disjoint from the greedy rows)
        spent = spent + torch.where(step.sampled_active, step.sampled.spent, torch.zeros_like(step.sampled.spent))
    step.table.charge(step.slots, r.remaining - spent, r.burst_left - spent)  # the accrual: the same spend
    # Output tokens committed this round, every row: SGLang's merged count where it gives one (a
    # tree: greedy and sampled rows merged), else the decision's (a chain's ASD rows; its other
    # rows are strict greedy there, which is SGLang's chain verify).
    accept_index, merged = (out.accept_index, out.num_correct_drafts) if sglang_result is None else sglang_result[1:]
    step.table.advance(step.slots, r.produced + merged.to(r.produced.dtype) + 1)
    if r.scope is not None:  # the span state after the committed path, before the bonus (the next root)
        step.table.set_scope_state(step.slots, committed_state(r.scope, candidates, accept_index, merged))
    round_output = ASDRoundOutput.of_round(out, step.active, candidates, depth)
    if step.sampled is not None:
        round_output = round_output.with_sampled(step.sampled, step.sampled_active)
    step.round_output = round_output
    return round_output


def _no_exception(predict, accept_index, num_correct_drafts, depth: int) -> ASDVerifyOutput:
    """SGLang's own result as a decision with no exception."""
    bs = accept_index.shape[0]
    zeros = torch.zeros(bs, depth, dtype=torch.float32, device=accept_index.device)
    return ASDVerifyOutput(
        predict=predict, accept_index=accept_index, num_correct_drafts=num_correct_drafts,
        spent=torch.zeros(bs, dtype=torch.float32, device=accept_index.device),
        num_exceptions=torch.zeros_like(num_correct_drafts), exception_mask=zeros.bool(), exception_regret=zeros,
        target_token=torch.full((bs, depth), -1, dtype=torch.int64, device=accept_index.device),
        num_suffix_tokens=torch.zeros_like(num_correct_drafts))


def advance_zero_step(batch, roots: torch.Tensor) -> None:
    """A verify round with no draft position (SGLang's adaptive zero-step verify, K = 0) commits one
    token per row and decides nothing: only the rows' output counts advance and, with scopes, their
    span state moves past the root (``roots`` [bs], the last committed tokens), staged writes
    applied first, on the verify stream, as ``open`` does."""
    table = getattr(batch.req_to_token_pool, "_asd_table", None)
    if table is None or table.num_active == 0 or batch.forward_mode.is_idle():
        return
    slots = batch.req_pool_indices
    rows = table.begin_verify(slots)
    table.advance(slots, rows.produced + 1)
    if rows.scope is not None:
        table.set_scope_state(slots, root_state(rows.scope, roots.reshape(-1).long()))


def attach(logits_output, round_output: Optional[ASDRoundOutput]) -> None:
    """Hand the round's receipts to SGLang with the batch's logits output (none: nothing to hand)."""
    if round_output is not None:
        logits_output.auxiliary_device_output = append_auxiliary_output(logits_output.auxiliary_device_output,
                                                                        round_output)


# --- the TP groups SGLang broadcasts over -------------------------------------------------------


def tp_group():
    """SGLang's attention-TP group (the TP group without DP attention) as a torch process group,
    or None with one rank."""
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().attn_tp_group if is_dp_attention_enabled() else get_parallel().tp_group
    return group.device_group if group.world_size > 1 else None


def accept_group(tp_sync, site: str):
    """The process group over which a block drafter's ``SpecTpSync`` broadcasts rank 0's accept at
    ``site`` (a ``SpecTpSyncSite`` name), or None when that site is off."""
    from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

    try:
        return tp_sync._tp_group.device_group if tp_sync.enabled(SpecTpSyncSite[site]) else None
    except AttributeError as e:
        raise RuntimeError(f"sglang_asd: SGLang's speculative TP sync is not what this version reads ({e}); "
                           "this sglang_asd does not support this SGLang version") from e


def run_block_step(original, args: tuple, kwargs: dict, batch, tp_sync):
    """A block drafter's decode step: SGLang's ``original(*args, **kwargs)`` with the step published
    (when the ledger table holds ASD rows), then the receipts its accept settled attached.
    ``tp_sync``: the worker's ``SpecTpSync``; the accept picks the site (``decide_chain``)."""
    step = open(batch, None, tp_sync=tp_sync, chain=True)
    if step is None:
        return original(*args, **kwargs)
    with published(step):
        result = original(*args, **kwargs)
    attach(result.logits_output, step.round_output)
    return result
