"""FLy (arXiv 2511.22972) as vLLM serves it, for one chain or tree block. Standard library only.

What vLLM does (its ``rejection_sample_method: "fly"``; sources are files of
github.com/vllm-project/vllm):

- Entropy (``vllm/v1/spec_decode/fly.py``, ``compute_fly_entropy``): ``H = -sum p log p`` over the
  ``fly_entropy_top_k`` (default 3, ``docs/features/speculative_decoding/fly.md``; capped at the
  vocabulary size) largest probabilities of the *processed* target distribution: the softmax over
  the whole vocabulary (``top_values - logsumexp(values)`` when given logits), **not renormalised**
  over the top k, natural log, in float32; a zero probability adds 0. For a greedy request the
  processed distribution is the softmax of the final logits (no temperature).
- Deferral (``apply_fly_greedy_acceptance_kernel``, same file): at draft position ``pos`` of a
  request's ``n`` draft tokens a rejection is deferred, i.e. the draft token accepted, iff
  the draft token differs from the target's argmax there, is a valid id whose target logit is
  not ``-inf``, ``pos + W < n`` (the whole window lies inside the block's draft tokens: a window
  never runs past the block's end, so the last ``W`` positions are never deferred), the entropy
  there is ``>= fly_entropy_threshold`` (default 0.3), and each of the next ``W`` draft tokens
  equals the target's argmax at its own position. Those argmaxes come from the same verify
  forward, so they are the target's choices under the prefix that includes the mismatched token.
  The kernel then overwrites the argmax at ``pos`` with the draft token and vLLM's unchanged
  greedy kernel accepts up to the first position that is neither exact nor deferred.
- A second mismatch inside a window fails the first one's window (its draft != argmax), so that
  first mismatch is rejected and the block ends there. Deferrals in one block are therefore
  separated by at least ``W`` exact tokens, and an accepted prefix never ends inside a window.
- ``fly_window_size`` defaults to ``min(6, num_speculative_tokens - 1)`` and must be smaller than
  the number of speculative tokens; FLy needs at least two (``fly.md``).
- Sampled requests (``apply_fly_random_acceptance_kernel``): at a native p/q rejection with
  ``p(x) > 0`` and ``q(x) > 0``, the same window fitting and entropy test, and the next ``W``
  positions natively accepted under their own uniforms, the uniform at ``pos`` is set to 0 so
  the native kernel accepts. ``fly.md``: greedy requests, and sampled requests with target-only or
  probabilistic draft sampling.

What this project serves (``asd_rule: "fly"``, per request): the greedy rule above. The window
along a tree path: a path may be accepted iff each node is exact or a deferral candidate
(mismatch, finite regret, no stop token, parent's entropy >= threshold), every candidate on it is
followed on that path by at least ``W`` exact nodes before the next candidate, and the last one's
window is complete inside the path. On a chain this is vLLM's accepted length exactly
(``select_chain_fly`` computes it vLLM's way, ``select_tree_fly`` the path way; the tests hold the
two equal); on a tree the deepest such path wins (ties: smaller regret, then smaller node index,
as for every rule). Differences from vLLM, both on the stricter side: a stop token is never
deferred (every rule's convention here), and ``W = 0`` means "vLLM's default" (``min(6, K - 1)``,
at least 1), not a window of zero. A sampled request with ``asd_rule: "fly"`` is served as stock
SGLang samples it, with the receipt's reason ``fly_sampled`` (vLLM's sampled FLy is not served).

Serving order: the window and the entropy are read from one verify round's logits, so FLy keeps
no state across rounds; the one thing it carries is fly-bounded's ``remaining``, charged on the
device in the verify step's stream order exactly like asd's (``sglang_seams/step/verify_step.py``:
under the overlap scheduler batch N+1's verify reads batch N's charge; the host receipts trail by
one round). Its row's columns (threshold, window, top-k) are written only at admission.

Each deferral is recorded with its regret (the target's log-probability gap, spec section 2), so
FLy's spend is comparable with the other rules'. ``fly`` has no ledger: B > 0 is its opt-in, as
for margin and threshold. ``fly-bounded`` takes the same deferrals under asd's ledger (a block's
regret <= B - spent, charged to the request): a separate rule rather than a field, because rules
are the unit this project serves, validates, reports (receipt ``rule``, metrics label) and lets a
server allow (``--asd-allowed-rules``), and because "bounded or not" is exactly the ledger trait
that already separates asd from local.
"""

from __future__ import annotations

import dataclasses
import math
from typing import AbstractSet, Optional, Sequence, Tuple

from sglang_asd.policy.config import ASDConfig
from sglang_asd.policy.ledger import ExceptionEvent, Ledger
from sglang_asd.policy.rule import ChainDecision, block_limit
from sglang_asd.policy.tree import TreeDecision, _check_tree, _path_to

FLY_MAX_DEFAULT_WINDOW = 6  # vLLM's default window is min(6, K - 1)


def fly_window(window: int, depth: int) -> int:
    """The window a row uses: ``window``, or (0) vLLM's default min(6, K - 1), at least 1."""
    return window if window > 0 else max(min(FLY_MAX_DEFAULT_WINDOW, depth - 1), 1)


def top_k_entropy(logits: Sequence[float], top_k: int) -> float:
    """-sum p log p over the ``top_k`` largest p = softmax(logits) (over the whole vocabulary, not
    renormalised), in nats; NaN where the logits hold a NaN or no finite value."""
    if any(z != z for z in logits):
        return math.nan
    finite = [z for z in logits if z > -math.inf]
    if not finite or max(finite) == math.inf:
        return math.nan
    m = max(finite)
    lse = m + math.log(sum(math.exp(z - m) for z in finite))
    h = 0.0
    for z in sorted(logits, reverse=True)[:top_k]:
        log_p = z - lse
        p = math.exp(log_p)
        if p > 0:
            h -= p * log_p
    return h


