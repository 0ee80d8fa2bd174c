#!/usr/bin/env bash
# Issue 35: speculation that pays on CPU. Two measurements at fixed work (16 prompts x 128 tokens,
# GSM8K and MT-Bench, ignore_eos, concurrency 1, rounds schedule, three repeats added one at a time):
#   1. targets: the Qwen pair (STANDALONE K = 4, SGLang's own draft flow, the CPU GEMM default `auto`)
#      against plain decoding of its target: strict, budget 8 at gate 0.25 and at gate 0.5; and the
#      embedded demo (`make serve`, DEMO_CONFIG) against plain decoding of its own target;
#   2. the depth sweep: strict, budget 8 at gate 0.25 and 0.5, at K = 2, 6, 8 (chains; K = 4 is step 1's
#      server) and one tree (topk 2, 4 steps, 8 draft tokens).
#
# Resumable: every step passes --resume and leaves STEP.done; after a stop run the script again (a
# fresh checkout starts from the logs committed under results/, see steps.sh's chain_seed):
#   nohup nice -n 19 bash docs/measurements/issue35/run.sh > $OUT/run.out 2>&1 &
# Run it from a frozen worktree so edits in the main tree cannot change a running server:
#   git worktree add /work/meas35 <commit>; cd /work/meas35; REPO=/work/meas35 OUT=/work/main/out/meas35 bash ...
# Speed passes wait for a quiet machine and redo a disturbed one (scripts/lab/quiet.py): run nothing
# heavy beside it. A report of a step still running: python scripts/lab/speed.py --report-only --out DIR
set -uo pipefail

source "$(dirname "$0")/../steps.sh"
chain_setup meas35 run.log

# The KV pool holds a request of 128 tokens many times over; neither flag changes what is decoded.
MEM="--mem-fraction-static 0.8 --max-total-tokens 16384"
QWEN_TARGET="--model-path fixture:qwen2.5-coder-1.5b"
QWEN_DRAFT="--speculative-algorithm STANDALONE --speculative-draft-model-path fixture:qwen2.5-coder-0.5b"
# A request may lower the server's gate, never raise it: the servers run at gate 0.5 and every arm
# states its own.
ARMS="--budgets 0 --arms b8:asd_budget=8,asd_gate=0.25;b8g0.5:asd_budget=8,asd_gate=0.5"
WORK="--dataset gsm8k,mtbench --num-prompts 16 --max-new-tokens 128 --concurrency 1 --schedule rounds"
LONG="--timeout 3600 --launch-timeout 1800 --resume"
DEMO_CONFIG=${DEMO_CONFIG:-server_configs/cpu_demo_ngram.yaml}  # the n-gram demo, `make serve`'s default

log "run.sh at $(git -C "$REPO" rev-parse --short HEAD) -> $OUT"
chain_seed "$REPO/docs/measurements/issue35/results"

qwen() {  # qwen NAME REPEATS "STEPS TOPK DRAFT_TOKENS" [--plain-launch ...]
    local name=$1 repeats=$2; read -r steps topk tokens <<<"$3"; shift 3
    step "${name}_r$repeats" scripts/lab/speed.py \
        --launch="$QWEN_TARGET $QWEN_DRAFT --speculative-num-steps $steps --speculative-eagle-topk $topk \
--speculative-num-draft-tokens $tokens --asd-gate 0.5 --asd-max-budget 64 $MEM" "$@" \
        $ARMS $WORK --repeats "$repeats" $LONG --out "$OUT/$name"
}
demo() {  # demo REPEATS: `make serve`'s configuration against plain decoding of its target
    step "demo_r$1" scripts/lab/speed.py --launch="--config $DEMO_CONFIG" \
        --plain-launch="--model-path fixture:smollm2-135m" --budgets 0,8 $WORK --repeats "$1" $LONG \
        --out "$OUT/demo"
}

# 1. Targets: one repeat of each, then the demo's three, then the Qwen pair's second and third.
qwen qwen_k4 1 "4 1 5" --plain-launch="$QWEN_TARGET $MEM"
for r in 1 2 3; do demo $r; done
for r in 2 3; do qwen qwen_k4 $r "4 1 5" --plain-launch="$QWEN_TARGET $MEM"; done

# 2. The depth sweep, one repeat of every depth first (a stop keeps a complete table of some size).
for r in 1 2 3; do
    qwen qwen_k2 $r "2 1 3"
    qwen qwen_k6 $r "6 1 7"
    qwen qwen_k8 $r "8 1 9"
    qwen qwen_tree $r "4 2 8"
done
log "run.sh finished"
