#!/usr/bin/env bash
# The stand-in attention's two kernels in a served Qwen pair (STANDALONE K = 4, greedy, strict and
# budget 8): SGLANG_ASD_CPU_ATTENTION=fused against =reference, one server per run, in the order
# fused, reference, fused, reference (ABAB, so drift between runs falls on both kernels), each run
# at three loads:
#   c1:   4 prompts x 64 tokens, one request at a time, budgets 0 and 8;
#   c24:  24 prompts x 64 tokens, 24 at once (the audits' concurrency), budget 0;
#   c24L: 24 prompts x 256 tokens, 24 at once, budget 0 (longer contexts: more attention per step).
# Then the table: python docs/measurements/cpu_attention/table.py OUT
#   OUT=out/cpu_attention bash docs/measurements/cpu_attention/run.sh
# Needs a quiet machine (the speed tool marks disturbed passes; nothing is redone here).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-out/cpu_attention}
PORT=${PORT:-31000}
SERVER="--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --asd-max-budget 64 --mem-fraction-static 0.8 --max-total-tokens 16384"
mkdir -p "$OUT"
speed() {  # speed NAME ARGS...: one speed run against the server on PORT
    local name=$1; shift
    "$PY" scripts/lab/speed.py --url "http://127.0.0.1:$PORT" --dataset gsm8k,mtbench --repeats 1 \
        --redo-disturbed 0 "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
}
i=0
for kernel in fused reference fused reference; do
    i=$((i + 1))
    SGLANG_ASD_CPU_ATTENTION=$kernel "$PY" -m sglang_asd.launch_server $SERVER --port "$PORT" --host 127.0.0.1 \
        >"$OUT/server_${i}_$kernel.log" 2>&1 &
    server=$!
    for _ in $(seq 1 300); do curl -sf "127.0.0.1:$PORT/health" >/dev/null && break; sleep 2; done
    speed "c1_${i}_$kernel" --budgets 0,8 --num-prompts 4 --max-new-tokens 64 --concurrency 1
    speed "c24_${i}_$kernel" --budgets 0 --num-prompts 24 --max-new-tokens 64 --concurrency 24
    speed "c24L_${i}_$kernel" --budgets 0 --num-prompts 24 --max-new-tokens 256 --concurrency 24
    kill "$server"; wait "$server" || true; sleep 5
    echo "$(date '+%F %T') run $i ($kernel) done"
done
"$PY" docs/measurements/cpu_attention/table.py "$OUT"
