"""The hot path never syncs with the host: no .item(), .tolist(), .cpu(), .numpy(), and no
Python branch on tensor data (which would call Tensor.__bool__)."""

from __future__ import annotations

import pytest
import torch
from sglang_asd.testing import make_round, strict_verify
from sglang_asd.verify import asd_verify
from tests.host_sync import forbid_host_sync



@pytest.fixture
def no_host_sync(monkeypatch):
    return lambda: forbid_host_sync(monkeypatch)


@pytest.mark.parametrize("shape,K,W", [("chain", 5, 6), ("eagle", 4, 8), ("chain", 0, 1)])
def test_asd_verify_does_not_sync(no_host_sync, shape, K, W):
    rnd = make_round(seed=1, bs=16, W=W, K=K, shape=shape, topk=3)
    args, kwargs = rnd.args()
    tp = rnd.logits.argmax(-1).view(16, W)
    no_host_sync()
    with pytest.raises(AssertionError, match="Tensor.item"):
        torch.ones(1).item()  # the patch is live
    asd_verify(*args, **kwargs)
    asd_verify(*args, **kwargs, target_predict=tp)
    asd_verify(*args)
    strict_verify(*rnd.strict_links())


@pytest.mark.parametrize("shape,K,W", [("chain", 5, 6), ("eagle", 4, 8)])
def test_every_rule_in_one_batch_does_not_sync(no_host_sync, shape, K, W):
    """Each row under its own rule, fly and fly-bounded included (the entropy pass, the window totals)."""
    from sglang_asd.policy import RULE_NAMES
    from sglang_asd.verify.rules import RULE_ID

    rnd = make_round(seed=2, bs=16, W=W, K=K, shape=shape, topk=3)
    args, kwargs = rnd.args()
    rule = torch.tensor([RULE_ID[RULE_NAMES[b % len(RULE_NAMES)]] for b in range(16)], dtype=torch.int32)
    top_k = torch.full((16,), 3.0)
    no_host_sync()
    asd_verify(*args, **kwargs, rule=rule, fly_top_k=top_k)
    asd_verify(*args, **kwargs, rule=rule, rules_present=frozenset(RULE_NAMES), fly_top_k=top_k)
