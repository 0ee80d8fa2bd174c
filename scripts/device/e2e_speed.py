"""Step 6 of the GPU end-to-end run: ASD's verify-step overhead at a real model's shapes.

The target is a synthetic model of Llama-3.1-8B's shape (32 layers, hidden 4096, GQA 32/8, MLP
14336, vocab 128256, bfloat16) built on the device in seconds: random embedding and ``lm_head``,
every decoder layer's projections zero (norms one), so its next token depends only on the current
one (a "bigram" model) while every layer still runs its dense matmuls and attention at full cost. The EAGLE head reproduces that map
exactly through ``fc = [I + sigma*N | 0]`` (its layer adds nothing; SGLang binds the target's
embedding and ``lm_head`` to it); ``sigma`` is calibrated on the device so that the head's greedy
agreement with the target is ``--agreement``. ACCEPTANCE ON SYNTHETIC WEIGHTS IS NOT A REAL
MODEL'S: this measures cost at real shapes, not the speed-up a real target and head would get.

Serving: one ASD server (EAGLE chain, 3 steps, 4 draft tokens, CUDA graphs, overlap scheduler);
per batch size 1/8/32, strict (budget 0) and budget 8 run interleaved; tok/s and ms per round are
medians. The verify step (the acceptance computation that follows the target's verify forward:
argmax + tree walk, plus ASD's selection) is then timed alone with CUDA events at the same shapes,
and its share of a measured round is reported.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import statistics
import time

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
    "bos_token_id": 128000, "eos_token_id": [128001, 128009], "torch_dtype": "bfloat16",
}
LOGIT_STD = 2.0  # target logits ~ N(0, LOGIT_STD^2): top-2 gaps of a few tenths of a nat, so ASD has cheap misses
# What served the kernels in this measurement (docs/GPU.md, "Kernel supply").
KERNEL_SUPPLY = {
    "attention": "SGLang Triton backend",
    "rmsnorm, silu_and_mul, rotary, clamp_position": "SGLang forward_native (SGLANG_FORCE_FUSED_OP_BACKEND=torch)",
    "matmuls": "torch / cuBLAS",
    "kv-cache store": "SGLang's torch fallback (the stand-in answers its JIT store_cache probe False)",
    "EAGLE tree build + greedy verify": "SGLang's Triton versions (its XPU path) via the kit's stand-in",
    "sampling": "SGLang PyTorch sampler",
}


def _layer_names(i: int, cfg: dict) -> dict:
    h, q = cfg["hidden_size"], cfg["num_attention_heads"] * cfg["head_dim"]
    kv, m = cfg["num_key_value_heads"] * cfg["head_dim"], cfg["intermediate_size"]
    p = f"model.layers.{i}."
    return {p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (m, h), p + "mlp.up_proj.weight": (m, h), p + "mlp.down_proj.weight": (h, m)}


def build_target(root: pathlib.Path, cfg: dict, seed: int = 0, device: str = "cuda") -> dict:
    """Write the bigram target (config + sharded safetensors); returns embedding and lm_head (GPU)."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    g = torch.Generator(device=device).manual_seed(seed)
    V, H = cfg["vocab_size"], cfg["hidden_size"]
    embed = torch.randn(V, H, generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)
    head = (torch.randn(V, H, generator=g, device=device) * (LOGIT_STD / math.sqrt(H))).to(torch.bfloat16)
    weight_map = {}
    first = {"model.embed_tokens.weight": embed.cpu(), "lm_head.weight": head.cpu(),
             "model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    shards = [first]
    for i in range(cfg["num_hidden_layers"]):
        shard = {name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in _layer_names(i, cfg).items()}
        shard[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
        shard[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
        shards.append(shard)
    total = 0
    for n, shard in enumerate(shards):
        fname = f"model-{n:05d}.safetensors"
        save_file(shard, str(root / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in shard})
        total += sum(t.numel() * t.element_size() for t in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    (root / "config.json").write_text(json.dumps(cfg, indent=1))
    return {"embed": embed, "head": head}


def calibrate_sigma(embed, head, agreement: float, n: int = 2048, seed: int = 1) -> tuple[float, float, object]:
    """``sigma`` whose head ``e -> (I + sigma N) e`` agrees with the target's argmax on ~``agreement``."""
    import torch

    dev = embed.device
    g = torch.Generator(device=dev).manual_seed(seed)
    H = embed.shape[1]
    N = torch.randn(H, H, generator=g, device=dev) / math.sqrt(H)
    idx = torch.randint(0, embed.shape[0], (n,), generator=g, device=dev)
    e = embed[idx].float()
    target = (e @ head.float().T).argmax(-1)
    lo, hi, best = 0.0, 4.0, (0.0, 1.0)
    for _ in range(14):  # agreement falls with sigma: bisect
        mid = (lo + hi) / 2
        agree = float(((e + mid * (e @ N.T)) @ head.float().T).argmax(-1).eq(target).float().mean())
        best = (mid, agree)
        lo, hi = (mid, hi) if agree > agreement else (lo, mid)
    return best[0], best[1], N


def build_head(root: pathlib.Path, cfg: dict, sigma: float, N) -> None:
    """EAGLE head (SGLang's LlamaForCausalLMEagle format): fc = [I + sigma N | 0], a no-op layer."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    H = cfg["hidden_size"]
    fc = torch.zeros(H, 2 * H, device=N.device)
    fc[:, :H] = torch.eye(H, device=N.device) + sigma * N
    w = {"fc.weight": fc.to(torch.bfloat16).cpu(), "fc.bias": torch.zeros(H, dtype=torch.bfloat16),
         "layers.0.post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16)}
    for name, shape in _layer_names(0, cfg).items():
        w[name.replace("model.", "")] = torch.zeros(shape, dtype=torch.bfloat16)
    save_file(w, str(root / "model.safetensors"), metadata={"format": "pt"})
    head_cfg = dict(cfg, architectures=["LlamaForCausalLMEagle"], num_hidden_layers=1)
    (root / "config.json").write_text(json.dumps(head_cfg, indent=1))


def server_args(target: pathlib.Path, head: pathlib.Path, cpu: bool = False) -> list[str]:
    args = ["--model-path", str(target), "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
            str(head), "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4",
            "--speculative-eagle-topk", "1", "--skip-tokenizer-init", "--dtype", "bfloat16",
            "--max-running-requests", "32", "--context-length", "4096", "--log-level", "info"]
    if cpu:  # pre-validation of the model construction only; the launcher adds its CPU defaults
        return args
    return args + ["--device", "cuda", "--attention-backend", "triton", "--sampling-backend", "pytorch",
                   "--mem-fraction-static", "0.6", "--cuda-graph-max-bs-decode", "32"]


def measure_serving(url: str, batches, reps: int, max_new: int, vocab: int) -> dict:
    """Interleaved strict / budget-8 rounds per batch size; medians of tok/s and ms per round."""
    import random

    from e2e_lib import generate_many

    rng = random.Random(7)
    for budget in (0.0, 8.0):  # untimed: first-use compiles (Triton, ASD's verify) stay out of the medians
        warm = [{"input_ids": [rng.randrange(1000, vocab - 1000) for _ in range(32)],
                 "sampling": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True, "asd_budget": budget}}
                for _ in range(max(batches))]
        generate_many(url, warm, concurrency=max(batches), timeout=300)
    out = {}
    for bs in batches:
        samples = {"strict": [], "budget8": []}
        for rep in range(reps):
            for arm in (("strict", "budget8") if rep % 2 == 0 else ("budget8", "strict")):
                budget = 0.0 if arm == "strict" else 8.0
                jobs = [{"input_ids": [rng.randrange(1000, vocab - 1000) for _ in range(32)],
                         "sampling": {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True,
                                      "asd_budget": budget}} for _ in range(bs)]
                t0 = time.perf_counter()
                answers = generate_many(url, jobs, concurrency=bs, timeout=300)
                wall = time.perf_counter() - t0
                bad = [a["error"] for a in answers if "error" in a]
                if bad:
                    raise RuntimeError(f"bs={bs} {arm}: {bad[0]}")
                metas = [a.get("meta_info") or {} for a in answers]
                tokens = sum(len(a.get("output_ids") or []) for a in answers)
                rounds = max(m.get("spec_verify_ct") or 1 for m in metas)
                samples[arm].append({"tok_s": tokens / wall, "ms_per_round": 1e3 * wall / rounds,
                                     "accept_length": statistics.mean(m.get("spec_accept_length") or 0 for m in metas),
                                     "exceptions": statistics.mean((m.get("asd") or {}).get("exceptions") or 0
                                                                   for m in metas)})
        out[bs] = {arm: {k: round(statistics.median(s[k] for s in v), 3) for k in v[0]} for arm, v in samples.items()}
    return out


def _chain_round(bs: int, W: int, V: int, agreement: float, seed: int):
    """A chain verify round at serving shapes: bf16 logits, drafts that match the argmax on ~agreement."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = (torch.randn(bs * W, V, generator=g, device="cuda") * LOGIT_STD).to(torch.bfloat16)
    argmax = logits.argmax(-1).view(bs, W)
    cand = torch.randint(0, V, (bs, W), generator=g, device="cuda")
    agree = torch.rand(bs, W, generator=g, device="cuda") < agreement
    cand[:, 1:] = torch.where(agree[:, 1:], argmax[:, :-1], cand[:, 1:])
    nxt = torch.arange(1, W + 1, device="cuda").expand(bs, W).clone()
    nxt[:, -1] = -1
    return dict(logits=logits, cand=cand, nxt=nxt, sib=torch.full_like(nxt, -1),
                index=torch.arange(bs * W, device="cuda").view(bs, W))


def time_verify(batches, reps: int = 50, W: int = 4, V: int = 128256, agreement: float = 0.7) -> dict:
    """The acceptance computation alone (CUDA events, interleaved, medians), eager as SGLang runs it.
    strict: SGLang's greedy branch of ``eagle_sample`` (argmax + ``verify_tree_greedy_func``, here
    its Triton version); asd: the same plus what the ASD seam adds (``asd_verify`` reusing the
    argmax, budget 8, and the ``torch.where`` merge)."""
    import torch

    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_func
    from sglang_asd.verify import asd_verify

    K = W - 1
    out = {}
    for bs in batches:
        r = _chain_round(bs, W, V, agreement, seed=bs)
        remaining = torch.full((bs,), 8.0, device="cuda")
        gate = torch.full((bs,), 0.25, device="cuda")
        cap = torch.full((bs,), 2, dtype=torch.int32, device="cuda")

        def strict():
            predict = torch.zeros(bs * W, dtype=torch.int32, device="cuda")
            accept = torch.full((bs, K + 1), -1, dtype=torch.int32, device="cuda")
            ncd = torch.empty(bs, dtype=torch.int32, device="cuda")
            tp = torch.argmax(r["logits"], dim=-1).reshape(bs, W)
            verify_tree_greedy_func(predicts=predict, accept_index=accept, accept_token_num=ncd,
                                    candidates=r["cand"], retrieve_index=r["index"], retrieve_next_token=r["nxt"],
                                    retrieve_next_sibling=r["sib"], target_predict=tp, topk=1)
            return predict, accept, ncd, tp

        def asd():
            predict, accept, ncd, tp = strict()
            o = asd_verify(r["cand"], r["logits"], r["nxt"], r["sib"], remaining, gate, cap, K, target_predict=tp)
            rows = o.num_correct_drafts >= 0
            predict.view(bs, W).copy_(torch.where(rows[:, None], o.predict.view(bs, W).to(predict.dtype),
                                                  predict.view(bs, W)))
            accept.copy_(torch.where(rows[:, None], o.accept_index.to(accept.dtype), accept))
            ncd.copy_(torch.where(rows, o.num_correct_drafts.to(ncd.dtype), ncd))

        arms = {"strict": strict, "asd": asd}
        for fn in arms.values():
            fn()
        torch.cuda.synchronize()
        ev = {n: [] for n in arms}
        for i in range(reps):
            for n in (list(arms) if i % 2 == 0 else list(arms)[::-1]):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                arms[n]()
                e.record()
                ev[n].append((s, e))
        torch.cuda.synchronize()
        out[bs] = {n: round(statistics.median(s.elapsed_time(e) for s, e in v), 4) for n, v in ev.items()}
    return out


def _scratch() -> str:
    """Memory-backed /dev/shm when it has room for the 16 GB target, else /tmp."""
    try:
        return "/dev/shm" if shutil.disk_usage("/dev/shm").free > 40 * 2**30 else "/tmp"
    except OSError:
        return "/tmp"


# --cpu pre-validation: the same construction at a shape a CPU serves in seconds.
SMALL = dict(LLAMA31_8B, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, vocab_size=4096)


def run(pool, out_dir: pathlib.Path, agreement: float = 0.7, batches=(1, 8, 32), reps: int = 3,
        max_new: int = 256, cpu: bool = False) -> dict:
    """Build, serve, measure, time the verify step; ``cpu`` = the small shape, serving only."""
    import torch

    from e2e_lib import ServerSpec

    cfg, device = (SMALL, "cpu") if cpu else (LLAMA31_8B, "cuda")
    base = pathlib.Path("/tmp" if cpu else _scratch()) / "asd-synth"
    t0 = time.perf_counter()
    weights = build_target(base / "target", cfg, device=device)
    sigma, measured, N = calibrate_sigma(weights["embed"], weights["head"], agreement)
    build_head(base / "eagle-head", cfg, sigma, N)
    del weights, N
    if not cpu:
        torch.cuda.empty_cache()
    build_s = round(time.perf_counter() - t0, 1)
    spec = ServerSpec("asd_llama31_8b_shape", tuple(server_args(base / "target", base / "eagle-head", cpu)))
    url, start_s = pool.url(spec)
    serving = measure_serving(url, batches, reps, max_new, cfg["vocab_size"])
    pool.stop(spec.name)
    shutil.rmtree(base, ignore_errors=True)
    verify = {} if cpu else time_verify(batches)
    share = {bs: {arm: round(verify[bs]["strict" if arm == "strict" else "asd"] / serving[bs][arm]["ms_per_round"], 4)
                  for arm in ("strict", "budget8")} for bs in batches} if verify else {}
    return {"note": "synthetic weights: acceptance is not a real model's; speeds use the kernel supply listed",
            "shape": "Llama-3.1-8B (bf16)" if not cpu else "small CPU pre-validation shape",
            "agreement_target": agreement, "agreement_calibrated": round(measured, 3),
            "sigma": round(sigma, 4), "build_s": build_s, "start_s": start_s, "max_new_tokens": max_new, "reps": reps,
            "serving": serving, "verify_step_ms": verify, "verify_share_of_round": share,
            "kernel_supply": KERNEL_SUPPLY}
