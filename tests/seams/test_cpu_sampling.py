"""SGLang's sampling verify on CPU behind ``SGLANG_ASD_CPU_SAMPLING`` (``cpu_backend/seams/sampling.py``):
the switch's values (on by default), nothing patched when it is off (or without the stand-in), every binding
in place when it is on, each request's seed in SGLang's batch, the start-up check, and the torch ops against
plain references. Real servers serving it: ``tests/integration/test_sampled_serving.py``."""

import functools
import inspect
import os
import random
import struct
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from sglang_asd import cpu_backend
from sglang_asd.cpu_backend import seams as cpu_seams
from sglang_asd.cpu_backend import env
from sglang_asd.cpu_backend.seams import sampling


@pytest.fixture
def restored(monkeypatch):
    """Every binding the seam sets (and its record of SGLang's originals) as before the test."""
    for module, name in sampling.BINDINGS:
        owner, attr = sampling.binding(module, name)
        monkeypatch.setattr(owner, attr, inspect.getattr_static(owner, attr))
    monkeypatch.setattr(sampling, "_ORIGINAL", {})
    return monkeypatch


def _bindings() -> dict:
    return {(m, n): inspect.getattr_static(*sampling.binding(m, n)) for m, n in sampling.BINDINGS}


@pytest.mark.parametrize("value,on", [(None, True), ("", True), ("off", False), (" Off ", False), ("on", True),
                                      ("ON", True)])
