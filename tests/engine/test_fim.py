"""Fill-in-the-middle (engine/sample/fim.py, docs/fim.md): templates as data, their detection, and
exactness at the cursor against brute force in float64, for a PSM template (the prefix is
its own segment; the covering tree covers the middle) and an SPM template whose prefix and
middle share one segment (the tree covers the prefix's bytes).

The oracle builds the prompt with the real ``tokenizers`` encoder and scores every
canonical covering sequence with plain forward passes after ``start + prompt``: it shares
neither the template code's encoding nor the engine's tree or KV cache.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine, load_tokenizer
from midword.engine.errors import FimError
from midword.engine.sample.fim import (
    TEMPLATES,
    FimCompleter,
    detect_template,
    fim_sampler,
    resolve_fim,
)
from midword.engine.sample.generate import Settings

from midword.testing.fixtures import real_encoder
from midword.testing.vocab import with_special_tokens

from ..lm_oracle import LMOracle

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

TOL = 1e-9
SOURCE = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"
QWEN_TOKENS = TEMPLATES["qwen"].tokens
CASES = [  # (prefix, suffix, middle generated so far)
    (b"def add(a, b):\n    return a", b"\n\nprint(add(1, 2))\n", b""),
    (b"self.assertEq", b"(x, 1)\n", b""),
    (b"for i in ran", b":\n    pass\n", b"ge(1"),
    (b"x = foo", b"bar()\n", b"_b"),
    (b"name = 'caf", "é'\n".encode(), b""),
    ("s = '中".encode()[:6], b"'\n", b""),  # the prefix ends inside a character
    (b"", b"return 1\n", b"  "),
    (b"class A:\n    def ", b"", b"__in"),
]


@pytest.fixture(scope="module")
def fim_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fim_tok")
    return with_special_tokens(SOURCE, QWEN_TOKENS, folder / "tokenizer.json")


@pytest.fixture(scope="module")
def setup(fim_tokenizer: Path):
    from midword.engine.model.hf_backend import HFModel

    engine = load_engine(str(fim_tokenizer))
    torch.set_num_threads(1)
    model = HFModel(
        build_tiny_llama(engine.tok.size, seed=5, hidden=16, layers=1, heads=2, dtype="float64")
    )
    return engine, model, real_encoder(fim_tokenizer)


class FimOracle(LMOracle):
    """`LMOracle` after ``start + context``: log P(covered bytes | prompt) by brute force."""

    def __init__(self, model, hf, tok, start_id: int, context: list[int]) -> None:
        super().__init__(model, hf, tok, start_id)
        self.context = context

    def rows(self, path: tuple[int, ...]) -> np.ndarray:
        if path not in self._rows:
            every = self.model.sequence_logprobs([self.start, *self.context, *path])
            self._rows[path] = every[len(self.context) :]
        return self._rows[path]


def oracle_prompt(hf, name: str, prefix: bytes, suffix: bytes) -> tuple[list[int], bytes]:
    """The template's prompt built by hand with the real encoder: (context, covered bytes)."""
    fp, fs, fm = (hf.token_to_id(t) for t in QWEN_TOKENS)

    def enc(text: str) -> list[int]:
        return hf.encode(text, add_special_tokens=False).ids if text else []

    cut = len(prefix)
    while cut and not _is_text(prefix[:cut]):  # whole characters only in the prefix segment
        cut -= 1
    head, partial = prefix[:cut].decode(), prefix[cut:]
    if name == "qwen":
        return [fp, *enc(head), fs, *enc(suffix.decode()), fm], partial
    assert name == "qwen-spm"
    return [fp, fs, *enc(suffix.decode()), fm], prefix


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------------------- templates


