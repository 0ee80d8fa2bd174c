"""The CPU seams of SGLang's block drafters (``cpu_backend/seams/block_drafters.py``), hook by hook.

SGLang 0.5.23's own resolving view, device gate and ``_extend_forward_kwargs`` run here; the servers
that need every hook together are in ``tests/integration/test_block_drafters_stock.py``.
"""

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.cpu_backend.seams import block_drafters


def _args(device: str, declared=()):
    return SimpleNamespace(device=device, _resolved_overrides=list(declared))


def test_the_device_gate_sees_xpu_for_the_call_only():
    from sglang.srt.arg_groups.overrides import resolving_view

    args = _args("cpu", [("earlier", {"page_size": 1})])
    seen = []

    def handler(server_args):  # stands where _handle_dspark / _handle_dflash stand
        seen.append(resolving_view(server_args).device)
        server_args._resolved_overrides.append(("_handle_dspark", {"speculative_num_steps": 1}))
        return "done"

    assert block_drafters.handle_block_drafter_around(handler, args) == "done"
    assert seen == ["xpu"] and resolving_view(args).device == "cpu"
    assert args._resolved_overrides == [("earlier", {"page_size": 1}), ("_handle_dspark", {"speculative_num_steps": 1})]


def test_the_device_gate_is_untouched_off_cpu_and_on_errors():
    from sglang.srt.arg_groups.overrides import resolving_view

    seen = []
    block_drafters.handle_block_drafter_around(lambda a: seen.append(resolving_view(a).device), _args("cuda"))
    assert seen == ["cuda"]
    args = _args("cpu")

    def refuses(server_args):
        raise ValueError("DSpark with dp attention requires --enable-dp-lm-head.")

    with pytest.raises(ValueError, match="dp-lm-head"):
        block_drafters.handle_block_drafter_around(refuses, args)
    assert args._resolved_overrides == []


def test_sglangs_dspark_gate_passes_through_the_hook():
    """SGLang's own _handle_dspark: refused on CPU as shipped, past its gate with the hook (it then
    stops at the next check, the missing draft path, in its own words)."""
    from sglang.srt.arg_groups.speculative_hook import _handle_dspark

    args = SimpleNamespace(device="cpu", attn_dp_size=1, pp_size=1, speculative_draft_model_path=None,
                           model_path="/nonexistent", revision=None, download_dir=None,
                           _resolved_overrides=[])
    with pytest.raises(ValueError, match="only supports CUDA, NPU or XPU"):
        _handle_dspark(args)
    with pytest.raises(Exception) as err:
        block_drafters.handle_block_drafter_around(_handle_dspark, args)
    assert "only supports CUDA" not in str(err.value)


def test_record_stream_is_a_no_op_on_cpu_tensors_only():
    calls = []
    assert block_drafters.record_stream_around(lambda t, s: calls.append(t), torch.zeros(2), object()) is None
    assert calls == []
    meta = torch.empty(2, device="meta")
    block_drafters.record_stream_around(lambda t, s: calls.append(t), meta, object())
    assert calls == [meta]


def test_float32_input_embeds_keep_their_dtype():
    """SGLang's own _extend_forward_kwargs casts input_embeds to bf16; the hook hands float32 back."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    runner = SimpleNamespace(_pp_kwargs=lambda p: {}, is_generation=True)
    embeds = torch.randn(8, 64)  # [tokens, H]
    batch = SimpleNamespace(input_embeds=embeds, replace_embeds=None, replace_positions=None)
    plain = ModelRunner._extend_forward_kwargs(runner, batch, None)
    assert plain["input_embeds"].dtype == torch.bfloat16
    out = block_drafters.extend_forward_kwargs_around(ModelRunner._extend_forward_kwargs, runner, batch, None)
    assert out["input_embeds"] is embeds
    bf16 = SimpleNamespace(input_embeds=embeds.bfloat16(), replace_embeds=None, replace_positions=None)
    out = block_drafters.extend_forward_kwargs_around(ModelRunner._extend_forward_kwargs, runner, bf16, None)
    assert out["input_embeds"].dtype == torch.bfloat16


def test_dflash_verify_input_gets_a_chain_topk():
    class Input:
        def __init__(self, n):
            self.n = n

    obj = Input.__new__(Input)
    block_drafters.dflash_verify_init_around(Input.__init__, obj, 4)
    assert obj.n == 4 and obj.tree_topk == 1


def test_no_hooks_without_the_stand_in(monkeypatch):
    from sglang_asd import cpu_backend

    monkeypatch.setattr(cpu_backend, "is_installed", lambda: False)
    assert block_drafters.launcher_hooks() == [] and block_drafters.scheduler_hooks() == []
