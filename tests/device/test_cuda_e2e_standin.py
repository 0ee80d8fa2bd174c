"""The GPU e2e kit's test-only ``sgl_kernel`` stand-in (``scripts/device/cuda_standin``,
``SGLANG_ASD_KERNEL_STANDIN=cuda-e2e``), on CPU.

Each check runs in a fresh interpreter: installing a stand-in changes ``sys.modules`` for good.
  * the opt-in is explicit and refuses, loudly, where it does not belong (no CUDA, bad value, the
    kit's module not on the path);
  * with an H200 faked for SGLang's import-time checks, SGLang's whole CUDA serving path imports,
    every binding of a swapped JIT op is the replacement, and SGLang's argument pipeline accepts
    every e2e server with CUDA graphs, overlap scheduler and radix cache on (cuda_import_check.py);
  * the swapped tree kernels (SGLang's own Triton versions, run by the Triton interpreter) equal the
    CPU stand-in's ops (tests/device/triton_swap_check.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _python(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("SGLANG_ASD_KERNEL_STANDIN", "SGLANG_USE_CPU_ENGINE")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=full)


def test_opt_in_needs_cuda():
    p = _python("from sglang_asd import cpu_backend; cpu_backend.install()", SGLANG_ASD_KERNEL_STANDIN="cuda-e2e")
    assert p.returncode != 0 and "needs a CUDA device" in p.stderr


def test_opt_in_rejects_unknown_values():
    p = _python("from sglang_asd import cpu_backend; cpu_backend.install()", SGLANG_ASD_KERNEL_STANDIN="yes")
    assert p.returncode != 0 and "is not understood" in p.stderr


def test_opt_in_names_the_kit_module_when_it_is_not_on_the_path():
    code = ("import sys; sys.path.insert(0, 'scripts/device'); import cuda_import_check; cuda_import_check.fake_cuda()\n"
            "sys.path[:] = [p for p in sys.path if not p.rstrip('/').endswith('scripts/device')]\n"
            "from sglang_asd import cpu_backend; cpu_backend.install()")
    p = _python(code, SGLANG_ASD_KERNEL_STANDIN="cuda-e2e")
    assert p.returncode != 0
    assert p.stderr.strip().splitlines()[-1] == (
        "RuntimeError: SGLANG_ASD_KERNEL_STANDIN=cuda-e2e: the GPU e2e kit's module 'cuda_standin' is not "
        "importable; put the kit's scripts/device on PYTHONPATH (scripts/device_e2e.sh does)")


def test_without_the_opt_in_the_cpu_stand_in_is_unchanged():
    p = _python("import sys; sys.path.insert(0, 'scripts/device')\n"
                "from sglang_asd import cpu_backend\n"
                "import cuda_standin\n"
                "print(cpu_backend.install(), cpu_backend.is_installed(), cuda_standin.is_installed())")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True", "False"]


def test_stand_in_module_provides_raises_and_logs(tmp_path):
    log = tmp_path / "missing.txt"
    code = (
        "import sys; sys.path.insert(0, 'scripts/device'); import cuda_import_check; cuda_import_check.fake_cuda()\n"
        "from sglang_asd import cpu_backend; assert cpu_backend.install() is False\n"
        "import sgl_kernel, torch\n"
        "from sgl_kernel import rmsnorm, moe_sum\n"
        "from sgl_kernel.utils import is_arch_support_pdl\n"
        "assert sgl_kernel.__version__ == '0.4.10' and is_arch_support_pdl() is False\n"
        "assert rmsnorm(torch.ones(2, 4), torch.ones(4)).shape == (2, 4)\n"
        "try:\n    import sgl_kernel.scalar_type\nexcept ImportError:\n    print('scalar_type absent')\n"
        "try:\n    moe_sum(1)\nexcept NotImplementedError as e:\n    print('raised', 'cuda_standin/ops.py' in str(e))\n"
    )
    p = _python(code, SGLANG_ASD_KERNEL_STANDIN="cuda-e2e", SGLANG_ASD_STANDIN_LOG=str(log))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "scalar_type absent" in p.stdout and "raised True" in p.stdout
    assert log.read_text().split()[-1] == "sgl_kernel.moe_sum"


def test_sglang_cuda_serving_path_imports_with_the_stand_in(tmp_path):
    out = tmp_path / "import_check.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts/device/cuda_import_check.py"), "--fake-cuda",
                        "--resolve", "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["ok"] and not report["import_errors"] and report["cuda_standin_active"]
    # SGLang's own argument pipeline accepts every e2e server on the (faked) H200, GPU defaults kept on
    assert set(report["server_resolution"]) >= {"stock_eagle_chain", "asd_eagle3_tree", "asd_adaptive", "stock_dspark",
                                                "asd_dspark", "stock_dflash", "asd_dflash", "asd_dflash_exact"}
    assert not any(report["server_resolution"].values()), report["server_resolution"]
    assert all(report["bindings"].values()), report["bindings"]
    assert report["sglang_modules"] > 500
    # What SGLang imports but the kit does not provide must stay off the text-serving path.
    assert not {"rmsnorm", "silu_and_mul", "top_k_renorm_prob", "weak_ref_tensor"} & set(report["unprovided_imported"])


def test_server_resolution_reports_what_sglang_resolved_not_what_was_typed():
    """``--resolve`` runs SGLang's whole resolution (``resolve_once``) and flags a server whose resolved
    arguments turn a GPU default off, leave a block drafter's draft on FlashInfer, or change its window."""
    code = """
import json, sys
sys.path[:0] = ["scripts/device", "."]
import cuda_import_check as c
c.fake_cuda()
import cuda_standin
from sglang_asd import cpu_backend
cpu_backend.install()
import e2e_lib as L, e2e_steps
spec = lambda args: L.ServerSpec("s", tuple(args + L.GPU_COMMON))
e2e_steps.SERVERS = {
    "ok": spec(L.block_drafter("dflash")),
    "graphs_off": spec(L.block_drafter("dspark") + ["--disable-cuda-graph"]),
    "flashinfer_draft": spec(L.block_drafter("dflash") + ["--speculative-draft-attention-backend", "flashinfer"]),
    "window_6": spec(L.block_drafter("dspark")[:-2] + ["--speculative-dspark-block-size", "5",
                                                      "--speculative-draft-model-path", "fixture:tiny-dspark-noisy"]),
}
print("RESOLUTION", json.dumps(c.resolve_servers()))
"""
    p = _python(code, SGLANG_ASD_KERNEL_STANDIN="cuda-e2e")
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESOLUTION ")), None)
    assert line, p.stdout[-2000:] + p.stderr[-3000:]
    got = json.loads(line.split(" ", 1)[1])
    assert got == {"ok": {}, "graphs_off": {"disable_cuda_graph": True},
                   "flashinfer_draft": {"speculative_draft_attention_backend": "flashinfer"},
                   "window_6": {"speculative_num_draft_tokens": 6}}, got


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_swapped_tree_kernels_equal_the_cpu_ops_under_the_triton_interpreter():
    p = subprocess.run([sys.executable, str(ROOT / "tests/device/triton_swap_check.py")], capture_output=True,
                       text=True, timeout=900, cwd=ROOT, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "OK 4"
