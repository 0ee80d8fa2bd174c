#!/usr/bin/env bash
# Issues 13 and 36: the seed's ablation on the Qwen2.5-Coder 1.5B + 0.5B pair (STANDALONE K = 4,
# SGLang's own draft flow, CPU, the GEMM default `auto`). Every acceptance rule (asd, local, margin,
# threshold) over its own knob, measured on the same prompts, server and machine state:
#   1. pilot: GSM8K, first 20 items, a grid of settings per rule (picks settings whose spent regret
#      covers one range; its items are reused by step 2 for the arms it keeps);
#   2. audit: GSM8K, first 100 items, chat route, natural stop (cap 384), concurrency 24, strict run
#      twice (the noise floor);
#   3. speed at fixed work on GSM8K prompts: 16 x 128 tokens at concurrency 1, its first repeat, then
#      8 x 512 tokens at concurrency 4 (where budgets bind), then the short run's repeats 2 and 3;
#   4. the table and plot (ablation.py).
# Issue 13's first run (10 items, float32, the STANDALONE draft fix) stays under issue13/results/;
# this chain's logs go to issue36/results/.
#
# Resumable: every step passes --resume and leaves STEP.done; after a stop run the script again (a
# fresh checkout starts from the logs committed under issue36/results/, see steps.sh's chain_seed):
#   nohup nice -n 19 bash docs/measurements/issue13/run_ablation.sh > $OUT/run_ablation.out 2>&1 &
# It waits while issue 35's or 33's chain runs (one measurement chain at a time).
# Run it from a frozen worktree so edits in the main tree cannot change a running server:
#   git worktree add /work/meas36 <commit>; cd /work/meas36; REPO=/work/meas36 OUT=/work/main/out/meas36 bash ...
# SMOKE=1: the same steps on the SmolLM2 demo pair at toy sizes (checks the script end to end).
# RULES: the arms of steps 2 and 3 (the default was picked from the pilot's spends, below);
# PILOT_RULES, PILOT_LIMIT, LIMIT override the pilot's grid and the two audits' sizes (a session
# grows LIMIT run by run: --resume keeps every item already decoded); SPEED and SPEED_REPEATS the
# speed step's work, repeats and concurrency (repeats are added one at a time, so a stop keeps
# complete ones; SPEED_CONCURRENCY defaults to 1); LONG_SPEED the long run's work;
# SERVER_EXTRA more server arguments (`--dtype float32` on a CPU without AVX-512 BF16, where a bf16
# Qwen server decodes about half as fast as a float32 one: `lscpu | grep -o 'avx512_bf16\|amx_bf16'`).
set -uo pipefail

source "$(dirname "$0")/../steps.sh"
chain_setup meas36 run_ablation.log

# Requests may ask for margins and thresholds up to 8 nats (the server's ceilings); asd and local
# use the server's gate 0.25 and cap 2. One Qwen server beside issue 12's: a smaller KV pool (8192
# tokens hold 8 requests x (prompt + 384)); neither changes what is decoded.
RULE_CEILINGS="--asd-margin 8 --asd-threshold 8 --asd-max-budget 64"
if [ "${SMOKE:-0}" = 1 ]; then
    SERVER="$RULE_CEILINGS"  # the SmolLM2 demo pair (launch_server's defaults)
    PILOT_RULES='asd=2|8,local=1,margin=0.5,threshold=0.5'
    RULES=${RULES:-'asd=8,local=1,margin=0.5,threshold=0.5'}
    PILOT_LIMIT=2; LIMIT=3; CAP=64; SPEED="--num-prompts 2 --max-new-tokens 16"; MIN_GB=3
