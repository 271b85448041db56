#!/usr/bin/env bash
# The GPU checks behind docs/cuda.md, as one run (GPU time is scarce, so everything that
# needs the card is here, in order of importance, each step with its own time limit):
#   1. benchmarks/bench_cuda.py: a random model of Qwen2.5-Coder-1.5B's shape in bfloat16
#      (per-keystroke latency, PBP vs plain generation, byte-mode bytes/s);
#   2. tests/test_cuda.py (the `cuda` marker: float64 exactness, the bf16/fp16 policy);
#   3. tests/test_backend.py + tests/test_architectures.py on the GPU, float32 and bfloat16.
# midword is installed without dependencies into the machine's own Python (its torch and
# transformers); the tokenizer fixtures come from node_modules/, and MIDWORD_CACHE may
# point at prebuilt tables (a cold qwen3 table build takes ~15 s).
#
# Usage: benchmarks/cuda_check.sh [OUTDIR]
# Try it on a CPU (tiny, a few tests):
#   DEVICE=cpu BENCH_ARGS="--tiny --lines 100 --keys 3 --bytes 8 --runs 1" \
#   PYTEST_K="llama" GPU_TEST_DEVICE=cpu benchmarks/cuda_check.sh /tmp/cuda-check
set -u
OUTDIR=${1:-${OUT:-cuda-check-out}}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-8}
export PYTHONUNBUFFERED=1
export MIDWORD_GPU_TEST_DEVICE=${GPU_TEST_DEVICE:-cuda}

step() {  # step NAME TIMEOUT_S COMMAND...: log to $OUTDIR/NAME.log, print its tail
    local name=$1 limit=$2 start rc
    shift 2
    echo "== $name: $*"
    start=$(date +%s)
    timeout "$limit" "$@" >"$OUTDIR/$name.log" 2>&1
    rc=$?
    echo "== $name: rc=$rc in $(($(date +%s) - start)) s"
    tail -n "${TAIL:-12}" "$OUTDIR/$name.log"
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
    "$PY" -c "import torch, transformers, sys; print(sys.version.split()[0], 'torch', \
torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
} | tee "$OUTDIR/env.txt"

if ! "$PY" -c "import midword.engine" 2>/dev/null; then
    if ! "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUTDIR/install.log" 2>&1
    then  # no editable install: a package folder whose engine/server are links to here
        mkdir -p /tmp/midword-shim && cp -r midword /tmp/midword-shim/
        ln -sfn "$PWD/engine" /tmp/midword-shim/midword/engine
        ln -sfn "$PWD/server" /tmp/midword-shim/midword/server
        export PYTHONPATH=/tmp/midword-shim${PYTHONPATH:+:$PYTHONPATH}
    fi
fi

# shellcheck disable=SC2086  # BENCH_ARGS is a word list
step bench 150 "$PY" benchmarks/bench_cuda.py --device "$DEVICE" --dtype bfloat16 \
    --json "$OUTDIR/bench.json" ${BENCH_ARGS:-}
step test_cuda 75 "$PY" -m pytest -q -p no:cacheprovider -n "$WORKERS" tests/test_cuda.py \
    ${PYTEST_K:+-k "$PYTEST_K"}
for dtype in float32 bfloat16; do
    export MIDWORD_TEST_DEVICE=$DEVICE MIDWORD_TEST_DTYPE=$dtype
    step "tests_$dtype" 80 "$PY" -m pytest -q -p no:cacheprovider -n "$WORKERS" --dist load \
        tests/test_backend.py tests/test_architectures.py ${PYTEST_K:+-k "$PYTEST_K"}
done
