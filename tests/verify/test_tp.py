"""Tensor parallelism: two gloo ranks on the CPU.

1. Identical inputs on both ranks -> identical decisions (the verifier is deterministic).
2. Rank 1's logits deliberately perturbed -> different decisions, until ``broadcast_decision``
   makes the source rank's decision everyone's (default group and a subgroup, src 0 and 1), and
   ``rank_consistent`` the group's first rank's.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist

from sglang_asd.testing import make_round
from tests.gloo_ranks import run_ranks
from sglang_asd.verify import ASDVerifyOutput, asd_verify
from sglang_asd.verify.tp import broadcast_decision, rank_consistent

WORLD = 2


def _as_dict(out: ASDVerifyOutput) -> dict:
    return {f.name: getattr(out, f.name).clone() for f in dataclasses.fields(out) if getattr(out, f.name) is not None}


def _rank(rank: int) -> dict:
    rnd = make_round(seed=5, bs=4, W=7, K=3, V=64, shape="random", logits="hard")  # same inputs on every rank
    args, kwargs = rnd.args()
    same = asd_verify(*args, **kwargs)
    logits = rnd.logits if rank == 0 else torch.roll(rnd.logits, 1, dims=1)  # rank 1 sees other logits
    own = asd_verify(args[0], logits, *args[2:], **kwargs)
    from_0 = broadcast_decision(own)
    pair = dist.new_group([0, 1])
    from_1 = broadcast_decision(own, group=pair, src=1)
    followed = rank_consistent(own, pair)
    return {"same": _as_dict(same), "own": _as_dict(own), "from_0": _as_dict(from_0),
            "from_1": _as_dict(from_1), "followed": _as_dict(followed)}


def _equal(a: dict, b: dict) -> bool:
    return all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_ranks(_rank, tmp_path_factory.mktemp("tp"), WORLD)


def test_identical_inputs_give_identical_decisions(ranks):
    assert _equal(ranks[0]["same"], ranks[1]["same"])


def test_perturbed_logits_disagree_until_broadcast(ranks):
    r0, r1 = ranks
    assert not _equal(r0["own"], r1["own"])  # the perturbation changed rank 1's decision
    assert _equal(r0["from_0"], r0["own"]) and _equal(r1["from_0"], r0["own"])
    assert _equal(r0["from_1"], r1["own"]) and _equal(r1["from_1"], r1["own"])
    assert _equal(r0["followed"], r0["own"]) and _equal(r1["followed"], r0["own"])  # rank_consistent: the first rank's


def test_broadcast_round_trips_every_dtype_bit_for_bit():
    """Packing alone (one rank): fields come back with their dtype, shape and bits."""
    rnd = make_round(seed=8, bs=3, W=5, K=4, V=32, shape="chain", logits="hard")
    args, kwargs = rnd.args()
    out = asd_verify(*args, **kwargs)
    out = dataclasses.replace(out, spent=torch.tensor([0.1, float("inf"), -0.0]))
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        back = broadcast_decision(out)
        assert rank_consistent(out, None) is out  # no group: ranks agree by construction
    finally:
        dist.destroy_process_group()
    for f in dataclasses.fields(out):
        a, b = getattr(out, f.name), getattr(back, f.name)
        if a is None:  # scope_skipped without a scope: not broadcast, None on every rank
            assert b is None, f.name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, f.name
        assert torch.equal(a.reshape(-1).view(torch.uint8) if a.dtype != torch.bool else a,
                           b.reshape(-1).view(torch.uint8) if b.dtype != torch.bool else b), f.name
