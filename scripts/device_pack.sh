#!/usr/bin/env bash
# Build what the GPU end-to-end run carries: SGLang 0.5.23 and the serving dependencies that the
# device image lacks (scripts/device/pack-requirements.txt, exact pins), as CPython 3.12
# manylinux x86-64 wheels from PyPI, installed into one folder without resolving dependencies,
# stripped of what text serving never imports, packed as .device/carry/site.tar.xz (+ manifest.json).
#
#   scripts/device_pack.sh             # download (cached in .device/wheels), install, strip, pack; prints the size
#   scripts/device_pack.sh --dry-run   # print the plan (requirements, strip rules, outputs); no network, no writes
#
# The device run names .device/carry in the run tool's `carry` (docs/GPU.md). Kernel supply on the
# GPU needs no wheel: see docs/GPU.md ("Kernel supply"). Runs on any x86-64 or arm64 Linux with a
# Python 3 pip; the wheels are chosen for the device, not for this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=scripts/device/pack-requirements.txt
WHEELS=.device/wheels
SITE=.device/build/site
CARRY=.device/carry
# Any Python 3 with pip will do (the tags below pick the wheels); prefer 3.12 where it runs.
PY=python3
if python3.12 -c "" 2>/dev/null; then PY=python3.12; fi

if [ "${1:-}" = "--dry-run" ]; then
  exec "$PY" scripts/device/pack.py plan --carry "$CARRY" --requirements "$REQ"
elif [ $# -gt 0 ]; then
  echo "usage: scripts/device_pack.sh [--dry-run]" >&2; exit 2
fi

# pip matches each manylinux tag exactly: name every glibc level a wheel may claim (device: glibc >= 2.35).
TAGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for t in manylinux1 manylinux2010 manylinux2014 manylinux_2_5 manylinux_2_12 manylinux_2_17 manylinux_2_24 \
         manylinux_2_26 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
  TAGS+=(--platform "${t}_x86_64")
done
pip_() { "$PY" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location '" || true; }; }

start=$(date +%s)
mkdir -p "$WHEELS"
echo "[device_pack] downloading $(grep -c '==' "$REQ") pinned wheels into $WHEELS (cached)"
pip_ download -q --no-deps "${TAGS[@]}" -d "$WHEELS" -r "$REQ"
echo "[device_pack] installing into $SITE"
rm -rf "$SITE"
pip_ install -q --no-deps --no-index --no-compile --find-links "$WHEELS" "${TAGS[@]}" --target "$SITE" -r "$REQ"
"$PY" scripts/device/pack.py build --site "$SITE" --carry "$CARRY" --requirements "$REQ"
echo "[device_pack] done in $(( $(date +%s) - start )) s; carry: $CARRY ($(du -sh "$CARRY" | cut -f1))"