def test_templates_are_consistent_data() -> None:
    for name, template in TEMPLATES.items():
        assert template.name == name
        assert template.order in ("psm", "spm")
        assert len(template.tokens) >= 2
        if template.shared:  # the middle continues the prefix: nothing may come between
            assert template.layout[-1] == "{prefix}" and template.order == "spm"
    assert TEMPLATES["qwen"].order == "psm" and not TEMPLATES["qwen"].shared
    assert TEMPLATES["qwen-spm"].shared and TEMPLATES["codestral"].shared
    assert not TEMPLATES["starcoder-spm"].shared


@pytest.mark.parametrize(
    ("tokens", "config", "expected"),
    [
        (QWEN_TOKENS, {}, "qwen"),
        (QWEN_TOKENS, {"fim_template": "qwen-spm"}, "qwen-spm"),
        (("<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"), {}, "starcoder"),
        (("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"), {}, "deepseek"),
        (("▁<PRE>", "▁<MID>", "▁<SUF>", "▁<EOT>"), {"model_type": "llama"}, "codellama"),
        (("[PREFIX]", "[SUFFIX]"), {"model_type": "mistral"}, "codestral"),
        (("<|fim_prefix|>", "<|fim_suffix|>"), {}, None),  # no middle sentinel: no template
        ((), {}, None),
    ],
)
def test_detection_from_special_tokens(tmp_path: Path, tokens, config, expected) -> None:
    tok = load_tokenizer(with_special_tokens(SOURCE, tokens, tmp_path / "tokenizer.json"))
    found = detect_template(tok, config)
    assert (found.name if found else None) == expected
    assert resolve_fim("off", tok, config) is None
    auto = resolve_fim("auto", tok, config)
    assert (auto.name if auto else None) == expected


def test_named_setting_needs_the_tokens(fim_tokenizer: Path) -> None:
    tok = load_tokenizer(fim_tokenizer)
    assert resolve_fim("qwen-spm", tok).name == "qwen-spm"
    with pytest.raises(FimError, match="lacks"):
        resolve_fim("deepseek", tok)
    with pytest.raises(FimError, match="unknown"):
        resolve_fim("psm", tok)


@pytest.mark.parametrize("name", ["qwen", "qwen-spm"])
def test_prompt_and_training_layout(setup, name: str) -> None:
    engine, _, hf = setup
    template = TEMPLATES[name]
    for prefix, suffix, _ in CASES:
        prompt = template.prompt(engine.tok, prefix, suffix)
        assert (prompt.context, prompt.covered) == oracle_prompt(hf, name, prefix, suffix)
    end = engine.tok.special_ids[0]
    ids = template.training_tokens(engine.tok, "x = foo", "_bar", "()\n", end)
    context = template.prompt(engine.tok, b"x = foo", b"()\n").context
    body = "x = foo_bar" if template.shared else "_bar"  # one segment, or the middle alone
    assert ids == [*context, *hf.encode(body, add_special_tokens=False).ids, end]


# ---------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("name", ["qwen", "qwen-spm"])
def test_next_bytes_of_the_middle_against_brute_force(setup, name: str) -> None:
    """log P(covered bytes | prompt), the next-byte log-probabilities of the two likeliest
    bytes and a random one, and the end of the middle, each against brute force."""
    engine, model, hf = setup
    rng = random.Random(len(name))
    for prefix, suffix, middle in CASES:
        sampler = fim_sampler(model, engine, TEMPLATES[name], prefix, suffix)
        sampler.push(middle)
        context, covered = oracle_prompt(hf, name, prefix, suffix)
        oracle = FimOracle(model, hf, engine.tok, sampler.start_id, context)
        x = covered + middle
        dist = sampler.next_bytes()
        truth = oracle.prefix_logprob(x) if x else 0.0
        assert abs(dist.prefix_logprob - truth) < TOL, (name, x, dist.prefix_logprob, truth)
        for b in [*np.argsort(-dist.next)[:2], rng.randrange(256)]:
            want = oracle.prefix_logprob(x + bytes([int(b)])) - truth
            got = dist.next[int(b)]
            assert (got == want == float("-inf")) or abs(got - want) < TOL, (x, b, got, want)
        if _is_text(x):
            assert abs(dist.eos - (oracle.eos_logprob(x) - truth)) < TOL, (name, x)
        else:
            assert dist.eos == float("-inf")  # the middle cannot end inside a character


