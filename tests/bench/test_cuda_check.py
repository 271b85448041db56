"""benchmarks/cuda_check.sh, the one script a GPU session runs, dry-run on the CPU.

GPU time comes in short, rare leases: a renamed test file, a changed benchmark flag or a
shell slip in the script would spend one for nothing. Here every step runs on the CPU,
side by side as on the card (``PARALLEL=1``), each cut to a few seconds of work, and
must report ``rc=0`` with the files the docs' tables are read from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pytest_lsp")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cuda_check.sh"
STEPS = ["bench", "test_cuda", "kvcache", "tests_float32", "server_float32", "real_size"]


def dry_run_env(tmp_path: Path) -> dict[str, str]:
    """Every step on the CPU, one worker each, a few tests and keys apiece."""
    return {
        **os.environ,
        "DEVICE": "cpu",
        "GPU_TEST_DEVICE": "cpu",
        "PARALLEL": "1",
        "WORKERS": "1",
        "DTYPES": "float32",
        "BENCH_DTYPE": "float32",
        "PYTEST_K": "llama and not half_precision",
        "SERVER_TESTS": "tests/server/test_server_inline.py::test_mid_identifier_continues_the_word",
        "BENCH_ARGS": "--tiny --lines 60 --keys 2 --bytes 4 --runs 1",
        "REAL_SIZE_ARGS": f"--quick --lines 40 --keys 2 --tokens 4 --cache {tmp_path / 'm'}",
        "TAIL": "3",
        "LIMIT_SCALE": "4",  # the step limits are set for the card; a shared CPU is slower
    }


def step_codes(output: str) -> dict[str, int]:
    """``== NAME: rc=N in S s`` lines: each step's exit status."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^== (\w+): rc=(\d+) in", output, re.M)}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_every_step_runs_and_leaves_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        cwd=ROOT,
        env=dry_run_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    codes = step_codes(run.stdout)
    assert codes == dict.fromkeys(STEPS, 0), run.stdout[-4000:]
    for step in ("test_cuda", "kvcache", "tests_float32", "server_float32"):
        log = (out / f"{step}.log").read_text()
        assert re.search(r"\b[1-9]\d* passed", log), (step, log[-1500:])
        assert not re.search(r"\b\d+ (failed|errors?)\b", log), (step, log[-1500:])
    bench = json.loads((out / "bench.json").read_text())
    assert bench["device"].startswith("cpu") and bench["dtype"] == "float32"
    real_size = json.loads((out / "real_size.json").read_text())
    assert real_size["device"] == "cpu" and "pbp_vs_plain" in real_size["keystrokes"]
    assert [len(real_size["keystrokes"][m]["per_key"]) for m in ("pbp", "plain")] == [2, 2]
    assert "torch" in (out / "env.txt").read_text()


def test_step_codes_reads_the_script_lines() -> None:
    text = "== bench: python3 x\n== bench: rc=0 in 3 s\nnoise\n== server_float32: rc=124 in 9 s\n"
    assert step_codes(text) == {"bench": 0, "server_float32": 124}
