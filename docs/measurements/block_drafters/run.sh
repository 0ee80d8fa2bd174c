#!/usr/bin/env bash
# Issue 32: tokens per verify round, strict vs budget 8, on the noisy tiny block drafts (fixed work:
# 16 prompts x 128 new tokens, one request at a time). The tiny target is a 2-layer bigram Llama: the
# figures are acceptance, not speed (tok/s of a 64-wide model on a CPU says nothing about a GPU).
#   bash docs/measurements/block_drafters/run.sh        # writes out/block_drafters/{dspark,dflash}
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
for algo in dspark dflash; do
  "$PY" -m sglang_asd.bench.speed --launch="--config server_configs/cpu_tiny_${algo}.yaml" \
    --budgets 0,8 --num-prompts 16 --max-new-tokens 128 --concurrency 1 --repeats 1 \
    --out "out/block_drafters/${algo}" --resume
done
