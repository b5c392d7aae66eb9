#!/usr/bin/env bash
# Every figure of the GPU host in one run: GPU parity against the reference, the unit tests of the
# CPU backends on that host's Python, transform rates of every backend on the same bodies, and the
# peer table with its batch-size sweep. Needs cuDF importable (and the native core installed).
# Usage: bench/gpu_host.sh OUTDIR      (logs, JSON and the PNG land in OUTDIR)
set -uo pipefail
out=${1:?usage: bench/gpu_host.sh OUTDIR}
mkdir -p "$out"
status=0
step() { echo "== $*" >&2; "$@" || status=1; }
{ nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv; nproc; python --version; } > "$out/gpu-host-h200.txt" 2>&1
step python -m tests.gpu.selfcheck > "$out/gpu-selfcheck-h200.log" 2>&1
# test_gpu_stage_content checks the validator against jsonschema, a dev dependency GPU hosts may lack.
step env GPU_PARITY_OUT="$out/gpu-parity-h200.json" python -m pytest -q -p no:cacheprovider tests/gpu tests/unit/gpu_stage \
    --ignore=tests/unit/gpu_stage/test_gpu_stage_content.py > "$out/gpu-tests-h200.log" 2>&1
step python -m gpu_stage.bench_transform --records 200000 --batch-size 100000 --backends gpu,cpu,reference \
    --out "$out/transform-h200.json" > "$out/gpu-bench-h200.log" 2>&1
step python -m bench --records 50000 --backends gpu,cpu,reference --sweep 1000,10000,50000 \
    --out "$out/bench-h200.json" >> "$out/gpu-bench-h200.log" 2>&1
exit $status
