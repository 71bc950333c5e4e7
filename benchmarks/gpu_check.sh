#!/usr/bin/env bash
# The whole GPU check of issue #5 as one command for a machine with CUDA, torch and triton
# (nothing is installed: the package runs from src/). It runs the gpu-marked tests on compiled
# kernels, then benchmarks/gpu_lab.py, and keeps each output in a file under $OUT (or ./gpu_check):
#   gpu_tests.txt   pytest -m gpu (bf16 kernels compiled for the device)
#   gpu_lab.txt     the table to commit under docs/benchmarks/, with the date and the card
#   gpu_lab.log     gpu_lab's progress lines (stderr)
# A failing step does not stop the next one; the exit status is 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_check}
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null;
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } \
  | tee "$out/gpu_lab.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_kernels_triton.py 2>&1 | tee "$out/gpu_tests.txt" \
  || status=1
python3 benchmarks/gpu_lab.py 2> >(tee "$out/gpu_lab.log" >&2) | tee -a "$out/gpu_lab.txt" || status=1
exit "$status"
