#!/usr/bin/env bash
# Issue 12 measurements on the 2-core CPU machine, in order: Qwen2.5-Coder 1.5B + 0.5B speed
# (concurrency 1 and 4, repeats added one at a time so both concurrencies fill in together), the
# Qwen audit (50 items per task, then 100), the SmolLM2 demo (plain / strict / budget 8), stock vs
# fixed STANDALONE on both pairs (issue 9), and last the audit's budget-32 arm.
#
# Resumable: every step passes --resume (a tool's run log skips completed work) and a finished
# step leaves STEP.done, so after a stop just run this script again:
#   nohup bash docs/measurements/issue12/run_all.sh > OUT/run_all.out 2>&1 &
# Run it from a frozen worktree so edits in the main tree cannot change a running server:
#   git worktree add /work/meas <commit>; cd /work/meas; REPO=/work/meas OUT=/work/main/out/meas bash ...
# A tool's report of a step that is still running:  python -m sglang_asd.bench.speed --report-only --out DIR
set -uo pipefail

REPO=${REPO:-$(cd "$(dirname "$0")/../../.." && pwd)}
OUT=${OUT:-$REPO/out/meas}
PY=${PY:-/work/main/.venv/bin/python}
export PYTHONPATH=$REPO TQDM_MININTERVAL=60
cd "$REPO" || exit 2
mkdir -p "$OUT"

# Two Qwen servers (speculative + plain) must fit beside other work: SGLang's CPU memory check needs a
# larger static fraction than the launcher's default 0.3 once one is loaded, and a smaller KV pool
# (16384 tokens still hold 8 requests x (prompt + 384)). Neither changes what is decoded.
MEM="--mem-fraction-static 0.8 --max-total-tokens 16384"
QWEN="--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --asd-max-budget 64 $MEM"
SMOL="--model-path fixture:smollm2-135m --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:smollm2-135m-draft --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --asd-max-budget 64"
FIX="--asd-standalone-draft-fix"
LONG="--timeout 3600 --launch-timeout 1800 --resume"   # a shared 2-core machine can be very slow

log() { echo "$(date '+%F %T') $*" | tee -a "$OUT/run_all.log"; }

# step NAME MODULE ARGS...: run once to completion (two tries), then leave NAME.done
step() {
    local name=$1; shift
    if [ -e "$OUT/$name.done" ]; then log "skip $name (done)"; return 0; fi
    for try in 1 2; do
        log "start $name (try $try): python -m $*"
        "$PY" -m "$@" >>"$OUT/$name.log" 2>&1
        local rc=$?
        if [ $rc -eq 0 ]; then touch "$OUT/$name.done"; log "done $name"; return 0; fi
        log "FAILED $name (exit status $rc, log $OUT/$name.log)"
    done
    return 1
}

speed_json() { [ -f "$1" ] && echo "--speed-json $1"; }

log "run_all.sh at $(git -C "$REPO" rev-parse --short HEAD) -> $OUT"

# 1. Qwen speed at fixed work: plain, strict, budgets 2/8/32 at gate 0.25, budget 8 at gate 0.5.
# A request may lower the server's gate, never raise it: the server runs at --asd-gate 0.5 and
# every arm states its gate.
G25=asd_gate=0.25
ARMS="--budgets 0 --arms b2:asd_budget=2,$G25;b8:asd_budget=8,$G25;b32:asd_budget=32,$G25;b8g0.5:asd_budget=8,asd_gate=0.5"
for r in 1 2 3; do
    for c in 1 4; do
        step "qwen_speed_c${c}_r$r" sglang_asd.bench.speed --launch="$QWEN $FIX --asd-gate 0.5" --plain-launch $ARMS \
            --dataset gsm8k,mtbench --num-prompts 16 --max-new-tokens 128 --concurrency $c --repeats $r \
            $LONG --out "$OUT/qwen_speed_c$c"
    done
done

# 2. Qwen audit at natural stop, chat route, cap 384, strict run twice (noise floor)
for limit in 50 100; do
    step "qwen_audit_l$limit" sglang_asd.bench.audit --launch="$QWEN $FIX" --budgets 0,8 \
        --tasks gsm8k,humaneval,mbpp --limit $limit --api chat --max-new-tokens 384 --concurrency 8 --noise-floor \
        $(speed_json "$OUT/qwen_speed_c1/speed.json") $LONG --out "$OUT/qwen_audit"
done

# 3. The embedded demo (SmolLM2 pair, as `make serve` runs it): plain vs strict vs budget 8
for c in 1 4; do
    step "smol_speed_c$c" sglang_asd.bench.speed --launch='' --plain-launch='--model-path fixture:smollm2-135m' \
        --budgets 0,8 --dataset gsm8k,mtbench --num-prompts 16 --max-new-tokens 128 --concurrency $c --repeats 3 \
        $LONG --out "$OUT/smol_speed_c$c"
done

# 4. Issue 9: stock STANDALONE vs the draft-input fix, both pairs, strict and budget 8
for pair in qwen smol; do
    if [ $pair = qwen ]; then ARGS=$QWEN; else ARGS=$SMOL; fi
    step "standalone_${pair}_stock" sglang_asd.bench.speed --launch="$ARGS" --budgets 0,8 --num-prompts 8 \
        --max-new-tokens 64 --concurrency 1 --repeats 2 $LONG --out "$OUT/standalone_fix/${pair}_stock"
    step "standalone_${pair}_fixed" sglang_asd.bench.speed --launch="$ARGS $FIX" --budgets 0,8 --num-prompts 8 \
        --max-new-tokens 64 --concurrency 1 --repeats 2 $LONG --out "$OUT/standalone_fix/${pair}_fixed"
done

# 5. If time allows: the audit's budget-32 arm on the same items
step qwen_audit_b32 sglang_asd.bench.audit --launch="$QWEN $FIX" --budgets 0,8,32 \
    --tasks gsm8k,humaneval,mbpp --limit 100 --api chat --max-new-tokens 384 --concurrency 8 --noise-floor \
    $(speed_json "$OUT/qwen_speed_c1/speed.json") $LONG --out "$OUT/qwen_audit"

log "run_all.sh finished"
