#!/usr/bin/env bash
# A/B: torch's native bf16 linear kernel vs float32 accumulation, Qwen pair, strict, fixed work.
cd "$(dirname "$0")/../../.."  # the repository root
QWEN='--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE --speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 --asd-max-budget 64 --mem-fraction-static 0.8 --max-total-tokens 16384 --asd-standalone-draft-fix'
for mode in fp32-accumulate native; do
  SGLANG_ASD_CPU_GEMM=$mode .venv/bin/python scripts/lab/speed.py --launch="$QWEN" --budgets 0 \
    --dataset gsm8k --num-prompts 8 --max-new-tokens 64 --concurrency 8 --repeats 1 \
    --timeout 1800 --launch-timeout 900 --out out/gemm_ab/$mode  # copied here afterwards
done
