"""Chain rule and cache size along a byte-mode generation, on every real tokenizer:
log P(x) + log P(b | x) == log P(x b) at every step (1e-9, float64), special tokens
only ever as end-of-text events, and the KV cache holding exactly one row per token
of the current trunk and tree (the garbage collector drops everything else)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.sample.sampling import ByteSampler

from midword.testing import tokenizer_path

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

STEPS = int(os.environ.get("MIDWORD_CHAIN_BYTES", "300"))
TOL = 1e-9


def sampler_for(name: str) -> ByteSampler:
    from midword.engine.model.hf_backend import HFModel

    engine = load_engine(str(tokenizer_path(name)))
    torch.set_num_threads(1)
    model = HFModel(
        build_tiny_llama(engine.tok.size, seed=3, hidden=16, layers=1, heads=2, dtype="float64")
    )
    return ByteSampler(model, engine)


def cache_rows_expected(sampler: ByteSampler) -> int:
    """BOS + trunk + one row per internal tree node below the trunk's root."""
    tree = sampler.vct.tree()
    return 1 + len(tree.trunk) + sum(1 for node in tree.nodes if node.path)


def test_chain_rule_and_cache_size_along_a_generation(tokenizer_name: str) -> None:
    sampler = sampler_for(tokenizer_name)
    specials = set(sampler.tok.special_ids)
    rng = np.random.default_rng(11)
    sampler.reset(b"def f(")
    dist = sampler.next_bytes()
    for step in range(STEPS):
        assert set(dist.events) <= specials  # special tokens are events, never bytes
        total = np.exp(dist.next).sum() + np.exp(dist.eos)
        assert total <= 1 + 1e-9, (step, total)
        assert sampler.session.cache_len() == cache_rows_expected(sampler), step
        p = np.exp(dist.next - dist.next.max())
        b = int(rng.choice(256, p=p / p.sum()))  # keep going: never pick end-of-text
        expected = dist.prefix_logprob + dist.next[b]
        sampler.push(bytes([b]))
        dist = sampler.next_bytes()
        assert abs(dist.prefix_logprob - expected) < TOL, (
            step,
            sampler.prefix[-20:],
        )


def test_chain_of_splits_as_one_machine() -> None:
    """DeepSeek V3's three chained splits (digit groups, CJK runs, then the word pattern
    inside each piece, gaps included) as one class machine: it tiles text exactly as the
    chain does, so its leaf tables apply."""
    from midword.engine.tokenize.class_machine import ClassMachine

    from midword.testing import CORPUS

    tok = load_engine(str(tokenizer_path("deepseek_v3"))).tok
    machine = ClassMachine.for_chain([p.pattern for p, _ in tok.pretokenizer.splits])
    rng = np.random.default_rng(5)
    # corpus characters plus the edge cases: controls, format, unassigned and private
    # characters (gaps), marks and punctuation inside the kana ranges, number forms
    alphabet = sorted(set("".join(CORPUS))) + list(
        "\x00\x01\u200b\u3040\u30fb\u30fc\u3099\u309b\u30a0ア・イ１２３①²\ue000\U00020000"
        " \n\r\t\u3000a1.中"
    )
    texts = list(CORPUS) + [
        "".join(rng.choice(alphabet, size=int(rng.integers(1, 14)))) for _ in range(3000)
    ]
    for text in texts:
        classes = machine.classes(text)
        spans, start = [], 0
        while start < len(text):
            end = machine.match_end(classes, start)
            assert end is not None and end > start, (text, start)
            spans.append((start, end))
            start = end
        assert spans == tok.pretokenizer.spans(text), text
