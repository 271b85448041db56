"""ByteSampler operations against brute force: prefix probabilities, next-byte
distributions and end-of-text mass, on tiny random-weight models (float64) whose
vocabulary matches each real tokenizer. Sampling checks are in test_generate.py."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.sample.sampling import ByteSampler

from midword.testing import CORPUS, real_encoder, tokenizer_path

from ..lm_oracle import LMOracle

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

TOL = 1e-6
# Random prefixes per tokenizer (issue 3 asks for >= 100 in CI); MIDWORD_EXACT_PREFIXES
# lowers it for a quick local run. They run in CHUNKS slices per tokenizer, each its own
# xdist group, so the slow brute force spreads over the workers.
N_RANDOM = int(os.environ.get("MIDWORD_EXACT_PREFIXES", "100"))
CHUNKS = 3
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
        from midword.engine.model.hf_backend import HFModel

        torch.set_num_threads(1)
        model = HFModel(
            build_tiny_llama(eng.tok.size, seed=7, hidden=16, layers=1, heads=2, dtype="float64")
        )
        sampler = ByteSampler(model, eng)
        oracle = LMOracle(model, real_encoder(path), eng.tok, sampler.start_id)
        setups[name] = (eng, sampler, oracle)
    return setups[name]


def all_prefixes(name: str) -> list[bytes]:
    return PINNED + random_prefixes(N_RANDOM, seed=len(name) * 7919 + ord(name[-1]))


@pytest.mark.slow  # about 2 minutes per chunk on a 2-core machine (make test-exact runs them)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_exact_against_brute_force(tokenizer_name: str, chunk: int, setups: dict) -> None:
    """Prefix log-probability of every prefix; on every 4th also the next-byte
    log-probabilities of the two most likely bytes and a random one, and the end-of-text
    mass."""
    _, sampler, oracle = _setup(tokenizer_name, setups)
    rng = random.Random(chunk)
    for k, prefix in enumerate(all_prefixes(tokenizer_name)):
        if k % CHUNKS != chunk:
            continue
        sampler.reset(prefix)
        dist = sampler.next_bytes()
        truth = oracle.prefix_logprob(prefix) if prefix else 0.0
        assert abs(dist.prefix_logprob - truth) < TOL, (prefix, dist.prefix_logprob, truth)
        if k % 4:
            continue  # next-byte checks on every 4th prefix (each costs brute-force trees)
        for b in [*np.argsort(-dist.next)[:2], rng.randrange(256)]:
            want = oracle.prefix_logprob(prefix + bytes([int(b)])) - truth
            got = dist.next[int(b)]
            assert (got == want == float("-inf")) or abs(got - want) < TOL, (prefix, b, got, want)
        assert np.isfinite(dist.next).any() or dist.eos > float("-inf")
        try:
            prefix.decode("utf-8")
        except UnicodeDecodeError:
            assert dist.eos == float("-inf")  # text cannot end inside a character
            continue
        eos = oracle.eos_logprob(prefix) - truth
        assert abs(dist.eos - eos) < TOL, (prefix, dist.eos, eos)
