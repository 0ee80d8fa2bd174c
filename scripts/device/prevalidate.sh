#!/usr/bin/env bash
# Pre-validate the GPU kit on a CPU machine with the device image's Python and package versions
# (docs/GPU.md, "Pre-validation"): a Python 3.12 venv with torch 2.11 (PyPI's CUDA 13 build runs on
# CPU), triton 3.6, transformers 5.17, ..., and the pack unpacked on PYTHONPATH as on the device.
#
#   bash scripts/device/prevalidate.sh                    # venv (once), pack (once), checks, CPU steps
#   STEPS=1a,3 bash scripts/device/prevalidate.sh         # fewer CPU steps (each starts CPU servers)
#   PYTHON312=/path/to/python3.12 bash scripts/device/prevalidate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.device/venv312
PY312=${PYTHON312:-python3.12}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY312" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "torch==2.11.0" "triton==3.6.0" "numpy==2.5.2" "transformers==5.17.0" \
    "tokenizers==0.23.2" "torchvision==0.26.0" "safetensors==0.8.0" "huggingface_hub==1.33.0" \
    "sentencepiece==0.2.2" "tiktoken==0.14.0" aiohttp anyio h11 httpx pillow psutil pyyaml regex requests \
    prometheus-client uvloop xxhash einops packaging tqdm scipy jinja2 ninja
fi
[ -f .device/carry/manifest.json ] || bash scripts/device_pack.sh
P=$VENV/bin/python
"$P" scripts/device/pack.py unpack --carry .device/carry --dest /tmp/asd-site
export PYTHONPATH=/tmp/asd-site:$PWD SGLANG_ASD_CACHE=/tmp/asd-models-312
export SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python   # as on the device (the Rust TreeCore misreads torch 2.11)
"$P" -W ignore -c "import sglang, torch; from sglang.srt.entrypoints import http_server
print('[prevalidate] sglang', sglang.__version__, 'torch', torch.__version__, 'serving imports OK')"
"$P" -W ignore scripts/device/cuda_import_check.py --fake-cuda --json /tmp/asd-prevalidate-import.json >/dev/null
echo "[prevalidate] CUDA serving path imports with the stand-in (/tmp/asd-prevalidate-import.json)"
"$P" -W ignore -m sglang_asd.fixtures build tiny-llama tiny-eagle-noisy tiny-eagle3-noisy tiny-llama-bigram \
  tiny-dspark-noisy tiny-dspark-exact tiny-dflash-noisy tiny-dflash-exact >/dev/null
"$P" -W ignore scripts/device_e2e.py --cpu --out "${OUT:-/tmp/asd-prevalidate}" --logs /tmp/asd-prevalidate-logs \
  --steps "${STEPS:-1a,1b,1c,1d,1e,2_eagle,2_ngram,2_dspark,2_dflash,3,5,standin,6}" --budget-s 3600 --start-timeout-s 900
