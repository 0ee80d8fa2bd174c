"""asd_sampled_verify never syncs with the host: no .item(), .tolist(), .cpu(), .numpy(), and no
Python branch on tensor data (which would call Tensor.__bool__)."""

from __future__ import annotations

import pytest
import torch
from sampled_cases import make_sampled_round
from tests.host_sync import forbid_host_sync



@pytest.mark.parametrize("shape,K", [("chain", 4), ("tree", 4), ("chain", 0)])
def test_sampled_verify_does_not_sync(monkeypatch, shape, K):
    rnd = make_sampled_round(1, bs=16, K=K, shape=shape)

    forbid_host_sync(monkeypatch, "on the sampled verify hot path")
    with pytest.raises(AssertionError, match="Tensor.item"):
        torch.ones(1).item()  # the patch is live
    rnd.verify()
    rnd.verify(stop_tokens=None)