@pytest.mark.parametrize("name", ["qwen", "qwen-spm"])
def test_chain_rule_along_a_generated_middle(setup, name: str) -> None:
    """log P(x) + log P(b | x) == log P(x b) at every byte of a sampled middle."""
    engine, model, _ = setup
    sampler = fim_sampler(model, engine, TEMPLATES[name], b"def f(x):\n    re", b"\n\nf(2)\n")
    rng = np.random.default_rng(3)
    dist = sampler.next_bytes()
    for step in range(120):
        assert np.exp(dist.next).sum() + np.exp(dist.eos) <= 1 + 1e-9, step
        p = np.exp(dist.next - dist.next.max())
        b = int(rng.choice(256, p=p / p.sum()))
        expected = dist.prefix_logprob + dist.next[b]
        sampler.push(bytes([b]))
        dist = sampler.next_bytes()
        assert abs(dist.prefix_logprob - expected) < TOL, (step, sampler.prefix[-20:])


def greedy_oracle(oracle: FimOracle, covered: bytes, steps: int) -> bytes:
    """Greedy PBP by brute force: the likeliest covering sequence of ``covered`` (or end
    of text right after its encoding), then the likeliest token, ``steps`` times."""
    seqs = list(_coverings(oracle, covered))
    scores = [oracle.seq_logprob(s) for s in seqs]
    best = seqs[int(np.argmax(scores))]
    if best[-1] in oracle.tok.special_ids:
        return b""
    path = list(best)
    for _ in range(steps):
        t = int(np.argmax(oracle.rows(tuple(path))[-1]))
        if t in oracle.tok.special_ids:
            break
        path.append(t)
    return oracle.tok.decode(path)[len(covered) :]


def _coverings(oracle: FimOracle, covered: bytes) -> list[tuple[int, ...]]:
    """The leaves of the covering tree of ``covered``, as the engine's tree has them: every
    canonical sequence that reaches past it (any token after a node that ends at it), and
    the end-of-text events after its canonical encoding."""
    from ..oracle import brute_force_tree

    every = list(range(oracle.tok.size))
    found = brute_force_tree(oracle.hf, oracle.tok, covered, every, oracle._canonical)
    leaves = [s for s in found if len(oracle.tok.decode(s)) > len(covered)]
    whole = tuple(oracle.hf.encode(covered.decode(), add_special_tokens=False).ids)
    return leaves + [(*whole, t) for t in oracle.tok.special_ids]


@pytest.mark.parametrize("name", ["qwen", "qwen-spm"])
def test_greedy_completion_follows_the_prompt_across_moves(setup, name: str) -> None:
    """FimCompleter (greedy PBP, one KV session) against brute-force greedy, moving between
    cursors whose prompts differ only after the covered bytes (a new suffix) and back:
    scores kept for an old prompt must not be reused."""
    engine, model, hf = setup
    completer = FimCompleter(model, engine, TEMPLATES[name])
    cursors = [
        (b"x = foo", b"bar()\n"),
        (b"x = foo", b"\nprint(x)\n"),
        (b"x = foo", b"bar()\n"),
        (b"def f(a", b"):\n    return a\n"),
    ]
    for prefix, suffix in cursors:
        context, covered = oracle_prompt(hf, name, prefix, suffix)
        oracle = FimOracle(model, hf, engine.tok, completer.completer.start_id, context)
        want = greedy_oracle(oracle, covered, steps=5)
        for solve in ("tree", "lazy"):  # "tree" keeps the scored leaves for the next call
            got = completer.complete(prefix, suffix, Settings(max_tokens=6, solve=solve))
            assert got.data == want, (name, solve, prefix, suffix, got.data, want)
            assert completer.session.context == context  # the kept encodings are the real ones
