"""ByteSampler operations against brute force: prefix probabilities, next-byte
distributions and end-of-text mass, on tiny random-weight models (float64) whose
vocabulary matches each real tokenizer. Sampling checks are in test_generate.py."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from midword.engine.sampling import ByteSampler
from midword.engine.vct import load_engine

from .conftest import tokenizer_path
from .corpus import CORPUS
from .lm_oracle import LMOracle
from .oracle import real_encoder

torch = pytest.importorskip("torch")
from .tiny_models import build_tiny_llama  # noqa: E402

TOL = 1e-6
# Random prefixes per tokenizer: 6 in CI; `make test-exact` runs 100 (MIDWORD_EXACT_PREFIXES).
N_RANDOM = int(os.environ.get("MIDWORD_EXACT_PREFIXES", "6"))
PINNED = [
    b"Helmo",
    b"self.assertEq",
    b"    ",
    b"x = 12",
    b"I'",
    b"don'",
    b" we'v",
    b"a  b",
    "中文".encode()[:4],
    "😀".encode()[:2],
    "😀".encode()[:3],
    b"\t\t",
    b"",
]


def random_prefixes(n: int, seed: int) -> list[bytes]:
    """Short cuts of the corpus: start on a character, end anywhere (also mid-character)."""
    rng = random.Random(seed)
    data = "".join(CORPUS).encode()
    out: list[bytes] = []
    while len(out) < n:
        i = rng.randrange(len(data))
        if 0x80 <= data[i] < 0xC0:
            continue
        out.append(data[i : i + rng.randrange(1, 9)])
    return out


@pytest.fixture(scope="module")
def setups() -> dict:
    return {}


def _setup(name: str, setups: dict):
    if name not in setups:
        path = tokenizer_path(name)
        eng = load_engine(str(path))
        from midword.engine.hf_backend import HFModel

        torch.set_num_threads(1)
        model = HFModel(
            build_tiny_llama(eng.tok.size, seed=7, hidden=16, layers=1, heads=2, dtype="float64")
        )
        sampler = ByteSampler(model, eng)
        oracle = LMOracle(model, real_encoder(path), eng.tok, sampler.start_id)
        setups[name] = (eng, sampler, oracle)
    return setups[name]


def test_exact_against_brute_force(tokenizer_name: str, setups: dict) -> None:
    _, sampler, oracle = _setup(tokenizer_name, setups)
    rng = random.Random(1)
    prefixes = PINNED + random_prefixes(
        N_RANDOM, seed=len(tokenizer_name) * 7919 + ord(tokenizer_name[-1])
    )
    for k, prefix in enumerate(prefixes):
        sampler.reset(prefix)
        dist = sampler.next_bytes()
        truth = oracle.prefix_logprob(prefix) if prefix else 0.0
        assert abs(dist.prefix_logprob - truth) < TOL, (prefix, dist.prefix_logprob, truth)
        if k % 4:
            continue  # next-byte checks on every 4th prefix (each costs a brute-force tree)
        live = np.flatnonzero(np.isfinite(dist.next))
        for b in [*np.argsort(-dist.next)[:2], rng.randrange(256)]:
            want = oracle.prefix_logprob(prefix + bytes([int(b)])) - truth
            got = dist.next[int(b)]
            assert (got == want == float("-inf")) or abs(got - want) < TOL, (prefix, b, got, want)
        assert live.size > 0 or dist.eos > float("-inf")
        try:
            prefix.decode("utf-8")
        except UnicodeDecodeError:
            assert dist.eos == float("-inf")  # text cannot end inside a character
            continue
        eos = oracle.eos_logprob(prefix) - truth
        assert abs(dist.eos - eos) < TOL, (prefix, dist.eos, eos)
