# One entry point for every task: `make help` lists them.
PY ?= python3

.PHONY: help install demo test test-fast lint fmt bench bench-engine tree

help:  ## list every task
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

install:  ## install midword (editable) with model, server and test extras, plus npm fixtures
	$(PY) -m pip install "torch==2.13.0"
	$(PY) -m pip install -e ".[model,server,test]"
	npm ci --no-audit --no-fund

demo:  ## run the main job on the shipped default model
	$(PY) -m midword demo

test:  ## run the whole test suite (what CI runs)
	$(PY) -m pytest -q

test-fast:  ## skip the slow tests
	$(PY) -m pytest -q -m "not slow"

lint:  ## ruff
	$(PY) -m ruff check .

fmt:  ## ruff format + fix imports
	$(PY) -m ruff check --fix --select I .
	$(PY) -m ruff format .

bench-engine:  ## engine benchmarks (push cost, masks, load time, tree size)
	$(PY) benchmarks/bench_engine.py
