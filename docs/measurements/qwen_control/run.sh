#!/usr/bin/env bash
# One resumable chain on the Qwen2.5-Coder 1.5B + 0.5B pair (STANDALONE K = 4, SGLang's own draft flow,
# CPU) whose arms answer four questions (scopes, budgets from a target, per-token budgets, FLy) on the same
# prompts:
#   0. scope_gsm8k: what keeping the answer exact costs and buys (issue 50), GSM8K only, first 100 items:
#      strict, budget 8, budget 8 with the final answer strict (`asd_strict_spans`: from `boxed`, a single
#      token of this tokenizer that opens the model's `\boxed{...}` answer, to the end; the close marker
#      `</tool_call>` never occurs in these answers. Not `####`: the task's prompt asks for it, so the
#      span would open in the prompt and the whole response would be strict), budget 8 with the first 16
#      output tokens strict (`asd_strict_prefix`: what a server default of 16 would cost); speed at
#      fixed work as below. The smallest step that answers one question whole, so it runs first.
#   1. calib: which budget buys which quality (`python -m sglang_asd.calibrate`): strict and the asd
#      ladder 0.5 .. 8 on GSM8K and HumanEval, first 100 items each, chat route, natural stop (cap
#      384), concurrency 24, then speed at fixed work (72 prompts spread over both tasks x 128 tokens:
#      three rounds of 24, one repeat); its strict, 2 and 8 arms are the baselines of the steps below.
#   2. long_k4: 8 prompts x 512 tokens at concurrency 4, fixed budgets 2 and 8 against the per-token
#      rates of equal spend at 512 tokens (where a fixed budget binds early and a rate keeps paying); with
#      calib it answers issue 51, so it runs before the longer FLy step.
#   3. fly_k4: FLy against asd on the same work (vLLM's lossy verifier, `asd_rule: "fly"`): strict,
#      asd 2 and 8, FLy at vLLM's defaults (entropy threshold 0.3, top 3, window min(6, K - 1)) and at
#      thresholds 0.6 and 0.9, FLy under the ledger (`fly-bounded`) at 2 and 8; the same prompts,
#      caps and fixed work as step 1.
#   4. long2_k4: long_k4's work again, two repeats: budget 4 (a fixed budget of the rate r8's mean spend
#      in long_k4: the rate against a fixed budget at equal spend), r8, budget 8, FLy at vLLM's defaults
#      and FLy under the ledger at 8 (FLy's long run).
#   5. quick_k4: the article's percentile recipe (`calibrate --quick`) on 32 prompts (16 per task), on
#      a server whose gate (8) admits every first rejection: the starting point beside calib's answer.
#   6. where_k4: where and how fast a request may spend, at budget 8 against budget 8 unscoped, on both
#      tasks: the first 64 output tokens strict (`asd_strict_prefix`), and per-token budgets
#      (`asd_budget_per_token`) at the rates that spend 2 and 8 nats over 512 tokens.
#   7. fly_k8, fly_tree: step 3 on the chain K = 8 (where relaxation gains most) and on the tree (topk 2,
#      4 steps, 8 draft tokens: strict's best shape in the depth study): strict, asd 2 and 8, FLy, FLy
#      under the ledger at 8; the same fixed work as step 3.
# Steps 0-4 and 6 run on one server configuration (5 widens the gate, 7 changes the drafts), and each step's
# quality phase takes the answers an earlier
# step already has for the same setting and prompt (`calibrate --reuse-answers`, which checks that server,
# launch, caps and prompts are the same): calib takes scope_gsm8k's strict and budget 8 GSM8K answers,
# fly_k4 and where_k4 take calib's strict, 2 and 8. Speed at fixed work is measured in every step, all its
# arms in one run. Every arm's request can ask for its setting (requests only tighten the server's).
#
# Resumable: every step passes --resume and leaves STEP.done; after a stop run the script again (a
# fresh checkout starts from the logs committed under results/, see steps.sh's chain_seed):
#   nohup nice -n 19 bash docs/measurements/qwen_control/run.sh > $OUT/run.out 2>&1 &
# Run it from a frozen worktree so edits in the main tree cannot change a running server:
#   git worktree add ../meas-control <commit>; cd ../meas-control; REPO=$PWD OUT=<main>/out/control bash ...
# SMOKE=1: the same steps on the SmolLM2 demo pair at toy sizes (checks the script end to end).
set -uo pipefail

source "$(dirname "$0")/../steps.sh"
chain_setup control run.log

RULE_CEILINGS="--asd-max-budget 64"
if [ "${SMOKE:-0}" = 1 ]; then
    SERVER="$RULE_CEILINGS"; SERVER_K8=$SERVER; SERVER_TREE=$SERVER
    LIMIT=2; CAP=48; SPEED_TOKENS=16; SPEED_PROMPTS=4; MIN_GB=3
