#!/usr/bin/env bash
# Issue 12 measurements on the 2-core CPU machine: the SmolLM2 demo (plain / strict / budget 8),
# Qwen2.5-Coder 1.5B + 0.5B speed (concurrency 1 and 4, repeats added one at a time so both
# concurrencies fill in together), the Qwen audit (20, 50, then 100 items per task), stock vs fixed
# STANDALONE on both pairs (issue 9), and last the audit's budget-32 arm.
#
# Resumable: every step passes --resume (a tool's run log skips completed work) and a finished
# step leaves STEP.done, so after a stop just run this script again (in a fresh checkout it starts
# from the logs committed under results/; at each finished step publish OUT there with
# `bash docs/measurements/publish.sh OUT docs/measurements/issue12/results` and commit it, docs/MEASURING.md):
#   nohup nice -n 19 bash docs/measurements/issue12/run_all.sh > OUT/run_all.out 2>&1 &
# (nice: work beside it, tests or CI, keeps the cores; the audits do not depend on timing, and a speed
# pass that loses CPU to other work is detected and redone, scripts/lab/quiet.py)
# Run it from a frozen worktree so edits in the main tree cannot change a running server:
#   git worktree add /work/meas <commit>; cd /work/meas; REPO=/work/meas OUT=/work/main/out/meas bash ...
# A tool's report of a step that is still running:  python -m sglang_asd.bench.speed --report-only --out DIR
set -uo pipefail

source "$(dirname "$0")/../steps.sh"
chain_setup meas run_all.log
# bf16 linear layers with float32 accumulation (the default; stated because every table names it,
# docs/BENCHMARKS.md). results_native_bf16/ holds the runs made with torch's own bf16 kernel before.
export SGLANG_ASD_CPU_GEMM=fp32-accumulate

# Two Qwen servers (speculative + plain) must fit beside other work: SGLang's CPU memory check needs a
# larger static fraction than the launcher's default 0.3 once one is loaded, and a smaller KV pool
# (16384 tokens still hold 8 requests x (prompt + 384)). Neither changes what is decoded.
MEM="--mem-fraction-static 0.8 --max-total-tokens 16384"
QWEN_PAIR="--model-path fixture:qwen2.5-coder-1.5b --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:qwen2.5-coder-0.5b --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --asd-max-budget 64"
QWEN="$QWEN_PAIR $MEM"
SMOL="--model-path fixture:smollm2-135m --speculative-algorithm STANDALONE \
--speculative-draft-model-path fixture:smollm2-135m-draft --speculative-num-steps 4 --speculative-eagle-topk 1 \
--speculative-num-draft-tokens 5 --asd-max-budget 64"
FIX="--asd-standalone-draft-fix"
LONG="--timeout 3600 --launch-timeout 1800 --resume"   # a shared 2-core machine can be very slow


speed_json() { [ -f "$1" ] && echo "--speed-json $1"; }

log "run_all.sh at $(git -C "$REPO" rev-parse --short HEAD) -> $OUT"
# A fresh checkout continues from the run logs published under results/ (steps_done: finished steps).
chain_seed "$REPO/docs/measurements/issue12/results"

