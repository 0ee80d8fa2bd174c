"""asd_sampled_verify never syncs with the host: no .item(), .tolist(), .cpu(), .numpy(), and no
Python branch on tensor data (which would call Tensor.__bool__)."""

from __future__ import annotations

import pytest
import torch
from sampled_cases import make_sampled_round

FORBIDDEN = ["item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__"]


@pytest.mark.parametrize("shape,K", [("chain", 4), ("tree", 4), ("chain", 0)])
def test_sampled_verify_does_not_sync(monkeypatch, shape, K):
    rnd = make_sampled_round(1, bs=16, K=K, shape=shape)

    def forbid(name):
        def raiser(*args, **kwargs):
            raise AssertionError(f"Tensor.{name} called on the sampled verify hot path")

        return raiser

    for name in FORBIDDEN:
        monkeypatch.setattr(torch.Tensor, name, forbid(name))
    with pytest.raises(AssertionError, match="Tensor.item"):
        torch.ones(1).item()  # the patch is live
    rnd.verify()
    rnd.verify(stop_tokens=None)
