"""Devices: asking for one that is not there is a clear error (checked on any machine),
and on a CUDA GPU (tests marked ``cuda``, skipped elsewhere) tree scoring is exact in
float64 and follows the half-precision policy of docs/cuda.md in bfloat16 and float16.

benchmarks/cuda_check.sh runs this file on a GPU, with tests/engine/test_backend.py and
tests/engine/test_architectures.py in float32 and bfloat16.
"""

from __future__ import annotations

import copy
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from midword.engine.errors import BackendError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from midword.engine.model import devices, hf_loading  # noqa: E402
from midword.engine.model.devices import available_devices, resolve_device  # noqa: E402
from midword.engine.model.hf_backend import HFModel  # noqa: E402

from .test_architectures import (  # noqa: E402
    CONFIGS,
    WINDOW,
    Oracle,
    build,
    check,
    float64_throughout,
    random_tree,
)

HAS_CUDA = torch.cuda.is_available()
# MIDWORD_GPU_TEST_DEVICE=cpu dry-runs the GPU tests on the CPU (to develop them)
GPU = os.environ.get("MIDWORD_GPU_TEST_DEVICE", "cuda")
cuda_only = pytest.mark.skipif(
    GPU == "cuda" and not HAS_CUDA, reason="needs a CUDA GPU (see benchmarks/cuda_check.sh)"
)
HALF_TOLERANCE = {"bfloat16": 0.03, "float16": 0.01}  # total variation, tree vs plain


# --------------------------------------------------------------------------------------
# a device that is not there
# --------------------------------------------------------------------------------------


def missing_cuda_device() -> str:
    """A CUDA device this machine lacks: "cuda" on CPU-only torch, else one past the last."""
    return f"cuda:{torch.cuda.device_count()}" if HAS_CUDA else "cuda"


def test_cli_says_what_was_asked_what_there_is_and_how_to_get_cuda() -> None:
    asked = missing_cuda_device()
    run = subprocess.run(
        [sys.executable, "-m", "midword", "complete", "--device", asked, "def f("],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
    assert f"device '{asked}' was asked for" in run.stderr
    assert f"offers: {available_devices()}" in run.stderr
    if torch.version.cuda is None:  # the CPU build: say how to get the CUDA one
        assert "it is a CPU-only build" in run.stderr
        assert "install the CUDA build of torch" in run.stderr
        assert "download.pytorch.org/whl/cu" in run.stderr


def test_cuda_build_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with pytest.raises(BackendError, match=r"built for CUDA 12\.8 but sees no GPU"):
        resolve_device("cuda")


def test_cuda_index_past_the_last_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(BackendError, match=r"'cuda:2' was asked for.*cuda \(2 devices"):
        resolve_device("cuda:2")


def test_missing_mps_and_unknown_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "_mps_available", lambda: False)
    with pytest.raises(BackendError, match="'mps' was asked for.*Apple silicon"):
        resolve_device("mps")
    with pytest.raises(BackendError, match="unknown device 'gpu'"):
        resolve_device("gpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_load_on_a_missing_device_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="was asked for"):
        hf_loading.load_hf_model("models/none", device=missing_cuda_device())


# --------------------------------------------------------------------------------------
# on a GPU
# --------------------------------------------------------------------------------------


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("arch", ["llama", "mistral", "gemma2", "gemma3_text", "qwen2_moe"])
def test_float64_tree_is_exact_on_cuda(arch: str) -> None:
    with float64_throughout():  # see test_architectures: the models' own float32 islands
        worst = _float64_tree_error(arch)
    assert worst <= 1e-9


def _float64_tree_error(arch: str) -> float:
    model = HFModel(build(arch, seed=4, device=GPU, dtype="float64"))
    oracle, rng = Oracle(model), random.Random(8)
    session = model.session(bos_id=1)
    trunk = [rng.randrange(10, 300) for _ in range(3 * WINDOW)]
    worst = check(session, oracle, trunk, random_tree(rng, deep=WINDOW + 2), "float64")
    trunk += [5, 6, 7]
    return max(worst, check(session, oracle, trunk, random_tree(rng), "float64"))


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("dtype", sorted(HALF_TOLERANCE))
@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gemma2"])
def test_half_precision_tree_is_as_close_as_plain_passes(arch: str, dtype: str) -> None:
    """The policy of docs/cuda.md: in half precision the tree's distributions are the
    model's own up to its rounding. Against the float64 model with the same weights,
    they are no further off than plain half-precision forward passes are; against those
    passes they agree within HALF_TOLERANCE (total variation); rows sum to one in float64.
    """
    exact = HFModel(build(arch, seed=6, device=GPU, dtype="float64"))
    half = HFModel(copy.deepcopy(exact.model).to(getattr(torch, dtype)))
    truth, plain = Oracle(exact), Oracle(half)
    session, rng = half.session(bos_id=1), random.Random(9)
    trunk = [rng.randrange(10, 300) for _ in range(4 * WINDOW)]
    tree_off, plain_off, agree = [], [], []
    for _ in range(3):
        paths = random_tree(rng, deep=WINDOW + 1)
        rows = session.logprobs(trunk, paths)
        for path, row in zip(paths, rows, strict=True):
            ctx = (1, *trunk, *path)
            assert abs(np.exp(row).sum() - 1) < 1e-5  # normalized in float32, summed in float64
            tree_off.append(total_variation(row, truth(ctx)))
            plain_off.append(total_variation(plain(ctx), truth(ctx)))
            agree.append(total_variation(row, plain(ctx)))
        trunk = trunk + list(max(paths, key=len))[:2]
    assert max(agree) <= HALF_TOLERANCE[dtype], max(agree)
    assert np.mean(tree_off) <= 2 * np.mean(plain_off) + 1e-3, (tree_off, plain_off)


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.exp(a) - np.exp(b)).sum())


def test_matrix_covers_the_gpu_checks() -> None:
    """The GPU checks above name architectures of the matrix (a typo would test nothing)."""
    assert {"llama", "mistral", "gemma2", "gemma3_text", "qwen2_moe", "qwen2"} <= set(CONFIGS)