def test_the_switch_reads_off_and_on(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(env.CPU_SAMPLING_ENV, raising=False)
    else:
        monkeypatch.setenv(env.CPU_SAMPLING_ENV, value)
    assert env.cpu_sampling() is on
    env.check_cpu_switches()


@pytest.mark.parametrize("value", ["yes", "1", "true", "o n"])
def test_a_bad_switch_value_names_the_variable_the_value_and_the_choices(monkeypatch, value):
    monkeypatch.setenv(env.CPU_SAMPLING_ENV, value)
    with pytest.raises(ValueError, match=f"SGLANG_ASD_CPU_SAMPLING='{value}': expected one of on, off"):
        env.cpu_sampling()
    with pytest.raises(ValueError, match="SGLANG_ASD_CPU_SAMPLING"):
        env.check_cpu_switches()  # what the launchers call before any process starts


@pytest.mark.parametrize("stand_in, switch", [(True, "off"), (False, "on")], ids=["switch-off", "gpu-install"])
def test_nothing_is_patched_unless_the_stand_in_serves_with_the_switch_on(restored, stand_in, switch):
    """Off: stock CPU SGLang. On a GPU install (no stand-in) SGLang's own kernels serve: the switch does nothing."""
    from sglang.srt.speculative import eagle_utils

    restored.setattr(cpu_backend, "is_installed", lambda: stand_in)
    restored.setenv(env.CPU_SAMPLING_ENV, switch)
    before = _bindings()
    assert cpu_seams.install_cpu_sampling() is False
    assert _bindings() == before
    assert eagle_utils._verify_uses_greedy.__module__ == eagle_utils.__name__  # SGLang's own
    assert eagle_utils._verify_uses_greedy(is_all_greedy=False, is_cpu=True, is_hip=False, is_xpu=False,
                                           use_rejection_sampling=False) is True  # sampled rows verify greedily


def test_on_sets_every_binding_and_serves_the_sampling_branch(restored):
    from sglang.kernels.ops.speculative import verify_sampling
    from sglang.srt.sampling import sampling_batch_info
    from sglang.srt.speculative import eagle_utils

    from sglang_asd.sglang_seams.scheduler import eagle_sample

    restored.setattr(cpu_backend, "is_installed", lambda: True)
    restored.setenv(env.CPU_SAMPLING_ENV, "on")
    assert cpu_seams.install_cpu_sampling() is True
    assert cpu_seams.install_cpu_sampling() is True  # idempotent: a forked child applies it again
    assert sampling.missing() == []
    assert eagle_utils._verify_uses_greedy is sampling.verify_uses_greedy
    flags = dict(is_cpu=True, is_hip=False, is_xpu=False, use_rejection_sampling=False)
    assert eagle_utils._verify_uses_greedy(is_all_greedy=False, **flags) is False  # the sampling branch
    assert eagle_utils._verify_uses_greedy(is_all_greedy=True, **flags) is True  # greedy batches stay greedy
    assert verify_sampling.tree_speculative_sampling_target_only is sampling.tree_speculative_sampling_target_only
    assert eagle_sample.sampling_hooks() == [(eagle_sample.TREE_SAMPLING, eagle_sample.tree_sampling_around)]
    assert sampling_batch_info.SamplingBatchInfo.from_schedule_batch.__func__ is sampling.from_schedule_batch


class _Batch:  # what SamplingBatchInfo.from_schedule_batch reads of a ScheduleBatch (weak-referenceable)
    def __init__(self, reqs):
        self.reqs, self.device = reqs, "cpu"


def _req(rid, seed=None, temperature=0.7):
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(temperature=temperature, sampling_seed=seed)
    params.normalize(None)
    params.verify(VOCAB)
    return SimpleNamespace(rid=rid, sampling_params=params, custom_logit_processor=None, return_sampling_mask=False,
                           sampling_logprobs_mode=None)


VOCAB = 100


@pytest.fixture
def sampling_info(restored):
    """SGLang's SamplingBatchInfo with the seam applied, outside deterministic inference (get_exec()
    reads the scheduler's published settings; here, a stand-in for them)."""
    from sglang.srt.sampling import sampling_batch_info

    restored.setattr(cpu_backend, "is_installed", lambda: True)
    restored.setenv(env.CPU_SAMPLING_ENV, "on")
    settings = SimpleNamespace(deterministic=SimpleNamespace(enable_deterministic_inference=False),
                               features=SimpleNamespace(enable_custom_logit_processor=False, enable_watermark=False))
    restored.setattr(sampling_batch_info, "get_exec", lambda: settings)
    cpu_seams.install_cpu_sampling()
    return sampling_batch_info.SamplingBatchInfo, settings


def test_each_request_brings_its_seed_or_one_of_its_request_id(sampling_info):
    """A seeded request keeps its sampling_seed (any int64); an unseeded one gets a seed of its rid: fresh
    for every request (SGLang's rids are fresh uuids), the same in every process and on every call."""
    cls, _ = sampling_info
    reqs = [_req("a"), _req("b", seed=7), _req("c", temperature=0), _req("d", seed=-(2 ** 63)), _req("a_1")]
    seeds = cls.from_schedule_batch(_Batch(reqs), VOCAB).sampling_seed
    assert seeds.dtype == torch.int64
    assert seeds.tolist() == [sampling.request_seed("a"), 7, sampling.request_seed("c"), -(2 ** 63),
                              sampling.request_seed("a_1")]
    assert cls.from_schedule_batch(_Batch(reqs[:1]), VOCAB).sampling_seed.tolist() == seeds[:1].tolist()
    unseeded = [sampling.request_seed(uuid) for uuid in ("a", "c", "a_1", "a_2", "\ud800")]
    assert len(set(unseeded)) == len(unseeded) and all(0 <= s < 2 ** 63 for s in unseeded)
    # what another process computes (a TP rank; Python's hash() of a str differs from process to process)
    code = "from sglang_asd.cpu_backend.seams.sampling import request_seed; print(request_seed('a'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert int(other.stdout) == sampling.request_seed("a")


def test_sglang_deterministic_inference_keeps_its_own_seeds(sampling_info):
    """Under SGLang's --enable-deterministic-inference (refused by the CPU attention backend) SGLang's
    seeds stand: seed 42 for a request without one."""
    cls, settings = sampling_info
    settings.deterministic.enable_deterministic_inference = True
    seeds = cls.from_schedule_batch(_Batch([_req("a"), _req("b", seed=7)]), VOCAB).sampling_seed
    assert seeds.tolist() == [42, 7]


def test_a_hookregistry_wrapper_around_the_kernel_still_counts_and_a_lost_binding_is_named(restored):
    from sglang.srt.speculative import eagle_utils

    restored.setattr(cpu_backend, "is_installed", lambda: True)
    restored.setenv(env.CPU_SAMPLING_ENV, "on")
    cpu_seams.install_cpu_sampling()
    kernel = eagle_utils.tree_speculative_sampling_target_only

    @functools.wraps(kernel)  # what HookRegistry's AROUND wrapper is (eagle_sample's hook on an ASD server)
    def wrapper(*args, **kwargs):
        return kernel(*args, **kwargs)

    restored.setattr(eagle_utils, "tree_speculative_sampling_target_only", wrapper)
    assert sampling.missing() == []
    restored.setattr(eagle_utils, "top_p_renorm_prob", None)
    assert sampling.missing() == [f"{sampling.EAGLE_UTILS}.top_p_renorm_prob"]
    restored.setattr(sampling, "apply", lambda: None)  # a binding that does not take
    with pytest.raises(cpu_seams.HookNotInstalled, match="top_p_renorm_prob"):
        cpu_seams.install_cpu_sampling()


def test_top_k_and_top_p_renorm_against_a_loop():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(6, 20, generator=g) * 2, dim=-1)
    top_k = torch.tensor([1, 2, 5, 20, 7, 3])
    top_p = torch.tensor([0.05, 0.5, 0.9, 1.0, 0.3, 0.999])
    got_k, got_p = sampling.top_k_renorm_prob(probs, top_k), sampling.top_p_renorm_prob(probs, top_p)
    for row in range(6):
        order = probs[row].argsort(descending=True).tolist()
        keep_k = set(order[:top_k[row]])
        keep_p, mass = set(), 0.0
        for i in order:
            if mass >= top_p[row]:
                break
            keep_p.add(i)
            mass += probs[row, i].item()
        for got, keep in ((got_k, keep_k), (got_p, keep_p)):
            want = torch.tensor([probs[row, i].item() if i in keep else 0.0 for i in range(20)])
            torch.testing.assert_close(got[row], want / want.sum())


def _murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 over whole 4-byte blocks, textbook form (the key SGLang's kernel hashes:
    seed low, seed high, position, column, little-endian; length 16)."""
    c1, c2, h = 0xCC9E2D51, 0x1B873593, seed
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF  # noqa: E731
    for (k,) in struct.iter_unpack("<I", data):
        k = rotl((k * c1) & 0xFFFFFFFF, 15) * c2 & 0xFFFFFFFF
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= len(data)
    for shift, mult in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = ((h ^ (h >> shift)) * mult) & 0xFFFFFFFF
    return h ^ (h >> 16)


def test_murmur_hash32_is_murmur3_of_seed_position_and_column():
    rng = random.Random(0)
    seeds = [0, 1, 42, 2**32 + 7, 2**63 - 1] + [rng.randrange(2**63) for _ in range(3)]
    positions = [rng.randrange(2**31) for _ in seeds]
    cols = [0, 1, 5, 2**31 - 1]
    got = sampling.murmur_hash32(torch.tensor(seeds), torch.tensor(positions), torch.tensor(cols))
    for i, (s, p) in enumerate(zip(seeds, positions)):
        for j, c in enumerate(cols):
            key = struct.pack("<IIII", s & 0xFFFFFFFF, s >> 32, p, c)
            assert got[i, j].item() == _murmur3_x86_32(key), (s, p, c)
