"""ASD takes rank 0's decision exactly where SGLang takes rank 0's result, in every TP sync mode.

SGLang's speculative steps broadcast from rank 0 at sites: EAGLE's ``eagle_sample`` on its sampling
branch (a batch holding a sampled request), on UNO's sparse target sampling and on ROCm's greedy
branch, never on the plain greedy branch elsewhere; DSPARK and DFLASH at the ``SpecTpSyncSite`` their
accept picks for the batch, each on or off by ``SGLANG_SPEC_TP_SYNC`` (presets all, off, none, init,
rng, or a list of sites). For every mode and batch kind, the group ASD broadcasts its decision (and so
its regret and KL) over must be present exactly where SGLang's own ``SpecTpSync.sync`` broadcasts.
The broadcast itself (two gloo ranks, rank 1's logits perturbed) is tests/seams/test_block_accept_tp.py
and, on a served TP=2 server, tests/integration/test_tp_cpu.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.sglang_seams.process import prepare_process

prepare_process()

from sglang.srt.speculative import eagle_utils  # noqa: E402
from sglang.srt.speculative.spec_tp_sync import SpecTpSync, SpecTpSyncSite  # noqa: E402

from sglang_asd.sglang_seams.scheduler import dflash_accept, dspark_accept, eagle_sample  # noqa: E402
from sglang_asd.sglang_seams.step import verify_step  # noqa: E402

MODES = ["all", "off", "none", "init", "rng", "dspark-accept-greedy", "dflash-accept-sample",
         "all,-dspark-accept-sample", "8,15"]
GREEDY = SimpleNamespace(is_all_greedy=True)
MIXED = SimpleNamespace(is_all_greedy=False)


class _Group:
    """SGLang's GroupCoordinator as SpecTpSync reads it (rank 1 of 2), recording its broadcasts."""

    world_size, rank_in_group, device_group = 2, 1, "tp-device-group"

    def __init__(self):
        self.broadcasts = 0

    def broadcast(self, values, src=0):
        self.broadcasts += 1
        return values


def _sglang_broadcasts(tp_sync: SpecTpSync, site: str) -> bool:
    group = tp_sync._tp_group
    before = group.broadcasts
    tp_sync.sync(SpecTpSyncSite[site], torch.zeros(1))
    return group.broadcasts > before


@pytest.fixture(params=MODES)
def tp_sync(request, monkeypatch):
    monkeypatch.setenv("SGLANG_SPEC_TP_SYNC", request.param)
    return SpecTpSync(_Group())


@pytest.mark.parametrize("sampling_info", [None, GREEDY, MIXED], ids=["simulated", "greedy", "mixed"])
def test_dspark_decision_is_rank_0s_where_sglangs_accept_is(tp_sync, sampling_info):
    site = dspark_accept.accept_site(sampling_info)
    # SGLang's accept_and_finalize: greedy site for no sampling info or an all-greedy batch, else sample
    assert site == ("DSPARK_ACCEPT_SAMPLE" if sampling_info is MIXED else "DSPARK_ACCEPT_GREEDY")
    group = verify_step.accept_group(tp_sync, site)
    assert (group is not None) == _sglang_broadcasts(tp_sync, site)
    assert group in (None, "tp-device-group")


@pytest.mark.parametrize("kind", ["selector", "sampling", "greedy", "greedy-predict"])
def test_dflash_decision_is_rank_0s_where_sglangs_accept_is(tp_sync, kind, monkeypatch):
    import sglang.srt.speculative.dflash_worker_v2 as dflash

    monkeypatch.setattr(dflash, "is_dflash_sampling_verify_available", lambda: True)
    worker = SimpleNamespace(_selector_sample=("ids", "q") if kind == "selector" else None)
    sampling_info = GREEDY if kind.startswith("greedy") else MIXED
    target_predict = torch.zeros(1) if kind == "greedy-predict" else None
    site = dflash_accept.accept_site(worker, sampling_info, target_predict)
    assert site == {"selector": "DFLASH_SELECTOR", "sampling": "DFLASH_ACCEPT_SAMPLE"}.get(kind, "DFLASH_ACCEPT_GREEDY")
    group = verify_step.accept_group(tp_sync, site)
    assert (group is not None) == _sglang_broadcasts(tp_sync, site)


def test_dflash_sampled_batch_without_the_sampling_verify_accepts_at_the_greedy_site(monkeypatch):
    import sglang.srt.speculative.dflash_worker_v2 as dflash

    monkeypatch.setattr(dflash, "is_dflash_sampling_verify_available", lambda: False)
    assert dflash_accept.accept_site(SimpleNamespace(_selector_sample=None), MIXED, None) == "DFLASH_ACCEPT_GREEDY"


@pytest.mark.parametrize("hip", [False, True], ids=["cuda-cpu", "rocm"])
@pytest.mark.parametrize("rejection", [False, True], ids=["kernel", "rejection-sampling"])
@pytest.mark.parametrize("sampling_info", [GREEDY, MIXED], ids=["greedy", "mixed"])
def test_eagle_decision_is_rank_0s_where_eagle_sample_broadcasts(monkeypatch, hip, rejection, sampling_info):
    """SGLang broadcasts ``predict``/``accept_index``/``num_correct_drafts`` unless the batch takes the
    plain greedy branch off ROCm; ASD's greedy decision (made after the broadcast on the sampling
    branch) is broadcast over the same group exactly then."""
    monkeypatch.setattr(eagle_utils, "_is_hip", hip)
    monkeypatch.setattr(eagle_utils, "_is_cpu", False)
    monkeypatch.setattr(eagle_utils, "get_spec", lambda: SimpleNamespace(speculative_use_rejection_sampling=rejection))
    monkeypatch.setattr(verify_step, "tp_group", lambda: "tp-device-group")
    group = eagle_sample._broadcast_group(SimpleNamespace(sampling_info=sampling_info))
    greedy_branch = eagle_utils._verify_uses_greedy(is_all_greedy=sampling_info.is_all_greedy, is_cpu=False,
                                                    is_hip=hip, is_xpu=False, use_rejection_sampling=rejection)
    sglang_broadcasts = hip or not greedy_branch  # eagle_sample: the ROCm greedy branch, UNO and sampling
    assert (group == "tp-device-group") == sglang_broadcasts
    if sampling_info is MIXED and not hip:
        assert group is not None, "a mixed batch is broadcast on the sampling branch: ASD's greedy rows too"
