"""The pure rules (``sglang_asd.policy.select_tree``) as the batched verifier's expected tensors.

``node_regrets`` measures each node's regret on its own route, not the verifier's: the gap of
log-probabilities under the parent's ``log_softmax`` (float64), log p(argmax) - log p(token),
which equals the logit gap (spec section 2); ``node_margins`` the target's top-2 margin the same
way. ``reference_outputs`` runs ``select_tree`` row by row, each row under its rule (``rules``:
a rule name per row; the row's ``gate`` is the rule's gate: g, the margin or the threshold), and
lays the decisions out as ``ASDVerifyOutput``'s fields; fly rows run ``select_tree_fly`` on the
verifier's own float32 entropies (``fly_entropies``: the decision logic is what the parity tests
compare; ``tests/verify/test_fly_verify.py`` holds those entropies to the float64 definition).
"""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang_asd.policy import RULE_NAMES, RULES, ASDConfig, Ledger, select_tree, tree_depth
from sglang_asd.policy.fly import select_tree_fly
from sglang_asd.testing import VerifyRound
from sglang_asd.verify.torch_verify import _top_k_entropy


def node_regrets(rnd: VerifyRound, target_predict: torch.Tensor) -> List[List[float]]:
    """regret[b][n] of node n's token under its parent's logits relative to ``target_predict``
    at the parent, clamped at 0 (a given target_predict need not be the argmax), rounded to
    float32; inf for a masked token, NaN for a row without a defined distribution; 0 at the
    root and at nodes outside the tree."""
    bs, W = rnd.candidates.shape
    log_p = torch.log_softmax(rnd.logits.double().cpu(), dim=-1).view(bs, W, -1)  # [bs, W, V]
    tp, tokens = target_predict.long().cpu().tolist(), rnd.candidates.cpu().tolist()
    regrets = []
    for b, parents in enumerate(rnd.parents):
        row = [0.0] * W
        for n in range(1, W):
            p = parents[n]
            if p >= 0:
                gap = float(log_p[b, p, tp[b][p]] - log_p[b, p, tokens[b][n]])
                row[n] = float(torch.tensor(max(gap, 0.0) if gap == gap else gap, dtype=torch.float32))
        regrets.append(row)
    return regrets


def node_margins(rnd: VerifyRound, target_predict: torch.Tensor) -> List[List[float]]:
    """margin[b][n] = log p(target_predict) - max over the other tokens of log p under node n's
    own logits, clamped at 0, rounded to float32 (NaN where the row holds a NaN)."""
    bs, W = rnd.candidates.shape
    log_p = torch.log_softmax(rnd.logits.double().cpu(), dim=-1)  # [bs*W, V]
    tp = target_predict.long().cpu().reshape(-1, 1)
    best = log_p.gather(1, tp).squeeze(1)
    others = log_p.scatter(1, tp, float("-inf"))
    gap = (best - others.max(dim=1).values).clamp_min(0)  # max propagates NaN
    return gap.float().view(bs, W).tolist()


def fly_entropies(rnd: VerifyRound, fly_top_k: Optional[torch.Tensor] = None) -> List[List[float]]:
    """entropy[b][n]: the verifier's FLy entropy at node n (top-k 3 unless ``fly_top_k`` [bs])."""
    bs = rnd.candidates.shape[0]
    top_k = torch.full((bs,), 3) if fly_top_k is None else fly_top_k
    return _top_k_entropy(rnd.logits.cpu(), top_k.long().cpu()).tolist()


def rule_config(rule: str, gate: float, cap: int, top_k: int = 3) -> ASDConfig:
    """The config of a row whose rule is ``rule`` and whose ``gate`` column holds ``gate`` (fly:
    ``cap`` is the window, ``top_k`` the entropy's)."""
    if RULES[rule].deferred:
        return ASDConfig(rule=rule, fly_entropy_threshold=gate, fly_window_size=cap, fly_entropy_top_k=top_k)
    return ASDConfig(max_exceptions_per_block=cap, rule=rule, **{RULES[rule].gate_field: gate})


