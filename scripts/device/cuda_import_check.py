#!/usr/bin/env python3
"""Import SGLang's CUDA serving path with the kit's ``sgl_kernel`` stand-in; check the JIT-op swaps.

    python scripts/device/cuda_import_check.py --resolve --json out.json              # on the GPU (step 0)
    python scripts/device/cuda_import_check.py --fake-cuda --resolve --json out.json  # on a CPU: CI, pre-validation

``--fake-cuda`` makes ``torch.cuda`` report an H200 to the import-time checks (``is_cuda()``, device
capability), so every ``if _is_cuda:`` import branch runs on a machine without a GPU. Nothing is
executed on a device. It passes when every module imports, every binding of a replaced JIT op is the
stand-in's, and ``sgl_kernel`` is the stand-in; with ``--resolve``, also when SGLang's argument
pipeline accepts every tiny-model server of the e2e run with its GPU defaults on. The JSON lists the ``sgl_kernel`` names SGLang
imported that have no stand-in (fine while nothing calls them; a call raises and is logged).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import sys
import time
import traceback
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts" / "device"), str(ROOT)]

# The modules a scheduler, tokenizer manager and HTTP server import to serve Llama-family targets with
# EAGLE / EAGLE3 / STANDALONE / NGRAM / DSPARK / DFLASH, the Triton attention backend and CUDA graphs.
MODULES = [
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.model_executor.runner_backend.full_cuda_graph_backend",
    "sglang.srt.model_executor.runner_backend_utils.weak_ref_tensor",
    "sglang.srt.models.llama",
    "sglang.srt.models.llama_eagle",
    "sglang.srt.models.llama_eagle3",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.sampler",
    "sglang.srt.layers.logits_processor",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.standalone_worker_v2",
    "sglang.srt.speculative.ngram_worker",
    "sglang.srt.speculative.dspark_components.dspark_worker_v2",
    "sglang.srt.speculative.dspark_components.dspark_verify",
    "sglang.srt.speculative.dflash_worker_v2",
    "sglang.srt.models.dspark",
    "sglang.srt.models.dflash",
    "sglang.srt.speculative.eagle_draft_cuda_graph_runner",
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner",
    "sglang.kernels.ops.speculative.reconstruct_tree",
    "sglang.kernels.ops.speculative.verify_sampling",
]
# (module, name) bindings that must be the stand-in's replacement of a JIT op.
REPLACED = [
    ("sglang.kernels.ops.speculative.tree", "build_tree_kernel_efficient"),
    ("sglang.kernels.ops.speculative.tree", "verify_tree_greedy"),
    ("sglang.kernels.ops.speculative.tree", "reconstruct_indices_from_tree_mask"),
    ("sglang.kernels.ops.speculative.spec_tree", "sgl_build_tree_kernel_efficient"),
    ("sglang.kernels.ops.speculative.reconstruct_tree", "reconstruct_indices_from_tree_mask"),
    ("sglang.kernels.ops.speculative.sampling", "tree_speculative_sampling_target_only"),
    ("sglang.kernels.ops.speculative.verify_sampling", "tree_speculative_sampling_target_only"),
    ("sglang.srt.speculative.eagle_utils", "tree_speculative_sampling_target_only"),
    ("sglang.kernels.ops.kvcache.kvcache", "can_use_store_cache"),
    ("sglang.srt.mem_cache.memory_pool", "can_use_store_cache"),
]


def fake_cuda() -> None:
    """Let import-time platform checks see an H200 (imports only; nothing runs on a device)."""
    import torch

    os.environ.pop("SGLANG_USE_CPU_ENGINE", None)  # SGLang's CPU-engine switch would win over the fake GPU

    class _Props:
        name, major, minor, multi_processor_count = "NVIDIA H200", 9, 0, 132
        total_memory, L2_cache_size, warp_size = 143 * 2**30, 60 * 2**20, 32

    torch.cuda.is_available = lambda: True
    torch.version.cuda = torch.version.cuda or "13.0"
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_name = lambda *a, **k: _Props.name
    torch.cuda.get_device_properties = lambda *a, **k: _Props()
    torch.cuda.mem_get_info = lambda *a, **k: (140 * 2**30, _Props.total_memory)


# What a resolved server must keep on: SGLang's GPU defaults the e2e run is about.
KEPT_ON = {"disable_cuda_graph": False, "disable_overlap_schedule": False, "disable_radix_cache": False,
           "attention_backend": "triton", "device": "cuda"}
# Block drafters: the draft's attention backend must resolve to Triton (None: the draft worker takes
# the target's, Triton), never to SGLang's CUDA fallback FlashInfer, which the kit does not carry.
BLOCK_DRAFTERS = ("DSPARK", "DFLASH")
DRAFT_BACKENDS_OK = (None, "triton")
BLOCK_WINDOW = 4  # verify window of the tiny block drafts: DSPARK gamma 3 + 1, DFLASH block 4


def resolve_servers() -> dict:
    """Resolve every tiny-model server of the e2e run with SGLang's own argument pipeline
    (``prepare_server_args`` after sglang-asd's launcher, then ``resolve_once``: the per-algorithm
    handlers, deterministic inference, platform defaults, as a launch does): SGLang accepts each
    configuration and keeps CUDA graphs, the overlap scheduler and the radix cache on. Returns
    name -> problems (the resolved value of each field that is not as required)."""
    import e2e_steps

    from sglang.srt.server_args import prepare_server_args
    from sglang_asd.launch_server import build_argv

    out = {}
    for name, spec in e2e_steps.SERVERS.items():
        try:
            _, argv = build_argv(spec.argv())
            args = prepare_server_args(argv)
            args.resolve_once()
            got = args.resolved_dict()
            wrong = {k: got.get(k) for k, v in KEPT_ON.items() if got.get(k) != v}
            if "--speculative-adaptive" in argv and not got.get("speculative_adaptive"):
                wrong["speculative_adaptive"] = False
            if ("--enable-deterministic-inference" in argv) != bool(got.get("enable_deterministic_inference")):
                wrong["enable_deterministic_inference"] = got.get("enable_deterministic_inference")
            if got.get("speculative_algorithm") in BLOCK_DRAFTERS:
                if got.get("speculative_draft_attention_backend") not in DRAFT_BACKENDS_OK:
                    wrong["speculative_draft_attention_backend"] = got.get("speculative_draft_attention_backend")
                if got.get("speculative_num_draft_tokens") != BLOCK_WINDOW:
                    wrong["speculative_num_draft_tokens"] = got.get("speculative_num_draft_tokens")
            out[name] = wrong
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
    return out


def check(fake: bool, resolve: bool = False) -> dict:
    os.environ["SGLANG_ASD_KERNEL_STANDIN"] = "cuda-e2e"
    if fake:
        fake_cuda()
    import cuda_standin

    from sglang_asd import cpu_backend

    cpu_active = cpu_backend.install()
    report = {"fake_cuda": fake, "cpu_standin_active": cpu_active, "cuda_standin_active": cuda_standin.is_installed(),
              "import_errors": {}, "bindings": {}, "unprovided_imported": []}
    t0 = time.time()
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # keep going: the report lists every failure
            report["import_errors"][name] = f"{type(e).__name__}: {e}"[:600]
            traceback.print_exc(limit=4)
    report["import_seconds"] = round(time.time() - t0, 1)
    for mod_name, attr in REPLACED:
        fn = getattr(sys.modules.get(mod_name), attr, None)
        report["bindings"][f"{mod_name}.{attr}"] = getattr(fn, "__sglang_asd_replaces__", None)
    seen = set()
    for mod in list(sys.modules.values()):
        for value in list(getattr(mod, "__dict__", {}).values()):
            if isinstance(value, types.FunctionType) and value.__dict__.get("__sglang_asd_missing__"):
                seen.add(value.__name__)
    report["unprovided_imported"] = sorted(seen)
    report["sglang_modules"] = sum(1 for m in sys.modules if m.startswith("sglang."))
    if resolve:
        report["server_resolution"] = resolve_servers()
    report["ok"] = (not report["import_errors"] and report["cuda_standin_active"] and not cpu_active
                    and all(report["bindings"].values())
                    and not any(report.get("server_resolution", {}).values()))
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fake-cuda", action="store_true", help="pretend an H200 for import-time checks (CPU only)")
    ap.add_argument("--resolve", action="store_true",
                    help="also resolve the e2e run's tiny-model servers with SGLang's argument pipeline")
    ap.add_argument("--json", help="write the report here too")
    args = ap.parse_args(argv)
    report = check(args.fake_cuda, args.resolve)
    text = json.dumps(report, indent=1)
    if args.json:
        pathlib.Path(args.json).write_text(text + "\n")
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
