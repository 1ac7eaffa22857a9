#!/usr/bin/env bash
# One short device call on one H100 (80 GB): what scripts/gpu_bench.sh would take 18 minutes of an H200 for, cut to
# what had never run on a GPU, in under 9 minutes, each step with its own time bound so one that fails or hangs
# leaves the others' results:
#   1. the GPU tests (tests/kvstore/attention/test_gpu.py, test_gpu_decode.py), the fused decode kernel's first compiled run;
#   2. research/cuda_graph_probe.py: eager vs one CUDA graph per decode step over transformers' StaticCache, the
#      Qwen3-8B shape, capacities 2K / 8K / 32K, batch 1 and 8 (the ceiling a compiled engine would approach);
#   3. `nexus-agent bench decode` on the Qwen3-8B shape: full, the default memory and H2O at 25%, static vs eager
#      engine, at 8K (batch 1 and 8) and at 32K (batch 1).
# Qwen3-8B rather than -32B: 64 layers of bf16 32B weights (about 61 GiB) leave too little of 80 GB for batch 8.
# Usage: OUT=dir research/gpu_check_h100.sh   (needs torch with CUDA, transformers, triton, typer, rich)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_check_out}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET NEXUS_FORCE_TRITON
cli=(python3 -c "from cli.app import main; main()")
t0=$SECONDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)"

echo "== [$((SECONDS - t0))s] GPU tests"
timeout 150 python3 -m pytest tests/kvstore/attention/test_gpu.py tests/kvstore/attention/test_gpu_decode.py -q -p no:cacheprovider -rs \
    2>&1 | tee "$out/test_gpu.txt" || echo "GPU tests failed or timed out"

echo "== [$((SECONDS - t0))s] CUDA graph probe"
timeout 120 python3 research/cuda_graph_probe.py --shape qwen3-8b --capacities 2048,8192,32768 --batches 1,8 \
    --steps 32 --json "$out/graph_probe.json" 2>&1 | grep -v -i warn | tee "$out/graph_probe.txt" || echo "probe failed"

for run in "8192 8" "32768 1"; do
    set -- $run
    echo "== [$((SECONDS - t0))s] bench decode at $1, batch $2"
    timeout 150 "${cli[@]}" bench decode --shape qwen3-8b --device cuda --contexts "$1" --batch "$2" --steps 48 \
        --policies full,nexus-agent,h2o --density 0.25 --json "$out/decode_$1.json" 2>&1 | tee "$out/decode_$1.txt" \
        || echo "bench decode at $1 failed or timed out"
done
echo "== [$((SECONDS - t0))s] done"