def reference_outputs(rnd: VerifyRound, target_predict: Optional[torch.Tensor] = None,
                      rules: Optional[List[str]] = None, tree_depth_gate: bool = False,
                      fly_top_k: Optional[torch.Tensor] = None) -> dict:
    """select_tree on every row, as the tensors ``asd_verify`` must return (on the CPU).
    rules: a rule name per row (default asd); tree_depth_gate: the gate's K is the tree's depth."""
    bs, W = rnd.candidates.shape
    K = rnd.depth
    rules = rules or ["asd"] * bs
    tp = rnd.logits.argmax(-1).view(bs, W) if target_predict is None else target_predict.long()
    regrets = node_regrets(rnd, tp)
    margins = node_margins(rnd, tp)
    entropies = fly_entropies(rnd, fly_top_k) if any(RULES[r].deferred for r in rules) else None
    top_ks = [3] * bs if fly_top_k is None else fly_top_k.tolist()
    tp_rows = tp.cpu().tolist()
    tokens = rnd.candidates.cpu().tolist()
    stops = [[]] * bs if rnd.stop_tokens is None else rnd.stop_tokens.cpu().tolist()
    remaining, gate, cap = rnd.remaining.tolist(), rnd.gate.tolist(), rnd.cap.tolist()
    predict = [0] * (bs * W)
    accept_index = [[-1] * (K + 1) for _ in range(bs)]
    target_token = [[-1] * K for _ in range(bs)]
    exception_mask = [[False] * K for _ in range(bs)]
    exception_regret = [[0.0] * K for _ in range(bs)]
    num_correct, spent, num_exceptions, num_suffix = [], [], [], []
    for b in range(bs):
        ledger = Ledger(budget=max(remaining[b], 0.0), bounded=RULES[rules[b]].ledger)
        config = rule_config(rules[b], gate[b], cap[b], int(top_ks[b]))
        if config.traits.deferred:
            decision = select_tree_fly(tokens[b], rnd.parents[b], tp_rows[b], regrets[b], entropies[b], K, ledger,
                                       config, frozenset(stops[b]) - {-1})
        else:
            decision = select_tree(
                tokens=tokens[b],
                parents=rnd.parents[b],
                target_argmax=tp_rows[b],
                regret=regrets[b],
                depth=K,
                ledger=ledger,
                config=config,
                stop_tokens=frozenset(stops[b]) - {-1},
                target_margin=margins[b],
                gate_depth=tree_depth(rnd.parents[b], K) if tree_depth_gate else None,
            )
        nodes = (0,) + decision.path  # the node at slot s; slot i + 1 holds draft position i
        emitted = list(decision.accepted) + [decision.bonus]
        for s, node in enumerate(nodes):
            predict[b * W + node] = emitted[s]
            accept_index[b][s] = b * W + node
            if s < K:
                target_token[b][s] = tp_rows[b][node]  # the argmax that judges draft position s
        for i in decision.exceptions:
            exception_mask[b][i] = True
            exception_regret[b][i] = regrets[b][decision.path[i]]
        n = len(decision.path)
        first = decision.exceptions[0] if decision.exceptions else n
        num_correct.append(n)
        spent.append(decision.spent)
        num_exceptions.append(len(decision.exceptions))
        num_suffix.append(sum(1 for i in range(first + 1, n) if i not in decision.exceptions))
    return {
        "predict": torch.tensor(predict, dtype=torch.int32),
        "accept_index": torch.tensor(accept_index, dtype=torch.int32).view(bs, K + 1),
        "num_correct_drafts": torch.tensor(num_correct, dtype=torch.int32),
        "spent": torch.tensor(spent, dtype=torch.float32),
        "num_exceptions": torch.tensor(num_exceptions, dtype=torch.int32),
        "exception_mask": torch.tensor(exception_mask, dtype=torch.bool).view(bs, K),
        "exception_regret": torch.tensor(exception_regret, dtype=torch.float32).view(bs, K),
        "target_token": torch.tensor(target_token, dtype=torch.int64).view(bs, K),
        "num_suffix_tokens": torch.tensor(num_suffix, dtype=torch.int32),
    }


def rule_ids(rules: List[str]) -> torch.Tensor:
    """[bs] int32 rule ids (``sglang_asd.verify.rules.RULE_ID``) of rule names."""
    return torch.tensor([RULE_NAMES.index(r) for r in rules], dtype=torch.int32)
