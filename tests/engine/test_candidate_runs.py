"""Candidate scoring that crosses a run of bytes with one tree scoring (engine/sample/
candidates.py): the same scores, likeliest candidates and draws as the per-byte reference
walk (``by_bytes=True``), on random candidate sets over several tokenizers, with about one
scoring per branch point or candidate instead of one per byte; and the relative prefix
log-probabilities it rests on (`ByteSampler.relative_prefix`) against full tracking."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.candidate_draws import draw_continuation
from midword.engine.sample.candidates import likeliest_continuation, score_continuations
from midword.engine.sample.sampling import ByteSampler

from midword.testing import tokenizer_path
from midword.testing.vocab import HOLDING_MISSING, MISSING, derive_tokenizer

TOL = 1e-9
NEG_INF = float("-inf")
DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default"
NAMES = ["default", "llama2", "qwen3"]  # ByteLevel (shipped), SentencePiece, ByteLevel
# qwen3: ASCII names only. Its covering tree of a prefix cut after the lead byte of a letter
# that follows letters (``self.assertEq`` + 0xC3) holds 1.3e-3 too much mass against the
# brute-force oracle, so the per-byte walk through that prefix is off there (the run,
# which scores only whole characters' ends, agrees with the oracle): an engine/tree bug
# of its own, reported apart.
ASCII_ONLY = {"qwen3"}
PREFIXES = [b"self.assertEq", b"os.", b"x = ", "    y = gr\u00f6".encode(), "# \u00e9".encode()[:3]]
PIECES = ["al", "als", "_", "token", "Any", "x", "1", "re", "gistered", "\u00f6\u00df", "\u4e2d"]


def _engine(name: str):  # noqa: ANN202
    return load_engine(str(DEFAULT if name == "default" else tokenizer_path(name)))


@pytest.fixture(scope="module")
def samplers() -> dict[str, ByteSampler]:
    return {}


def _sampler(name: str, samplers: dict[str, ByteSampler], track: bool = False) -> ByteSampler:
    key = f"{name}/{track}"
    if key not in samplers:
        engine = _engine(name)
        model = FakeModel(engine.tok.size, seed=11, scale=1.5)
        samplers[key] = ByteSampler(model, engine, track_prefix=track)
    return samplers[key]


def _candidates(rng: random.Random, n: int, ascii_only: bool = False) -> list[bytes]:
    """Names that share long runs and branch now and then; some cut inside a character,
    one with a byte no text holds, repeats and the empty name."""
    out: list[bytes] = [b""]
    pieces = [p for p in PIECES if p.isascii() or not ascii_only]
    while len(out) < n:
        name = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 5))).encode()
        if rng.random() < 0.3 and out[-1]:
            name = out[-1] + name  # goes on from another
        if rng.random() < 0.15:
            name = name[: rng.randrange(1, len(name) + 1)]  # maybe inside a character
        out.append(name)
    out.append(out[1])
    out.append(b"ab\xffcd")
    return out


def _close(got: float, want: float, what: object) -> None:
    assert (got == want == NEG_INF) or abs(got - want) < TOL, (what, got, want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [1, 2])
def test_runs_score_as_the_byte_walk(
    samplers: dict[str, ByteSampler], name: str, seed: int
) -> None:
    sampler = _sampler(name, samplers)
    rng = random.Random(seed)
    for prefix in PREFIXES:
        if name in ASCII_ONLY and not prefix.isascii():
            continue
        conts = _candidates(rng, 12, ascii_only=name in ASCII_ONLY)
        for end in ("none", "identifier"):
            fast = score_continuations(sampler, prefix, conts, end)
            slow = score_continuations(sampler, prefix, conts, end, by_bytes=True)
            assert sampler.prefix == prefix
            for f, s in zip(fast, slow, strict=True):
                _close(f.logprob, s.logprob, (prefix, f.continuation, end))
                _close(f.reach_logprob, s.reach_logprob, (prefix, f.continuation))
                assert (f.after is None) == (s.after is None)
                if f.after is not None and s.after is not None:
                    assert np.array_equal(f.after.next, s.after.next)  # the same tree
            found = likeliest_continuation(sampler, prefix, conts, end)
            ref = likeliest_continuation(sampler, prefix, conts, end, by_bytes=True)
            assert (found.best is None) == (ref.best is None)  # None: every one is zero
            if found.best is not None and ref.best is not None:
                assert found.best.continuation == ref.best.continuation
                _close(found.best.logprob, ref.best.logprob, (prefix, found.best.continuation))
            total = sum(math.exp(s.logprob) for s in slow)
            assert found.mass_low - TOL <= total <= found.mass_high + TOL
            assert found.scored <= ref.scored


def test_draws_over_runs_follow_the_scores(samplers: dict[str, ByteSampler]) -> None:
    """Bounds from a run's first byte keep the rejection sampler exact."""
    sampler = _sampler("default", samplers)
    prefix = b"self._check_"
    conts = [b"token_registered", b"token_regex", b"tokens", b"type_name", b"t", b"x\xffz"]
    for end, temperature in (("identifier", 1.0), ("none", 0.5)):
        scores = score_continuations(sampler, prefix, conts, end, by_bytes=True)
        logw = np.array([s.logprob for s in scores]) / temperature
        want = np.exp(logw - logw.max())
        want /= want.sum()
        rng = np.random.default_rng(3)
        drawn = [
            draw_continuation(
                sampler, prefix, conts, end, rng=rng, temperature=temperature
            ).best.continuation
            for _ in range(1500)
        ]
        freq = np.array([drawn.count(c) for c in conts]) / len(drawn)
        assert np.allclose(freq, want, atol=0.04), (end, freq.round(3), want.round(3))


