#!/usr/bin/env bash
# GPU end-to-end check of sglang-asd on real SGLang 0.5.23, run on the device machine in one command
# (docs/GPU.md has the run tool call): unpacks the carried wheels (.device/carry, made here by
# scripts/device_pack.sh), sets the kit's environment, builds the tiny fixtures, checks the CUDA
# import path, then runs scripts/device_e2e.py. Results: $OUT/e2e.json (each step as it ends),
# $OUT/e2e.log, $OUT/server_logs.tar.gz, $OUT/import_check.json, $OUT/verify_h200.json.
#
#   bash scripts/device_e2e.sh [device_e2e.py args]     # e.g. --steps 1a,3 --budget-s 200
#   bash scripts/device_e2e.sh --dry-run                 # CPU: plan + checks, starts nothing
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/asd-e2e-out}
PY=${PYTHON:-python3}   # the device image's python3 holds torch, triton, transformers
mkdir -p "$OUT"
for a in "$@"; do
  if [ "$a" = "--dry-run" ]; then exec "$PY" scripts/device_e2e.py --out "$OUT" "$@"; fi
done
exec > >(tee -a "$OUT/e2e.log") 2>&1
t0=$(date +%s)
echo "[e2e.sh] $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# 0. Servers an earlier call left running: they run in their own process sessions, which outlive a
#    call stopped at its time limit while the machine stays warm. Found by the marker this script
#    gives every process it starts (below), and ended by process id.
for d in /proc/[0-9]*; do
  if { tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -qx 'SGLANG_ASD_E2E_RUN=1'; then
    echo "[e2e.sh] ending pid ${d#/proc/} left by an earlier call"; kill -9 "${d#/proc/}" 2>/dev/null
  fi
done
export SGLANG_ASD_E2E_RUN=1

# 1. The carried site folder (skipped when a warm machine already holds this pack).
"$PY" scripts/device/pack.py unpack --carry .device/carry --dest /tmp/asd-site || { echo "[e2e.sh] unpack failed"; exit 2; }
export PYTHONPATH=/tmp/asd-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PATH="$(dirname "$(command -v "$PY")"):$PATH"   # the image's ninja, for SGLang's JIT loader

# 2. The kit's environment (docs/GPU.md, "Kernel supply"). Inherited by every server process.
unset SGLANG_USE_CPU_ENGINE                                # SGLang's CPU engine: never on the GPU run
export SGLANG_ASD_KERNEL_STANDIN=cuda-e2e                 # test-only sgl_kernel stand-in (no wheel here):
                                                          # scripts/device/cuda_standin, on every server's PYTHONPATH
export SGLANG_ASD_STANDIN_LOG=/tmp/asd-e2e-logs/standin_missing.txt
export SGLANG_FORCE_FUSED_OP_BACKEND=torch                # SGLang's own native forwards for fused ops
export SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1             # no sglang-kernel distribution to check
export SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python      # the bundled Rust TreeCore misreads torch 2.11 dtypes
export SGLANG_JIT_CACHE_DIR=/tmp/asd-jit TRITON_CACHE_DIR=/tmp/asd-triton  # kept while the machine is warm
export SGLANG_ASD_CACHE=/tmp/asd-models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
rm -rf /tmp/asd-e2e-logs && mkdir -p /tmp/asd-e2e-logs   # this call's logs only

# 3. Byte code once, on every core (the pack has none; 30 server processes would each compile it),
#    while the tiny fixtures are built from code (cached while warm).
"$PY" -m compileall -q -j 0 /tmp/asd-site/sglang "$PWD/sglang_asd" > /tmp/asd-e2e-logs/compileall.log 2>&1 &
compile_pid=$!
"$PY" -m sglang_asd.fixtures build tiny-llama tiny-eagle-noisy tiny-eagle3-noisy tiny-llama-bigram \
  tiny-dspark-noisy tiny-dspark-exact tiny-dflash-noisy tiny-dflash-exact > /tmp/asd-e2e-logs/fixtures.log 2>&1 \
  || { echo "[e2e.sh] fixture build failed:"; tail -20 /tmp/asd-e2e-logs/fixtures.log; }
wait "$compile_pid"   # only it: a bare wait would also wait for the tee above, forever
echo "[e2e.sh] setup done in $(( $(date +%s) - t0 )) s"

"$PY" scripts/device_e2e.py --out "$OUT" "$@"
rc=$?
echo "[e2e.sh] done in $(( $(date +%s) - t0 )) s, rc=$rc"
exit $rc
