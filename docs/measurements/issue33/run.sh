#!/usr/bin/env bash
# Issue 33: what the sampled rule (asd-sampled-1, docs/SAMPLED.md) buys and costs on the Qwen pair
# (Qwen2.5-Coder 1.5B + 0.5B draft, STANDALONE K = 4, SGLang's own draft flow, no draft fix, CPU),
# every request sampled at temperature 0.7, top-p 0.95, two seeded samples per prompt or item
# (sampling_seed 0 and 1 under every arm, so arms pair by (prompt, seed) / (item, seed)):
#   1. speed at fixed work: 16 prompts (GSM8K, MT-Bench) x 128 tokens x 2 seeds, concurrency 1,
#      rounds schedule, beside plain decoding of the target (no speculation, same sampling): one
#      repeat first, repeats 2 and 3 after the audit (step 4);
#   2. quality at natural stop: GSM8K and HumanEval, chat route, cap 384 tokens, concurrency 24,
#      the first 20, then 50, then 100 items (one step each: a stop keeps a complete smaller audit);
#   3. the receipts checked (check_receipts.py) and the reports rewritten, the audit's frontier with
#      the speed run's ratios on its x axis.
# Arms: strict (asd_budget=0, exact speculative sampling) and budget B in {2, 8, 32} nats of KL at
# floor 0.3 (the server's default) and 0.5 (a request may only raise the floor).
# SGLANG_ASD_CPU_SAMPLING=on for every server: stock SGLang verifies sampled rows greedily on CPU
# (cpu_backend/seams/sampling.py); check_receipts.py stops the chain if a receipt says otherwise.
#
# Resumable: every step passes --resume and leaves STEP.done; after a stop run the script again (a
# fresh checkout starts from the logs committed under results/, see steps.sh's chain_seed; at each
# finished step `bash docs/measurements/publish.sh $OUT docs/measurements/issue33/results`, then commit):
#   nohup nice -n 19 bash docs/measurements/issue33/run.sh > $OUT/run.out 2>&1 &
# It waits while issue 35's chain runs (one measurement chain at a time on this machine).
# Run it from a frozen worktree so edits in the main tree cannot change a running server:
#   git worktree add /work/meas33 <commit>; cd /work/meas33; REPO=/work/meas33 OUT=/work/main/out/meas33 bash ...
# Speed passes wait for a quiet machine and redo a disturbed one (scripts/lab/quiet.py): run nothing
# heavy beside it. A report of a step still running: python scripts/lab/speed.py --report-only --out DIR
# SMOKE=1: the same steps on the SmolLM2 demo pair at toy sizes (2 prompts x 16 tokens, 2 items per
# task, cap 64, one repeat; no waiting, OUT out/meas33_smoke), which checks the script end to end in a
# few minutes.
set -uo pipefail

source "$(dirname "$0")/../steps.sh"
if [ "${SMOKE:-0}" = 1 ]; then chain_setup meas33_smoke run.log; else chain_setup meas33 run.log; fi
export SGLANG_ASD_CPU_SAMPLING=on

SAMPLING="--temperature 0.7 --top-p 0.95 --samples 2"
# strict + B x floor; the audit keeps four of them (below)
SPEED_ARMS="b2f0.3:asd_budget=2,asd_sampled_floor=0.3;b2f0.5:asd_budget=2,asd_sampled_floor=0.5;\
b8f0.3:asd_budget=8,asd_sampled_floor=0.3;b8f0.5:asd_budget=8,asd_sampled_floor=0.5;\
b32f0.3:asd_budget=32,asd_sampled_floor=0.3;b32f0.5:asd_budget=32,asd_sampled_floor=0.5"
# The audit decodes 4 arms x 2 seeds x (GSM8K + HumanEval) to natural stop, hours of machine time
# per 100 items: it keeps the middle budget at both floors and the largest at the default floor,
# where the speed run measures all six.
AUDIT_ARMS="b8f0.3:asd_budget=8,asd_sampled_floor=0.3;b32f0.3:asd_budget=32,asd_sampled_floor=0.3;\
b8f0.5:asd_budget=8,asd_sampled_floor=0.5"
LONG="--timeout 3600 --launch-timeout 1800 --resume"
if [ "${SMOKE:-0}" = 1 ]; then
    TARGET="--model-path fixture:smollm2-135m"
    SPEC="$TARGET --speculative-algorithm STANDALONE --speculative-draft-model-path fixture:smollm2-135m-draft \
--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 --asd-max-budget 64"
    SPEED_SERVER=$SPEC; AUDIT_SERVER=$SPEC; PLAIN=$TARGET
    # beside other work a smoke's passes are disturbed: kept (marked), never waited for and redone
    WORK="--num-prompts 2 --max-new-tokens 16 --redo-disturbed 0"; LIMITS="2"; REPEATS=1; CAP=64; MIN_GB=3