def _counting(sampler: ByteSampler) -> list[int]:
    """Counts the sampler session's scoring calls (one per covering tree scored)."""
    calls: list[int] = []
    session = sampler.session
    real = session.logprob_rows  # type: ignore[attr-defined]

    def counted(trunk, paths):  # noqa: ANN001, ANN202
        calls.append(len(paths))
        return real(trunk, paths)

    session.logprob_rows = counted  # type: ignore[attr-defined]
    return calls


def test_a_run_without_branches_costs_a_constant(samplers: dict[str, ByteSampler]) -> None:
    """``_check_token_registered``: the root and the name's end, not one scoring per byte."""
    engine = _engine("default")
    sampler = ByteSampler(FakeModel(engine.tok.size, seed=2), engine, track_prefix=False)
    calls = _counting(sampler)
    prefix, name = b"        self.", b"_check_token_registered"
    for end in ("none", "identifier"):
        sampler.reset(b"")
        calls.clear()
        fast = score_continuations(sampler, prefix, [name], end)[0]
        assert len(calls) == 2, calls  # the prefix's tree, then the name's end
        sampler.reset(b"")
        calls.clear()
        slow = score_continuations(sampler, prefix, [name], end, by_bytes=True)[0]
        assert len(calls) == len(name) + (end == "identifier"), calls
        _close(fast.logprob, slow.logprob, end)
        for search in (likeliest_continuation, draw_continuation):
            sampler.reset(b"")
            calls.clear()
            kwargs = {"rng": np.random.default_rng(0)} if search is draw_continuation else {}
            found = search(sampler, prefix, [name, b"_x"], end, **kwargs)
            assert len(calls) <= 4, (search, calls)  # root, the branch point, the two ends
            assert found.best is not None


def test_the_per_byte_walk_asks_every_prefix(samplers: dict[str, ByteSampler]) -> None:
    """The reference walk (and only it) asks one distribution per distinct prefix; the fast
    walk asks the root and the candidates' ends."""
    sampler = _sampler("default", samplers)
    asked: list[bytes] = []
    real = sampler.next_bytes

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        asked.append(sampler.prefix)
        return real(*args, **kwargs)

    sampler.next_bytes = counting  # type: ignore[method-assign]
    try:
        x, conts = b"self.assertEq", [b"uals", b"uil", b"ual"]
        score_continuations(sampler, x, conts, end="none", by_bytes=True)
        assert sorted(asked) == sorted(x + p for p in [b"", b"u", b"ua", b"ual", b"ui"])
        asked.clear()
        score_continuations(sampler, x, conts, end="none")
        assert sorted(asked) == sorted(x + p for p in [b"", b"ual", b"uil"])  # uals: free
        asked.clear()
        score_continuations(sampler, x, conts, end="identifier")
        assert sorted(asked) == sorted(x + p for p in [b"", b"ual", b"uals", b"uil"])
    finally:
        del sampler.next_bytes


def test_a_byte_no_token_holds_inside_a_run(tmp_path: Path) -> None:
    """A vocabulary without some bytes: a run that holds one has no covering tree at its
    end (`PrefixError`), so probability zero, as the byte walk finds one byte earlier."""
    source = DEFAULT / "tokenizer.json"
    path = derive_tokenizer(source, MISSING, HOLDING_MISSING, tmp_path / "tokenizer.json")
    engine = load_engine(str(path))
    sampler = ByteSampler(FakeModel(engine.tok.size, seed=5), engine, track_prefix=False)
    conts = [b"abc\x04def", b"abc\x04", b"ab\x13(x", b"abcd", b"\x04"]
    for end in ("none", "identifier"):
        fast = score_continuations(sampler, b"x = ", conts, end)
        slow = score_continuations(sampler, b"x = ", conts, end, by_bytes=True)
        for f, s in zip(fast, slow, strict=True):
            _close(f.logprob, s.logprob, (f.continuation, end))
        assert fast[0].logprob == fast[1].logprob == fast[4].logprob == NEG_INF
        assert fast[3].logprob > NEG_INF
        found = likeliest_continuation(sampler, b"x = ", conts, end)
        assert found.best is not None and found.best.continuation == conts[3]
        assert sampler.prefix == b"x = "


@pytest.mark.parametrize("name", ["default", "llama2"])
def test_relative_prefix_log_probs_are_full_tracking_differences(
    samplers: dict[str, ByteSampler], name: str
) -> None:
    """Relative to the trunk where the anchor was made, on prefixes whose trunks grow from
    it, and on ones whose trunk leaves it (a shorter prefix): the differences are those of
    a sampler that tracks log P(trunk) from the start."""
    tracked = _sampler(name, samplers, track=True)
    sampler = _sampler(name, samplers)
    start = b"def foo(x):\n    return x.value + 1"
    others = [start + b" if x else None", start[:20], b"de", start + "\u00e9".encode()[:1], b""]
    sampler.reset(start)
    tracked.reset(start)
    base = tracked.prefix_logprob()
    with sampler.relative_prefix() as anchor:
        here = sampler.prefix_logprob()  # log P(start) - log P(its trunk)
    assert anchor.known == {len(anchor.base): 0.0}
    for prefix in others:
        tracked.reset(prefix)
        with sampler.relative_prefix(anchor):
            sampler.reset(prefix)
            got = sampler.next_bytes().prefix_logprob
        assert got is not None
        assert got - here == pytest.approx(tracked.prefix_logprob() - base, abs=TOL), prefix
    assert not sampler.track_prefix
    with pytest.raises(ValueError, match="does not track"):
        sampler.prefix_logprob()
    # a tracking sampler is left tracking its own trunk
    with tracked.relative_prefix():
        tracked.reset(start)
        tracked.next_bytes()
    assert tracked.prefix_logprob() == pytest.approx(base, abs=TOL)
