"""Measure a set of server setups: start time, output tokens/s and mean accept length per budget.

    .venv/bin/python scripts/measure_serving.py --setups tiny --budgets 0,8 --out docs/serving_tiny.json

Each setup is started with ``python -m sglang_asd.launch_server``, warmed up, then given the same
prompts one at a time (fixed work: ignore_eos, fixed max_new_tokens, greedy), once per budget.
Tokens/s = output tokens / wall time of the pass. Accept length = SGLang's own
``spec_accept_length`` averaged over requests (weighted by verify rounds). Writes JSON and prints a
markdown table. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import requests

from sglang_asd.testing.server import LaunchedServer

SPEC = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
SETUPS = {
    "tiny": {
        "plain": ["--model-path", "fixture:tiny-llama"],
        "EAGLE": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
                  "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", *SPEC],
        "EAGLE tree (topk 2)": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
                                "--speculative-draft-model-path", "fixture:tiny-eagle-noisy",
                                "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
                                "--speculative-num-draft-tokens", "6"],
        "EAGLE3": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE3",
                   "--speculative-draft-model-path", "fixture:tiny-eagle3-noisy", *SPEC],
        "STANDALONE": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "STANDALONE",
                       "--speculative-draft-model-path", "fixture:tiny-llama-bigram", *SPEC],
        "NGRAM": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "NGRAM",
                  "--speculative-num-draft-tokens", "4"],
    },
    "smollm2": {
        "plain": ["--model-path", "fixture:smollm2-135m"],
        "STANDALONE (embedded default)": [],
        "NGRAM": ["--model-path", "fixture:smollm2-135m", "--speculative-algorithm", "NGRAM",
                  "--speculative-num-draft-tokens", "5"],
    },
}
PROMPTS = [
    "Write a short story about a robot learning to paint.",
    "Explain why the sky is blue in simple terms.",
    "List five tips for writing clean Python code.",
    "What is the capital of France? Answer and explain its history briefly.",
]


def run_pass(url: str, budget: float, max_new: int) -> dict:
    tokens, rounds, accepted, spent = 0, 0, 0.0, 0.0
    t0 = time.perf_counter()
    for prompt in PROMPTS:
        body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new,
                                                    "ignore_eos": True, "asd_budget": budget}}
        meta = requests.post(url + "/generate", json=body, timeout=1200).json()["meta_info"]
        tokens += meta["completion_tokens"]
        ct = meta.get("spec_verify_ct") or 0
        rounds += ct
        accepted += (meta.get("spec_accept_length") or 0) * ct
        spent += (meta.get("asd") or {}).get("spent", 0.0)
    wall = time.perf_counter() - t0
    return {"budget": budget, "tokens": tokens, "wall_s": round(wall, 3), "tok_per_s": round(tokens / wall, 2),
            "accept_length": round(accepted / rounds, 3) if rounds else None, "spent_mean": round(spent / len(PROMPTS), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setups", default="tiny", choices=sorted(SETUPS))
    ap.add_argument("--only", default="", help="comma-separated setup names to run (default: all)")
    ap.add_argument("--budgets", default="0,8")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    results = []
    for name, sg_args in SETUPS[args.setups].items():
        if only and name not in only:
            continue
        log = Path(tempfile.mkdtemp(prefix="measure_")) / "server.log"
        t0 = time.perf_counter()
        with LaunchedServer([*sg_args, "--dtype", args.dtype], log) as url:
            start_s = time.perf_counter() - t0
            run_pass(url, 0, 8)  # warm-up
            spec = any("--speculative-algorithm" in a for a in sg_args) or not sg_args
            for budget in budgets if spec else [0.0]:
                row = {"setup": name, "start_s": round(start_s, 1), **run_pass(url, budget, args.max_new_tokens)}
                results.append(row)
                print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"setups": args.setups, "dtype": args.dtype, "max_new_tokens": args.max_new_tokens,
                                    "prompts": len(PROMPTS), "results": results}, indent=2))
    print("\n| setup | start (s) | budget | tok/s | accept length | mean spent |\n|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['setup']} | {r['start_s']} | {r['budget']:g} | {r['tok_per_s']} | {r['accept_length']} | {r['spent_mean']} |")


if __name__ == "__main__":
    main()
