"""bf16 / fp16 linear layers with float32 accumulation on CPU (``cpu_backend/seams/cpu_paths.py``).

Checked here against SGLang 0.5.23's own ``UnquantizedLinearMethod`` (weights made by its
``create_weights``, the original methods passed to the AROUND hooks as SGLang's hook registry
passes them). Every test server registers and verifies these hooks at start-up (they are CPU
scheduler hooks, so a server without them refuses to start); the bf16 Qwen measurements of
docs/BENCHMARKS.md run through them.
"""

import pytest
import torch
import torch.nn.functional as F

from sglang_asd.cpu_backend import env
from sglang_asd.cpu_backend.seams import cpu_paths

SHAPES = [(5, 64, 96), (40, 256, 160)]  # (rows, in, out)


def _bf16_step(x: torch.Tensor) -> torch.Tensor:
    """One bf16 rounding step at each element's magnitude (the spacing of bf16 numbers there)."""
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), torch.frexp(x.float().abs())[1] - 8)


@pytest.mark.parametrize("rows,k,n", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp32_accumulate_is_a_16_bit_linear_rounded_once(rows, k, n, dtype):
    g = torch.Generator().manual_seed(rows * k + n)
    x = torch.randn(rows, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    out = cpu_paths.fp32_accumulate_linear(x, w.float(), b)
    assert out.dtype == dtype and out.shape == (rows, n)
    exact = F.linear(x.double(), w.double(), b.double())
    # float32 sums of exact products, rounded once: within one rounding step of the exact result ...
    assert ((out.double() - exact).abs() <= _bf16_step(exact).double()).all()
    # ... and within one of torch's own 16-bit kernel (same arithmetic, another summation order)
    native = F.linear(x, w, b)
    assert ((out.float() - native.float()).abs() <= _bf16_step(native)).all()
    assert (out != native).float().mean() < 0.05


def test_a_batched_3d_input_keeps_its_shape():
    x = torch.randn(2, 3, 16).to(torch.bfloat16)
    w = torch.randn(8, 16)
    out = cpu_paths.fp32_accumulate_linear(x, w)
    assert out.shape == (2, 3, 8) and out.dtype == torch.bfloat16
    assert torch.equal(out, F.linear(x.float(), w).to(torch.bfloat16))


def _sglang_linear(dtype, k=64, n=48):
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod

    method, layer = UnquantizedLinearMethod(), torch.nn.Module()
    method.create_weights(layer, k, [n], k, n, dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=torch.Generator().manual_seed(n)).to(dtype))
    return method, layer


@pytest.fixture
def unquant():
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod

    return UnquantizedLinearMethod


def test_post_load_widens_a_bf16_weight_in_place_exactly(unquant):
    method, layer = _sglang_linear(torch.bfloat16)
    param, before = layer.weight, layer.weight.detach().clone()
    cpu_paths.linear_postload_around(unquant.process_weights_after_loading, method, layer)
    assert layer.weight is param and param.dtype == torch.float32 and not param.requires_grad
    assert torch.equal(param, before.float()) and getattr(layer, cpu_paths.WIDENED)


def test_a_float32_layer_is_left_alone(unquant):
    method, layer = _sglang_linear(torch.float32)
    cpu_paths.linear_postload_around(unquant.process_weights_after_loading, method, layer)
    assert layer.weight.dtype == torch.float32 and not getattr(layer, cpu_paths.WIDENED, False)
    x = torch.randn(3, 64)
    out = cpu_paths.linear_apply_around(unquant.apply, method, layer, x)
    assert torch.equal(out, F.linear(x, layer.weight))
    assert not cpu_paths.widen_linear_weight(torch.nn.Module())  # no weight at all


def test_apply_of_a_widened_layer_is_the_fp32_accumulate_linear(unquant):
    method, layer = _sglang_linear(torch.bfloat16)
    bias = torch.randn(48).to(torch.bfloat16)
    x = torch.randn(7, 64).to(torch.bfloat16)
    native = unquant.apply(method, layer, x, bias)  # before widening: torch's bf16 kernel
    cpu_paths.linear_postload_around(unquant.process_weights_after_loading, method, layer)
    out = cpu_paths.linear_apply_around(unquant.apply, method, layer, x, bias=bias)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, cpu_paths.fp32_accumulate_linear(x, layer.weight, bias))
    assert ((out.float() - native.float()).abs() <= _bf16_step(native)).all()
    buffer = torch.empty(7, 48, dtype=torch.bfloat16)
    into = cpu_paths.linear_apply_into_around(unquant.apply_into, method, layer, x, buffer, bias=bias)
    assert into is buffer and torch.equal(buffer, out)