# Order: a first paired audit (20 items per task), the demo's speed table, then the audit at 50 and
# 100 items per task, and only then the Qwen speed tables. Audits do not depend on timing, so they
# progress while the machine is used for other work; speed passes wait for a quiet machine and redo a
# disturbed pass (scripts/lab/quiet.py), and on this host (about 3.4 GB/s of memory bandwidth)
# one Qwen speed repeat at concurrency 1 takes hours. Each later step grows the same run logs
# (--resume), so a stop at any point leaves complete tables of some size.
G25=asd_gate=0.25
ARMS="--budgets 0 --arms b2:asd_budget=2,$G25;b8:asd_budget=8,$G25;b32:asd_budget=32,$G25;b8g0.5:asd_budget=8,asd_gate=0.5"
# Rounds (sglang_asd/bench/speed_summary.py): every arm runs each group of CONCURRENCY prompts in turn,
# so a pair is minutes apart and one repeat is 6 prompt sweeps; the trios the demo's tables used need 11
# (at concurrency 1 on this host, 4.5 hours a repeat), and a trio cannot span two sessions' machines.
qwen_speed() {  # qwen_speed CONCURRENCY REPEATS
    step "qwen_speed_c$1_r$2" scripts/lab/speed.py --launch="$QWEN $FIX --asd-gate 0.5" --plain-launch $ARMS \
        --dataset gsm8k,mtbench --num-prompts 16 --max-new-tokens 128 --concurrency $1 --repeats $2 \
        --schedule rounds $LONG --out "$OUT/qwen_speed_c$1"
}
# Qwen audit at natural stop, chat route, cap 384, strict run twice (noise floor). Audits do not depend on
# timing, so they run at concurrency 24 (one pass holds every task's and arm's requests, sglang_asd/bench/
# audit.py plan): this host's GEMMs cost less than linearly in their rows (2 threads: one Qwen layer
# 104 ms for 40 rows, 156 ms for 120; one MLP GEMM 20.4 ms for 24 rows, 51.8 ms for 120), so tokens per
# second grow with the batch. The KV pool holds 24 x (prompt + 384) tokens.
qwen_audit() {  # qwen_audit NAME BUDGETS LIMIT
    step "$1" sglang_asd.bench.audit --launch="$QWEN_PAIR $FIX --mem-fraction-static 0.8 --max-total-tokens 32768" --budgets $2 \
        --tasks gsm8k,humaneval,mbpp --limit $3 --api chat --max-new-tokens 384 --concurrency 24 --noise-floor \
        $(speed_json "$OUT/qwen_speed_c1/speed.json") $LONG --out "$OUT/qwen_audit"
}
# The embedded demo (SmolLM2 pair, as `make serve` runs it): plain vs strict vs budget 8. Its logs (and
# the n-gram demo's) were begun as trios, so their later repeats stay trios.
smol_speed() {  # smol_speed CONCURRENCY REPEATS
    step "smol_speed_c$1_r$2" scripts/lab/speed.py --launch='' --plain-launch='--model-path fixture:smollm2-135m' \
        --budgets 0,8 --dataset gsm8k,mtbench --num-prompts 16 --max-new-tokens 128 --concurrency $1 --repeats $2 \
        --schedule trios $LONG --out "$OUT/smol_speed_c$1"
}

# 1. A first audit, the demo, the audit at size, then one repeat of the Qwen speed table (plain,
# strict, budgets 2/8/32 at gate 0.25, budget 8 at gate 0.5; a request may lower the server's gate,
# never raise it: the server runs at --asd-gate 0.5 and every arm states its gate).
qwen_audit qwen_audit_l20 0,8 20
smol_speed 1 1
# The demo model with n-gram drafts (server_configs/cpu_demo_ngram.yaml; each pass from an empty corpus):
# the one demo configuration where speculation can beat plain decoding on this CPU, so three repeats
smol_ngram() {  # smol_ngram CONCURRENCY REPEATS
    step "smol_ngram_c$1_r$2" scripts/lab/speed.py --launch='--model-path fixture:smollm2-135m --speculative-algorithm NGRAM' \
        --plain-launch='--model-path fixture:smollm2-135m' --budgets 0,8 --dataset gsm8k,mtbench --num-prompts 16 \
        --max-new-tokens 128 --concurrency $1 --repeats $2 --schedule trios $LONG --out "$OUT/smol_ngram_c$1"
}
smol_ngram 1 1
smol_ngram 1 3
for limit in 50 100; do qwen_audit "qwen_audit_l$limit" 0,8 $limit; done
qwen_speed 1 1
qwen_speed 4 1
# 2. Three speed repeats (issue 12 names them), then the issue-9 A/Bs in the current CPU mode.
# Concurrency 4 first: its repeats take an hour each, concurrency 1's two hours and a quarter, so a
# three-hour session can finish both concurrency-4 repeats and leave one resumable step open.
qwen_speed 1 2
for r in 2 3; do qwen_speed 4 $r; done
qwen_speed 1 3
# Issue 9: stock STANDALONE vs the draft-input fix, both pairs, strict and budget 8 (short)
for pair in smol qwen; do
    if [ $pair = qwen ]; then ARGS=$QWEN; else ARGS=$SMOL; fi
    step "standalone_${pair}_stock" scripts/lab/speed.py --launch="$ARGS" --budgets 0,8 --num-prompts 8 \
        --max-new-tokens 64 --concurrency 1 --repeats 2 $LONG --out "$OUT/standalone_fix/${pair}_stock"
    step "standalone_${pair}_fixed" scripts/lab/speed.py --launch="$ARGS $FIX" --budgets 0,8 --num-prompts 8 \
        --max-new-tokens 64 --concurrency 1 --repeats 2 $LONG --out "$OUT/standalone_fix/${pair}_fixed"
done
smol_speed 1 3
smol_speed 4 3

# 3. If time allows: the audit's budget-32 arm on the same items
qwen_audit qwen_audit_b32 0,8,32 100

log "run_all.sh finished"