def _candidate(regret: float, entropy: float, is_stop: bool, limit: float, config: ASDConfig) -> bool:
    """The node-local part of a deferral: the row is on (B > 0; fly-bounded: B - spent > 0), the
    token is no stop token, its regret finite (its target logit not -inf), the entropy high."""
    return limit > 0 and not is_stop and math.isfinite(regret) and entropy >= config.fly_entropy_threshold


def select_chain_fly(
    draft: Sequence[int],
    target_argmax: Sequence[int],
    regret: Sequence[float],
    entropy: Sequence[float],
    ledger: Ledger,
    config: ASDConfig,
    stop_tokens: AbstractSet[int] = frozenset(),
    produced: int = 0,  # output tokens before the block: fly-bounded under an accrual (rule.block_limit)
) -> ChainDecision:
    """One chain block under fly or fly-bounded, computed as vLLM does: mark each deferrable
    position (its whole window exact), then accept up to the first position neither exact nor
    deferred; fly-bounded also stops where the block's regret would pass B - spent.

    draft: [K]; target_argmax: [K+1]; regret: [K] r_i; entropy: [K+1] the target's top-k entropy
    at each of z_0..z_K (position i reads entropy[i])."""
    K = len(draft)
    if not (len(target_argmax) == len(entropy) == K + 1 and len(regret) == K):
        raise ValueError(f"target_argmax and entropy need K + 1 = {K + 1} entries and regret K, got "
                         f"{len(target_argmax)}, {len(entropy)}, {len(regret)}")
    limit = block_limit(ledger, config, produced)
    W = fly_window(config.fly_window_size, K)
    exact = [draft[i] == target_argmax[i] for i in range(K)]
    deferred = [
        not exact[i] and i + W < K and all(exact[i + 1: i + W + 1])
        and _candidate(regret[i], entropy[i], draft[i] in stop_tokens, limit, config)
        for i in range(K)
    ]
    accepted, events, block_regret = [], [], 0.0
    for i, token in enumerate(draft):
        if exact[i]:
            accepted.append(token)
            continue
        if not deferred[i] or (config.traits.block_limited and block_regret + regret[i] > limit):
            break
        accepted.append(token)
        events.append(ExceptionEvent(i, token, target_argmax[i], regret[i]))
        block_regret += regret[i]
    spent = ledger.charge(events)
    return ChainDecision(accepted=tuple(accepted), exceptions=tuple(e.position for e in events), spent=spent,
                         bonus=target_argmax[len(accepted)])


@dataclasses.dataclass(frozen=True)
class _FlyPath:
    depth: int
    exception_nodes: Tuple[int, ...]
    regret: float
    since: int  # exact nodes since the path's last deferral (no deferral yet: unbounded)


def select_tree_fly(
    tokens: Sequence[int],
    parents: Sequence[int],
    target_argmax: Sequence[int],
    regret: Sequence[float],
    entropy: Sequence[float],
    depth: int,
    ledger: Ledger,
    config: ASDConfig,
    stop_tokens: AbstractSet[int] = frozenset(),
    window_depth: Optional[int] = None,
    produced: int = 0,  # as select_chain_fly's
) -> TreeDecision:
    """One tree block under fly or fly-bounded, path by path (module docstring): the deepest node
    whose path passes, ties to the smaller regret, then the smaller node index. Inputs as
    ``select_tree``'s; entropy: [W] the target's top-k entropy at each node (a node's token is
    judged by its parent's); window_depth: the K of the default window (default ``depth``)."""
    _check_tree(tokens, parents, target_argmax, regret)
    if len(entropy) != len(tokens):
        raise ValueError(f"entropy must have W = {len(tokens)} entries, got {len(entropy)}")
    limit = block_limit(ledger, config, produced)
    W = fly_window(config.fly_window_size, depth if window_depth is None else window_depth)
    states: list[Optional[_FlyPath]] = [None] * len(tokens)
    states[0] = _FlyPath(0, (), 0.0, math.inf)
    seen: set[Tuple[int, int]] = set()
    for n in range(1, len(tokens)):
        parent = parents[n]
        if (parent, tokens[n]) in seen:
            continue  # duplicate sibling: never looked at
        seen.add((parent, tokens[n]))
        up = states[parent] if parent >= 0 else None
        if up is None or up.depth >= depth:
            continue
        if tokens[n] == target_argmax[parent]:
            states[n] = _FlyPath(up.depth + 1, up.exception_nodes, up.regret, up.since + 1)
        elif up.since >= W and _candidate(regret[n], entropy[parent], tokens[n] in stop_tokens, limit, config):
            states[n] = _FlyPath(up.depth + 1, up.exception_nodes + (n,), up.regret + regret[n], 0)
    block_limited = config.traits.block_limited
    accepted = [n for n, s in enumerate(states)
                if s is not None and s.since >= W and (not block_limited or not s.exception_nodes or s.regret <= limit)]
    best = min(accepted, key=lambda n: (-states[n].depth, states[n].regret, n))
    path = _path_to(best, parents)
    exceptions = tuple(i for i, n in enumerate(path) if n in states[best].exception_nodes)
    events = [ExceptionEvent(i, tokens[path[i]], target_argmax[parents[path[i]]], regret[path[i]]) for i in exceptions]
    spent = ledger.charge(events)
    return TreeDecision(path=path, accepted=tuple(tokens[n] for n in path), exceptions=exceptions, spent=spent,
                        bonus=target_argmax[best])
