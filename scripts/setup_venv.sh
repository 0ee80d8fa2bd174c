#!/usr/bin/env bash
# Build the project's virtual environment at .venv (CPU machines, offline except package registries).
#
# sglang 0.5.23's full dependency set pulls CUDA-only kernels (sgl-kernel, flashinfer, ...) that
# cannot import on a CPU machine, so this is a lean install: the pinned torch/triton stack, then
# sglang without its dependencies, then the subset SGLang's CPU serving path imports.
# GPU users do not use this script: see README.md ("Installing beside a GPU sglang").
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3.11}
STAMP="$VENV/.sglang_asd_setup_v1"
# The PD tests' transfer engine (mooncake-transfer-engine-non-cuda, TCP) loads libibverbs.so.1, a
# Debian library pip cannot install. Without it (no root, no apt) the smg-in-front-of-a-PD-pair test
# skips and the rest of the PD tests run on SGLang's fake backend (tests/integration/test_pd.py).
if ! ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] libibverbs1 (Debian; the PD transfer engine loads it)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs1; } >/dev/null 2>&1 \
      || echo "[setup] libibverbs1 could not be installed: the PD gateway test will skip"
  else
    echo "[setup] libibverbs1 missing and not installable here: the PD gateway test will skip"
  fi
fi
WANT=$(cat scripts/setup_venv.sh scripts/requirements-cpu.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "[setup] $VENV is up to date"; exit 0
fi
start=$(date +%s)
"$PY" -m venv "$VENV"
# pip's site config names local wheel folders that may not exist on every machine; drop its
# per-package "Location ... is ignored" warnings so the log shows what matters.
pip_() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location '" || true; }; }
PIP=pip_
$PIP install -q --upgrade pip wheel
echo "[setup] torch stack (CUDA wheel; runs on CPU)"
$PIP install -q "torch==2.14.1" "torchvision==0.29.1" "triton~=3.8.0"
echo "[setup] sglang==0.5.23 (no deps)"
$PIP install -q --no-deps "sglang==0.5.23"
echo "[setup] serving dependencies"
$PIP install -q -r scripts/requirements-cpu.txt
echo "[setup] sglang_asd (editable)"
$PIP install -q --no-deps -e .
echo "$WANT" > "$STAMP"
echo "[setup] done in $(( $(date +%s) - start )) s; $(du -sh "$VENV" | cut -f1)"
