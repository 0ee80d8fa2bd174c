"""min-p with seeds on CPU (``cpu_backend/seams/sampling.py``): SGLang's torch sampler asserts when a batch
needs min-p and carries seeds, and the CPU sampling seam gives every request a seed, so a ``min_p`` request
would take the scheduler down. The seam's sampler cuts min-p first and calls SGLang's without it."""

import inspect

import pytest
import torch

from sglang_asd import cpu_backend
from sglang_asd.cpu_backend import seams as cpu_seams
from sglang_asd.cpu_backend import env
from sglang_asd.cpu_backend.seams import sampling


@pytest.fixture
def seam(monkeypatch):
    """The seam applied, every binding it sets restored after the test."""
    for module, name in sampling.BINDINGS:
        owner, attr = sampling.binding(module, name)
        monkeypatch.setattr(owner, attr, inspect.getattr_static(owner, attr))
    monkeypatch.setattr(sampling, "_ORIGINAL", {})
    monkeypatch.setattr(cpu_backend, "is_installed", lambda: True)
    monkeypatch.setenv(env.CPU_SAMPLING_ENV, "on")
    assert cpu_seams.install_cpu_sampling() is True
    from sglang.srt.layers import sampler

    assert sampler.top_k_top_p_min_p_sampling_from_probs_torch is sampling.top_k_top_p_min_p_sampling_from_probs_torch
    return sampler


def _batch(bs: int = 64, V: int = 50, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(bs, V, generator=gen) * 2, dim=-1)
    return (probs, torch.full((bs,), V), torch.ones(bs), torch.arange(bs, dtype=torch.int64) * 7919,
            torch.arange(bs, dtype=torch.int64) + 3)


def test_sglang_asserts_on_min_p_with_seeds_and_the_seam_serves_it(seam):
    probs, top_ks, top_ps, seeds, positions = _batch()
    min_ps = torch.full((probs.shape[0],), 0.3)
    with pytest.raises(AssertionError, match="sampling seed"):
        sampling._ORIGINAL[sampling.SEEDED_SAMPLER](probs, top_ks, top_ps, min_ps, True, seeds, positions)
    ids = seam.top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, min_ps, True, seeds, positions)
    chosen = probs.gather(1, ids.long()[:, None]).squeeze(1)
    assert (chosen >= 0.3 * probs.amax(dim=-1)).all(), "every token must pass the min-p cut"
    again = seam.top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, min_ps, True, seeds, positions)
    assert torch.equal(ids, again), "seeded: the same draw"


def test_a_cut_that_removes_nothing_is_sglangs_seeded_draw(seam):
    """min_p 0 (a batch needing min-p for another row's sake): SGLang's own seeded draw, token for token;
    and top-k / top-p rows keep theirs beside min-p rows."""
    probs, top_ks, top_ps, seeds, positions = _batch(seed=1)
    top_ks[::3], top_ps[1::3] = 5, 0.6
    want = sampling._ORIGINAL[sampling.SEEDED_SAMPLER](probs, top_ks, top_ps, torch.zeros(64), False, seeds, positions)
    got = seam.top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, torch.zeros(64), True, seeds,
                                                           positions)
    assert torch.equal(got, want)


def test_without_seeds_sglang_applies_min_p_itself(seam):
    probs, top_ks, top_ps, _, positions = _batch(seed=2)
    min_ps = torch.full((probs.shape[0],), 0.5)
    ids = seam.top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, min_ps, True, None, positions)
    chosen = probs.gather(1, ids.long()[:, None]).squeeze(1)
    assert (chosen >= 0.5 * probs.amax(dim=-1)).all()