else
    PAIR="--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:qwen2.5-coder-0.5b --mem-fraction-static 0.8 --max-total-tokens 32768"
    # the launch line every K = 4 step's answers were taken under, word for word (--reuse-answers compares it)
    SERVER="--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --mem-fraction-static 0.8 --max-total-tokens 32768 \
$RULE_CEILINGS ${SERVER_EXTRA:-}"
    SERVER_K8="$PAIR --speculative-num-steps 8 --speculative-eagle-topk 1 --speculative-num-draft-tokens 9 \
$RULE_CEILINGS ${SERVER_EXTRA:-}"
    SERVER_TREE="$PAIR --speculative-num-steps 4 --speculative-eagle-topk 2 --speculative-num-draft-tokens 8 \
$RULE_CEILINGS ${SERVER_EXTRA:-}"
    LIMIT=${LIMIT:-100}; CAP=384; SPEED_TOKENS=128; SPEED_PROMPTS=72; MIN_GB=9
fi
RUN="--limit $LIMIT --api chat --max-new-tokens $CAP --concurrency 24 \
--speed-max-new-tokens $SPEED_TOKENS --repeats 1 --max-accuracy-drop 1 --min-agreement 0.95 \
--max-length-change 0.03 --timeout 3600 --launch-timeout 1800 --resume"
COMMON="--tasks gsm8k,humaneval $RUN --speed-prompts $SPEED_PROMPTS"

log "run.sh at $(git -C "$REPO" rev-parse --short HEAD) -> $OUT (SMOKE=${SMOKE:-0})"
[ "${SMOKE:-0}" = 1 ] || chain_seed "$REPO/docs/measurements/qwen_control/results"
wait_for_chains 'issue35/run.sh|issue33/run.sh|run_ablation.sh'
wait_for_memory $MIN_GB

step scope_gsm8k sglang_asd.calibrate --launch="$SERVER" --tasks gsm8k --budgets 8 \
    --arms "ans8:asd_budget=8,asd_strict_spans=boxed|</tool_call>;p16:asd_budget=8,asd_strict_prefix=16" $RUN \
    --out "$OUT/scope_gsm8k"

step calib sglang_asd.calibrate --launch="$SERVER" --budgets 0.5,1,2,4,8 $COMMON \
    --reuse-answers "$OUT/scope_gsm8k/calibrate_log.jsonl" --out "$OUT/calib"

RATES="r2:asd_budget_per_token=0.0039;r8:asd_budget_per_token=0.0156"  # 2 and 8 nats over 512 tokens
LONG_WORK="--num-prompts 8 --max-new-tokens 512 --concurrency 4"
[ "${SMOKE:-0}" = 1 ] && LONG_WORK="--num-prompts 2 --max-new-tokens 32 --concurrency 2"
step long_k4 scripts/lab/speed.py --launch="$SERVER" --budgets 0,2,8 --arms "$RATES" --dataset gsm8k $LONG_WORK \
    --repeats 1 --schedule rounds --timeout 3600 --launch-timeout 1800 --resume --out "$OUT/long_k4"

# FLy on the same server as the other steps, so their answers are reused: a request may raise the server's
# entropy threshold (0.3, vLLM's default), never lower it, so the two more thresholds are above it.
T3="asd_fly_entropy_threshold=0.3"  # vLLM's default, stated
FLY_ARMS="fly:asd_budget=8,asd_rule=fly,$T3;fly_t0.6:asd_budget=8,asd_rule=fly,asd_fly_entropy_threshold=0.6;\
fly_t0.9:asd_budget=8,asd_rule=fly,asd_fly_entropy_threshold=0.9;\
flyb2:asd_budget=2,asd_rule=fly-bounded,$T3;flyb8:asd_budget=8,asd_rule=fly-bounded,$T3"
CALIB_ANSWERS="--reuse-answers $OUT/calib/calibrate_log.jsonl"
step fly_k4 sglang_asd.calibrate --launch="$SERVER" --budgets 2,8 --arms "$FLY_ARMS" $COMMON $CALIB_ANSWERS \
    --out "$OUT/fly_k4"

FLY8="fly:asd_budget=8,asd_rule=fly,$T3;flyb8:asd_budget=8,asd_rule=fly-bounded,$T3"
step long2_k4 scripts/lab/speed.py --launch="$SERVER" --budgets 0,4,8 --arms "r8:asd_budget_per_token=0.0156;$FLY8" \
    --dataset gsm8k $LONG_WORK --repeats 2 --schedule rounds --timeout 3600 --launch-timeout 1800 --resume \
    --out "$OUT/long2_k4"

QUICK_LIMIT=16; [ "${SMOKE:-0}" = 1 ] && QUICK_LIMIT=2
step quick_k4 sglang_asd.calibrate --launch="$SERVER --asd-gate 8" --quick --tasks gsm8k,humaneval \
    --limit $QUICK_LIMIT --api chat --max-new-tokens $CAP --concurrency 24 --timeout 3600 --launch-timeout 1800 \
    --resume --out "$OUT/quick_k4"

step where_k4 sglang_asd.calibrate --launch="$SERVER" --budgets 8 \
    --arms "p64:asd_budget=8,asd_strict_prefix=64;$RATES" $COMMON $CALIB_ANSWERS --out "$OUT/where_k4"

step fly_k8 sglang_asd.calibrate --launch="$SERVER_K8" --budgets 2,8 --arms "$FLY8" $COMMON --out "$OUT/fly_k8"
step fly_tree sglang_asd.calibrate --launch="$SERVER_TREE" --budgets 2,8 --arms "$FLY8" $COMMON --out "$OUT/fly_tree"
log "run.sh finished"
