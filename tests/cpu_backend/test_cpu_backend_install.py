"""install(): what it puts in sys.modules / torch.ops, and when it refuses. Each case runs in a fresh interpreter."""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


def run_python(code: str, env_extra=None, timeout=240) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_install_registers_ops_and_modules():
    """Without SGLang: the modules, ops and refusals; then (if installed) SGLang's CPU-path imports."""
    out = run_python(
        """
        import sys
        sys.modules["sglang"] = None  # the package must not need SGLang
        import sglang_asd.cpu_backend as cb
        assert "sgl_kernel" not in sys.modules and not cb.is_installed()
        assert cb.install() is True and cb.install() is True and cb.is_installed()
        import torch, sgl_kernel
        from sgl_kernel import (
            assign_draft_cache_locs_contiguous_cpu, assign_extend_cache_locs_cpu, assign_req_to_token_pool_cpu,
            build_draft_decode_metadata_cpu, build_tree_kernel_efficient_cpu, copy_all_layer_kv_cache_cpu,
            fill_accept_out_cache_loc_cpu, fill_bonus_tokens_cpu, rotate_input_ids_cpu, verify_tree_greedy_cpu,
        )
        from sgl_kernel.speculative import reconstruct_indices_from_tree_mask
        for absent in ("sgl_kernel.scalar_type", "sgl_kernel.allreduce", "sgl_kernel.kvcacheio"):
            try:
                __import__(absent)
                raise SystemExit(f"{absent} should be absent")
            except ImportError:
                pass
        for name in ("convert_weight_packed", "fused_qk_norm_cpu", "shm_allreduce", "rmsnorm_cpu"):
            assert not hasattr(torch.ops.sgl_kernel, name), name
        for name in ("decode_attention_cpu", "extend_attention_cpu", "verify_tree_greedy_cpu", "initialize"):
            assert hasattr(torch.ops.sgl_kernel, name), name
        assert not hasattr(sgl_kernel, "__version__")
        # keyword call through the dispatcher, as spec_tree.verify_tree_greedy_func does
        W = 3
        predicts = torch.zeros(W, dtype=torch.int32)
        accept_index = torch.full((1, W), -1, dtype=torch.int32)
        num = torch.zeros(1, dtype=torch.int32)
        verify_tree_greedy_cpu(
            predicts=predicts, accept_index=accept_index, accept_token_num=num,
            candidates=torch.tensor([[0, 5, 6]]), retrive_index=torch.tensor([[0, 1, 2]]),
            retrive_next_token=torch.tensor([[1, 2, -1]]), retrive_next_sibling=torch.tensor([[-1, -1, -1]]),
            target_predict=torch.tensor([[5, 6, 7]]),
        )
        assert num.tolist() == [2] and accept_index.tolist() == [[0, 1, 2]] and predicts.tolist() == [5, 6, 7]
        try:
            torch.ops.sgl_kernel.initialize(2, 0)
            raise SystemExit("initialize(2, 0) should refuse")
        except NotImplementedError:
            pass
        print("OK")
        if HAVE_SGLANG:  # the same process, now with SGLang: everything its CPU path imports is there
            del sys.modules["sglang"]
            import importlib
            for name in (
                "sglang.srt.managers.scheduler",
                "sglang.srt.layers.attention.intel_amx_backend",
                "sglang.srt.speculative.eagle_worker_v2",
                "sglang.srt.speculative.standalone_worker_v2",
                "sglang.srt.speculative.ngram_worker",
                "sglang.srt.speculative.multi_layer_eagle_worker_v2",
                "sglang.srt.model_executor.model_runner",
            ):
                importlib.import_module(name)
            from sglang.srt.utils.common import cpu_has_amx_support, is_cpu
            assert is_cpu() and not cpu_has_amx_support()  # the layers keep their native-torch paths
            print("SGLANG OK")
        """.replace("HAVE_SGLANG", str(HAVE_SGLANG)),
        env_extra={"SGLANG_USE_CPU_ENGINE": "1"},
    )
    assert out.split() == (["OK", "SGLANG", "OK"] if HAVE_SGLANG else ["OK"])


def test_install_never_shadows_a_real_sgl_kernel(tmp_path):
    pkg = tmp_path / "sgl_kernel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    out = run_python(
        """
        import sys
        import sglang_asd.cpu_backend as cb
        assert cb.install() is False and not cb.is_installed()
        assert "sgl_kernel" not in sys.modules  # install() only looked
        import sgl_kernel, torch
        assert sgl_kernel.REAL and not hasattr(torch.ops.sgl_kernel, "decode_attention_cpu")
        print("OK")
        """,
        env_extra={"PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"},
    )
    assert out.strip().endswith("OK")