def test_hooks_follow_the_mode(monkeypatch):
    from sglang_asd import cpu_backend

    monkeypatch.setattr(cpu_backend, "is_installed", lambda: True)
    monkeypatch.setenv(env.GEMM_ENV, "fp32-accumulate")
    assert env.gemm_mode() == "fp32-accumulate"
    assert [t for t, _ in cpu_paths.hooks()] == [cpu_paths.GET_LAST_LOC, cpu_paths.LINEAR_POSTLOAD,
                                                   cpu_paths.LINEAR_APPLY, cpu_paths.LINEAR_APPLY_INTO,
                                                   cpu_paths.LM_HEAD]
    monkeypatch.setenv(env.GEMM_ENV, "native")
    assert [t for t, _ in cpu_paths.hooks()] == [cpu_paths.GET_LAST_LOC]
    monkeypatch.setattr(cpu_backend, "is_installed", lambda: False)
    monkeypatch.delenv(env.GEMM_ENV)
    assert cpu_paths.hooks() == []  # never on a GPU install


def test_a_bad_mode_is_a_one_line_launch_error(monkeypatch, capsys):
    from sglang_asd import cpu_backend, launch_server

    monkeypatch.setattr(cpu_backend, "is_installed", lambda: True)
    monkeypatch.setenv(env.GEMM_ENV, "fp16")
    with pytest.raises(SystemExit) as e:
        launch_server.main(["--model-path", "/nonexistent"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert err[0] == ("sglang_asd.launch_server: error: SGLANG_ASD_CPU_GEMM='fp16': expected one of "
                      "auto, fp32-accumulate, native")


def test_a_launched_cpu_server_records_its_mode_in_the_run_identity(monkeypatch):
    from sglang_asd.bench.server import identity, with_launch_facts

    monkeypatch.setenv(env.GEMM_ENV, "native")
    monkeypatch.delenv(env.CPU_SAMPLING_ENV, raising=False)
    info = {"device": "cpu", "dtype": "bfloat16"}
    # the CPU sampling verify is on by default, and part of the identity only when on
    assert identity(with_launch_facts(info, launched=True)) == {**info, "cpu_gemm": "native", "cpu_sampling": "on"}
    monkeypatch.setenv(env.CPU_SAMPLING_ENV, "off")
    assert identity(with_launch_facts(info, launched=True)) == {**info, "cpu_gemm": "native"}
    monkeypatch.delenv(env.GEMM_ENV)
    assert with_launch_facts(info, launched=True)["cpu_gemm"] == env.gemm_mode()  # auto, resolved
    assert with_launch_facts(info, launched=False) == info  # --url: its environment is not ours to know
    assert with_launch_facts({"device": "cuda"}, launched=True) == {"device": "cuda"}


# ------------------------------------------------------------------ LM head


def _lm_head(dtype, vocab=96, hidden=64):
    """SGLang's LogitsProcessor (attributes its constructor would set) and an LM head module."""
    from sglang.srt.layers.logits_processor import LogitsProcessor

    processor = LogitsProcessor.__new__(LogitsProcessor)
    torch.nn.Module.__init__(processor)
    processor.use_fp32_lm_head, processor.use_fp32_lm_head_output, processor.rl_on_policy_target = False, False, None
    head = torch.nn.Module()
    w = torch.randn(vocab, hidden, generator=torch.Generator().manual_seed(vocab)).to(dtype)
    head.weight = torch.nn.Parameter(w, requires_grad=False)
    return processor, head


@pytest.fixture
def compute_lm_head():
    from sglang.srt.layers.logits_processor import LogitsProcessor

    return LogitsProcessor._compute_lm_head


def test_lm_head_logits_are_bf16_with_float32_accumulation(compute_lm_head):
    processor, head = _lm_head(torch.bfloat16)
    x = torch.randn(10, 64).to(torch.bfloat16)
    native = compute_lm_head(processor, x, head, None)  # SGLang's plain branch: torch's bf16 kernel
    out = cpu_paths.lm_head_around(compute_lm_head, processor, x, head, None, out=None)
    assert out.dtype == torch.bfloat16 and out.shape == (10, 96)
    assert torch.equal(out, F.linear(x.float(), head.weight.float()).to(torch.bfloat16))
    assert ((out.float() - native.float()).abs() <= _bf16_step(native)).all()
    assert head.weight.dtype == torch.bfloat16  # the (possibly tied) weight itself is untouched


def test_lm_head_copy_is_reused_and_rebuilt_when_the_weight_changes(compute_lm_head):
    processor, head = _lm_head(torch.bfloat16)
    x = torch.randn(3, 64).to(torch.bfloat16)
    cpu_paths.lm_head_around(compute_lm_head, processor, x, head, None)
    first = cpu_paths.lm_head_fp32_weight(head)
    assert cpu_paths.lm_head_fp32_weight(head) is first
    with torch.no_grad():
        head.weight.mul_(2)  # in place, as a weight update writes
    assert torch.equal(cpu_paths.lm_head_fp32_weight(head), head.weight.float())
    head.weight.data = torch.zeros(96, 64, dtype=torch.bfloat16)  # a new tensor
    assert not cpu_paths.lm_head_around(compute_lm_head, processor, x, head, None).any()


@pytest.mark.parametrize("case", ["fp32_weight", "fp32_lm_head_flag", "rl_on_policy", "lora"])
def test_lm_head_other_branches_run_sglangs_code(compute_lm_head, case):
    processor, head = _lm_head(torch.float32 if case == "fp32_weight" else torch.bfloat16)
    if case == "fp32_lm_head_flag":
        processor.use_fp32_lm_head = True
    elif case == "rl_on_policy":
        processor.rl_on_policy_target = "fsdp"
    elif case == "lora":
        head.set_lora, head.apply_lora = True, True
        head.forward = lambda h: torch.full((h.shape[0], 96), 7.0)
    x = torch.randn(4, 64).to(head.weight.dtype)
    out = cpu_paths.lm_head_around(compute_lm_head, processor, x, head, None)
    assert torch.equal(out, compute_lm_head(processor, x, head, None))
    assert not hasattr(head, cpu_paths.LM_HEAD_COPY)


def test_auto_takes_torchs_bf16_kernel_only_on_a_cpu_with_bf16_instructions(monkeypatch, tmp_path):
    avx2, zen4 = tmp_path / "avx2", tmp_path / "avx512bf16"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    zen4.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
    assert not env.cpu_has_native_bf16(str(avx2)) and env.cpu_has_native_bf16(str(zen4))
    assert not env.cpu_has_native_bf16(str(tmp_path / "missing"))  # unreadable: the safe path
    for has, want in ((False, "fp32-accumulate"), (True, "native")):
        monkeypatch.setattr(env, "cpu_has_native_bf16", lambda has=has: has)
        for unset in (None, "", " AUTO "):
            if unset is None:
                monkeypatch.delenv(env.GEMM_ENV, raising=False)
            else:
                monkeypatch.setenv(env.GEMM_ENV, unset)
            assert env.gemm_mode() == want
        for explicit in ("fp32-accumulate", "native"):  # an explicit mode is kept on any CPU
            monkeypatch.setenv(env.GEMM_ENV, explicit)
            assert env.gemm_mode() == explicit
