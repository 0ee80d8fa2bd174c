#!/usr/bin/env bash
# One arm of the CPU stand-in A/B (2026-12-02): Qwen pair, strict, 8 GSM8K prompts x 64 tokens,
# concurrency 8, float32-accumulate linear layers. Run from the checkout whose code the arm measures:
#   bash docs/measurements/cpu_stand_in_ab/run.sh <checkout> <out dir>
# 1_before: e3ae91e's code (frozen worktree); 2_batched_attention: the extend attention batched over
# rows and gathered head-major; 3_plus_fp32_lm_head: and the LM head through a float32 copy.
# The three ran one after another on a quiet machine (foreign CPU share in each speed_passes.jsonl).
cd "$1"
QWEN='--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE --speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 --asd-max-budget 64 --mem-fraction-static 0.8 --max-total-tokens 16384 --asd-standalone-draft-fix'
SGLANG_ASD_CPU_GEMM=fp32-accumulate python -m sglang_asd.bench.speed --launch="$QWEN" --budgets 0 \
    --dataset gsm8k --num-prompts 8 --max-new-tokens 64 --concurrency 8 --repeats 1 \
    --timeout 1800 --launch-timeout 900 --out "$2"
