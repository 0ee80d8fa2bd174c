"""The stand-in attention's two kernels (``attention_core``): the fused one against the float32
reference at a served model's shapes, its contract for queries that see no key, when each is
used, and the switch that picks it. Both are also checked against a dense float64 softmax in
``test_cpu_backend_attention.py``."""

import pytest
import torch

from sglang_asd.cpu_backend import attention_core, env
from sglang_asd.cpu_backend import attention_ops as ops

H, HKV, DK, DV = 4, 2, 16, 8


def _serving_case(gen, bs, m):
    """A bf16 pool at a served model's head shapes (Qwen2.5-1.5B: 12 query heads, 2 KV heads, 128
    dims), ``bs`` rows of ``m`` causal extend tokens over prefixes of 40 to 300 tokens."""
    h, hkv, d, slots = 12, 2, 128, 2048
    k_buf = torch.randn(slots, hkv, d, generator=gen).to(torch.bfloat16)
    v_buf = torch.randn(slots, hkv, d, generator=gen).to(torch.bfloat16)
    table = torch.randperm(slots - 1, generator=gen)[: bs * 340].add(1).view(bs, 340).to(torch.int32)
    prefix = torch.randint(40, 300, (bs,), generator=gen)
    ext = torch.full((bs,), m)
    q = torch.randn(bs * m, h, d, generator=gen).to(torch.bfloat16)
    return q, k_buf, v_buf, table, prefix, ext


@pytest.mark.parametrize("bs,m", [(1, 1), (6, 1), (1, 5), (6, 5)])
def test_fused_kernel_matches_the_reference_at_serving_shapes(monkeypatch, bs, m):
    """The fused kernel (torch's SDPA over the bf16 pool) against the float32 reference on decode
    and verify shapes: the same attention up to bf16 rounding of the probabilities and output, and
    the fused kernel really ran."""
    gen = torch.Generator().manual_seed(bs * 10 + m)
    q, k_buf, v_buf, table, prefix, ext = _serving_case(gen, bs, m)
    rows, seq = torch.arange(bs), prefix + ext
    calls = []
    sdpa = attention_core.F.scaled_dot_product_attention
    monkeypatch.setattr(attention_core.F, "scaled_dot_product_attention",
                        lambda *a, **kw: calls.append(a[1].dtype) or sdpa(*a, **kw))  # fmt: skip

    def run(fused):
        monkeypatch.setattr(attention_core, "FUSED", fused)
        out = torch.empty_like(q)
        if m == 1:
            ops.decode_attention_cpu(q, k_buf, v_buf, 1.0, 1.0, out, None, None, None, torch.empty(0), table, rows,
                                     seq, 128**-0.5, 0.0, False, 0, None, None)  # fmt: skip
        else:
            ops.extend_attention_cpu(q, None, None, out, k_buf, v_buf, 1.0, 1.0, table, rows, seq, ext,
                                     torch.arange(bs) * m, m, 128**-0.5, 0.0, False, 0, None, None, None, True)  # fmt: skip
        return out.float()

    fused = run(True)
    assert calls and set(calls) == {torch.bfloat16}  # the fused kernel ran, on the pool as stored
    n_fused = len(calls)
    reference = run(False)
    assert len(calls) == n_fused  # the reference never calls it
    torch.testing.assert_close(fused, reference, atol=1e-2, rtol=1e-2)
    assert (fused - reference).abs().max() > 0  # bf16 probabilities: not the reference's bits


def test_fused_kernel_gives_zeros_where_no_key_is_visible(monkeypatch):
    """attend's contract for a query that sees no key, which padded verify rows rely on."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, H, DK, generator=gen).to(torch.bfloat16)
    k = torch.randn(1, HKV, 6, DK, generator=gen).to(torch.bfloat16)
    v = torch.randn(1, HKV, 6, DV, generator=gen).to(torch.bfloat16)
    visible = torch.tensor([[[True, True, False, True, False, False], [False] * 6]])
    monkeypatch.setattr(attention_core, "FUSED", True)
    o = attention_core.attend(q, k, v, visible, DK**-0.5, None, None)
    assert torch.equal(o[0, 1].float(), torch.zeros(H, DV))
    assert o[0, 0].abs().sum() > 0


@pytest.mark.parametrize("kernel", ["fused", "reference"])
def test_the_kernel_choice_and_its_fallbacks(monkeypatch, kernel):
    """The fused kernel reads an unscaled bf16/fp16/fp32 pool as stored; scaled or fp8 pools, logit
    caps, sinks and the reference kernel gather float32; logit caps and sinks take the reference."""
    bf16 = torch.empty(1, 1, 1, dtype=torch.bfloat16)
    fp8 = torch.empty(1, 1, 1, dtype=torch.float8_e4m3fn)
    dtype = attention_core.kv_dtype
    fused = kernel == "fused"
    monkeypatch.setattr(attention_core, "FUSED", fused)
    assert attention_core.fused_applies(None, None) is fused and attention_core.fused_applies(0.0, None) is fused
    assert dtype(bf16, bf16, 1.0, 1.0, None, None) == (torch.bfloat16 if fused else torch.float32)
    assert not attention_core.fused_applies(30.0, None) and not attention_core.fused_applies(None, torch.zeros(H))
    assert dtype(bf16, bf16, 1.0, 1.0, 30.0, None) == torch.float32
    assert dtype(bf16, bf16, 1.0, 1.0, None, torch.zeros(H)) == torch.float32
    assert dtype(bf16, bf16, 0.5, 1.0, None, None) == dtype(bf16, bf16, 1.0, 2.0, None, None) == torch.float32
    assert dtype(fp8, fp8, 1.0, 1.0, None, None) == torch.float32


def test_the_attention_kernel_switch(monkeypatch):
    """``SGLANG_ASD_CPU_ATTENTION``: fused unless set to reference; anything else is an error the
    launchers print as one line (``check_cpu_switches``)."""
    monkeypatch.delenv(env.CPU_ATTENTION_ENV, raising=False)
    assert env.cpu_attention() == "fused"
    for value, kernel in {"": "fused", " Reference ": "reference", "FUSED": "fused"}.items():
        monkeypatch.setenv(env.CPU_ATTENTION_ENV, value)
        assert env.cpu_attention() == kernel
    monkeypatch.setenv(env.CPU_ATTENTION_ENV, "flash")
    with pytest.raises(ValueError, match="SGLANG_ASD_CPU_ATTENTION='flash': expected one of fused, reference"):
        env.check_cpu_switches()