else
    SERVER="--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --mem-fraction-static 0.8 --max-total-tokens 32768 \
$RULE_CEILINGS ${SERVER_EXTRA:-}"
    # The pilot's grid: asd where the ledger binds within a request (0.5, 1, 2) and at 8; the
    # ledger-free rules at three settings each, around the spends the n = 10 run measured.
    PILOT_RULES=${PILOT_RULES:-'asd=8,local=1,margin=0.5,threshold=0.5,asd=2,asd=1,asd=0.5,local=0.5,local=0.25,margin=0.25,margin=1,threshold=0.25,threshold=1'}
    # RULES, the audit's and speed's arms, picked from the pilot (20 GSM8K items, natural stop;
    # spent nats per request in its report, before the 100-item audit grew it): asd 0.5 -> 0.37, 1 -> 0.84,
    # 2 -> 1.47, 8 -> 1.88; local 0.25 -> 0.28, 0.5 -> 0.85, 1 -> 1.94; margin 0.25 -> 0.32,
    # 0.5 -> 0.93, 1 -> 2.80; threshold 0.25 -> 0.36, 0.5 -> 0.99, 1 -> 3.08. Every setting stays:
    # each ledger-free rule's three span asd's range (0.37 to 1.88) and reach past it, and they fall
    # in three groups of equal spend (about 0.3, 0.9 and 1.9 nats), listed first so that a stop keeps
    # the comparisons the issue asks for.
    RULES=${RULES:-'asd=8,local=1,asd=1,local=0.5,margin=0.5,threshold=0.5,asd=0.5,local=0.25,margin=0.25,threshold=0.25,asd=2,margin=1,threshold=1'}
    PILOT_LIMIT=${PILOT_LIMIT:-20}; LIMIT=${LIMIT:-100}; CAP=384; MIN_GB=9
    SPEED=${SPEED:-"--num-prompts 16 --max-new-tokens 128"}
    # The long fixed-work run, where budgets bind and ledger-free rules keep spending
    LONG_SPEED=${LONG_SPEED:-"--num-prompts 8 --max-new-tokens 512 --concurrency 4"}
fi
LONG="--timeout 3600 --launch-timeout 1800 --resume"


log "run_ablation.sh at $(git -C "$REPO" rev-parse --short HEAD) -> $OUT (SMOKE=${SMOKE:-0}, RULES=$RULES)"
[ "${SMOKE:-0}" = 1 ] || chain_seed "$REPO/docs/measurements/issue36/results"
audit() {  # audit NAME ARGS...: GSM8K at natural stop on the chat route, one server for every arm
    local name=$1; shift
    step "$name" sglang_asd.bench.audit --launch="$SERVER" --tasks gsm8k --api chat --max-new-tokens $CAP \
        --concurrency 24 "$@" $LONG --out "$OUT/audit"
}

wait_for_chains 'issue35/run.sh|issue33/run.sh'
wait_for_memory $MIN_GB
audit pilot --rules "$PILOT_RULES" --limit $PILOT_LIMIT
audit "audit_l$LIMIT" --rules "$RULES" --limit $LIMIT --noise-floor

wait_for_memory $MIN_GB
speed_repeat() {  # speed_repeat R: the fixed-work run's repeat R (repeats accumulate in one folder)
    step "speed_r$1" scripts/lab/speed.py --launch="$SERVER" --rules "$RULES" --dataset gsm8k $SPEED \
        --concurrency "${SPEED_CONCURRENCY:-1}" --repeats "$1" --schedule rounds $LONG --out "$OUT/speed"
}
# The long run goes right after the first repeat: a stop then leaves one complete picture (every arm
# at both lengths) rather than three repeats of the short run and nothing on where budgets bind.
speed_repeat 1
[ "${SMOKE:-0}" = 1 ] || step speed_long scripts/lab/speed.py --launch="$SERVER" --rules "$RULES" --dataset gsm8k \
    $LONG_SPEED --repeats 1 --schedule rounds $LONG --out "$OUT/speed_long"
for r in $(seq 2 "${SPEED_REPEATS:-3}"); do speed_repeat "$r"; done

"$PY" docs/measurements/issue13/ablation.py --audit "$OUT/audit/audit.json" --speed "$OUT/speed/speed.json" \
    --speed-long "$OUT/speed_long/speed.json" --out "$OUT/report" >>"$OUT/report.log" 2>&1 && log "report: $OUT/report/ablation.md"
log "run_ablation.sh finished"