else
    TARGET="--model-path fixture:qwen2.5-coder-1.5b"
    SPEC="$TARGET --speculative-algorithm STANDALONE --speculative-draft-model-path fixture:qwen2.5-coder-0.5b \
--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5 --asd-max-budget 64 \
--mem-fraction-static 0.8"
    # The KV pool: 16384 tokens hold a 128-token request many times over; the audit's 24 concurrent
    # requests of prompt + 384 tokens need 32768. Neither changes what is decoded.
    SPEED_SERVER="$SPEC --max-total-tokens 16384"; AUDIT_SERVER="$SPEC --max-total-tokens 32768"
    PLAIN="$TARGET --mem-fraction-static 0.8 --max-total-tokens 16384"
    WORK="--num-prompts 16 --max-new-tokens 128"; LIMITS="20 50 100"; REPEATS=3; CAP=384; MIN_GB=9
fi

check() {  # the receipts so far; a violation stops the chain (the evidence would not be what it says)
    "$PY" docs/measurements/issue33/check_receipts.py "$@" >>"$OUT/check.log" 2>&1 \
        || { log "RECEIPT CHECK FAILED ($OUT/check.log)"; exit 1; }
    log "receipts checked: $*"
}

log "run.sh at $(git -C "$REPO" rev-parse --short HEAD) -> $OUT (SMOKE=${SMOKE:-0})"
[ "${SMOKE:-0}" = 1 ] || chain_seed "$REPO/docs/measurements/issue33/results"
wait_for_chains 'issue35/run.sh'

speed() {  # speed R: the speed run grown to R repeats (a stop keeps complete repeats)
    wait_for_memory $MIN_GB
    step "speed_r$1" scripts/lab/speed.py --launch="$SPEED_SERVER" --plain-launch="$PLAIN" --budgets 0 \
        --arms "$SPEED_ARMS" --dataset gsm8k,mtbench $WORK --concurrency 1 --schedule rounds $SAMPLING \
        --repeats "$1" $LONG --out "$OUT/speed" || exit 1
    check --speed "$OUT/speed"
}

# 1. Speed, one repeat: 32 (prompt, seed) pairs per arm, the interval over them.
speed 1

# 2. Quality, the item count grown step by step (--resume keeps every answer already decoded).
wait_for_memory $MIN_GB
for limit in $LIMITS; do
    step "audit_l$limit" sglang_asd.bench.audit --launch="$AUDIT_SERVER" --budgets 0 --arms "$AUDIT_ARMS" \
        --tasks gsm8k,humaneval --api chat --max-new-tokens $CAP --concurrency 24 $SAMPLING --limit "$limit" \
        $LONG --out "$OUT/audit" || exit 1
    check --audit "$OUT/audit"
done

report() {  # 3. The reports: speed.md (written by the speed run), audit.md and frontier.png with x =
    # tok/s against strict from the speed run (the arms both measured; strict-paired, per-prompt
    # interval while repeats are fewer than 5); written after the audit and again after step 4.
    "$PY" -m sglang_asd.bench.audit --report-only --out "$OUT/audit" --speed-json "$OUT/speed/speed.json" \
        >>"$OUT/report.log" 2>&1 && log "report: $OUT/speed/speed.md, $OUT/audit/audit.md, $OUT/audit/frontier.png"
}
report

# 4. Speed repeats 2 and 3 after the audit: one repeat already gives every arm its interval over
# prompts and seeds; more narrow the machine's share of it.
for r in $(seq 2 $REPEATS); do speed "$r"; done
report
log "run.sh finished"
