#!/usr/bin/env bash
# The GPU checks behind docs/cuda.md, as one run (GPU time is scarce, so everything that
# needs the card is here, in order of importance, each step with its own time limit):
#   1. benchmarks/bench_cuda.py: a random model of Qwen2.5-Coder-1.5B's shape in bfloat16
#      (per-keystroke latency, PBP vs plain generation, byte-mode bytes/s);
#   2. tests/engine/test_cuda.py (the `cuda` marker: float64 exactness, the bf16/fp16 policy);
#   3. tests/engine/test_backend.py + tests/engine/test_architectures.py on the GPU, float32 and bfloat16;
#   4. the language-server suites (tests/server/test_server_*.py) with the server on the GPU, float32
#      and bfloat16 (tests/lsp_support.py passes MIDWORD_TEST_DEVICE/DTYPE to the server);
#   5. benchmarks/bench_real_size.py through the language server, Qwen2.5-Coder-1.5B's shape,
#      bfloat16;
#   6. tests/engine/test_kvcache_growth.py's `cuda` tests (the growing KV cache on the card).
# STEPS picks steps by name (default: all): bench test_cuda tests server real_size kvcache;
# DTYPES the dtypes of steps 3-4 (default: float32 bfloat16), BENCH_DTYPE that of 1 and 5
# (default: bfloat16). PARALLEL=1 runs the test
# steps (2-4, 6) side by side, each with WORKERS pytest workers (the card and 16 cores
# take them), and the timing steps (1, 5) alone, after them. LIMIT_SCALE=N multiplies
# every step's time limit (tests/bench/test_cuda_check.py's CPU dry run uses 4).
# Packages the GPU machine lacks (pygls, lsprotocol, pytest-lsp, watchfiles...) travel as wheels
# in .whl/.
# midword is installed without dependencies into the machine's own Python (its torch and
# transformers); the tokenizer fixtures come from node_modules/, and MIDWORD_CACHE may
# point at prebuilt tables (a cold qwen3 table build takes ~15 s).
#
# Usage: benchmarks/cuda_check.sh [OUTDIR]
# Try it on a CPU (tiny, a few tests):
#   DEVICE=cpu BENCH_ARGS="--tiny --lines 100 --keys 3 --bytes 8 --runs 1" \
#   PYTEST_K="llama" GPU_TEST_DEVICE=cpu SERVER_TESTS=tests/server/test_server_inline.py \
#   REAL_SIZE_ARGS="--quick --lines 50 --keys 2 --tokens 4" benchmarks/cuda_check.sh /tmp/cc
set -u
OUTDIR=${1:-${OUT:-cuda-check-out}}
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-8}
BENCH_DTYPE=${BENCH_DTYPE:-bfloat16}
export PYTHONUNBUFFERED=1
export MIDWORD_GPU_TEST_DEVICE=${GPU_TEST_DEVICE:-cuda}

STEPS=${STEPS:-bench test_cuda tests server real_size kvcache}
wanted() { [[ " $STEPS " == *" $1 "* ]]; }

step() {  # step NAME TIMEOUT_S COMMAND...: log to $OUTDIR/NAME.log, print its tail
    # LIMIT_SCALE stretches every limit (the CPU dry run on a busy machine; on the card, 1)
    local name=$1 limit=$(($2 * ${LIMIT_SCALE:-1})) start rc
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

if [ -d .whl ] && ! "$PY" -c "import pytest_lsp" 2>/dev/null; then  # the server's packages
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >"$OUTDIR/wheels.log" 2>&1 || tail -5 "$OUTDIR/wheels.log"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! "$PY" -c "import midword.engine" 2>/dev/null; then
    if ! "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUTDIR/install.log" 2>&1
    then  # no editable install: a package folder whose engine/server are links to here
        mkdir -p /tmp/midword-shim && cp -r midword /tmp/midword-shim/
        ln -sfn "$PWD/engine" /tmp/midword-shim/midword/engine
        ln -sfn "$PWD/server" /tmp/midword-shim/midword/server
        export PYTHONPATH=/tmp/midword-shim${PYTHONPATH:+:$PYTHONPATH}
    fi
fi

# shellcheck disable=SC2086  # BENCH_ARGS, PYTEST_K, SERVER_TESTS and REAL_SIZE_ARGS are word lists
PYTEST=("$PY" -m pytest -p no:cacheprovider -n "$WORKERS" -rfE)
if "$PY" -m pytest --help 2>/dev/null | grep -q -- "--timeout="; then  # a hung test must not eat the run
    PYTEST+=(--timeout "${TEST_TIMEOUT:-90}")
fi
# Server tests marked extension_build read the VS Code extension's built defaults through
# node; a GPU machine without node (or the built extension) leaves them to the CPU CI.
NODE_ONLY=()
if ! command -v node >/dev/null || [ ! -f extension-vscode/out/dumpDefaultOptions.js ]; then
    NODE_ONLY=(-m "not extension_build")
fi
tests_on_the_card() (  # steps 2-4 and 6; -v logs per test, so a cut-off run still tells
    # side by side, each process takes few threads (timings come from the steps after)
    export MIDWORD_THREADS=${TEST_THREADS:-2} OMP_NUM_THREADS=${TEST_THREADS:-2}
    if wanted test_cuda; then
        step test_cuda 75 "${PYTEST[@]}" -q tests/engine/test_cuda.py ${PYTEST_K:+-k "$PYTEST_K"} &
        [ -n "${PARALLEL:-}" ] || wait
    fi
    if wanted kvcache; then
        step kvcache 75 "${PYTEST[@]}" -v -m cuda tests/engine/test_kvcache_growth.py &
        [ -n "${PARALLEL:-}" ] || wait
    fi
    for dtype in ${DTYPES:-float32 bfloat16}; do
        if wanted tests; then
            MIDWORD_TEST_DEVICE=$DEVICE MIDWORD_TEST_DTYPE=$dtype step "tests_$dtype" \
                "${TESTS_LIMIT:-80}" "${PYTEST[@]}" -q --dist load tests/engine/test_backend.py \
                tests/engine/test_architectures.py ${PYTEST_K:+-k "$PYTEST_K"} &
            [ -n "${PARALLEL:-}" ] || wait
        fi
        if wanted server; then
            MIDWORD_TEST_DEVICE=$DEVICE MIDWORD_TEST_DTYPE=$dtype step "server_$dtype" \
                "${SERVER_LIMIT:-120}" "${PYTEST[@]}" -v "${NODE_ONLY[@]}" \
                ${SERVER_TESTS:-tests/server/test_server_*.py} &
            [ -n "${PARALLEL:-}" ] || wait
        fi
    done
    wait
)
tests_on_the_card

if wanted bench; then
    step bench "${BENCH_LIMIT:-150}" "$PY" benchmarks/bench_cuda.py --device "$DEVICE" --dtype "$BENCH_DTYPE" \
        --json "$OUTDIR/bench.json" ${BENCH_ARGS:-}
fi
if wanted real_size; then
    step real_size "${REAL_SIZE_LIMIT:-240}" "$PY" benchmarks/bench_real_size.py --shape 1.5b \
        --device "$DEVICE" --dtype "$BENCH_DTYPE" --sampling-runs 0 --json "$OUTDIR/real_size.json" \
        ${REAL_SIZE_ARGS:-}
fi
