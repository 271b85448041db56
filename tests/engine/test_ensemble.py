"""Byte-level ensembles and proxy tuning (engine/sample/ensemble.py) against brute force.

Tiny random-weight models (float64) on two different real tokenizers (llama3 and
qwen3). Truth is computed without the ensemble code: each member's distribution
from a separate ByteSampler, combined here in probability space, and each
member's conditionals from the brute-force oracle (tests/lm_oracle.py).

The brute-force side cannot give a member's normalizer Z = sum over the 257
outcomes o of P(prefix o) (that needs the canonical check of every vocabulary
token after each end node, ~160 s per prefix). Product checks therefore compare
log-ratios between outcomes (Z cancels); mix checks take Z from the member's own
sampler and every P(prefix o) from brute force.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.errors import BackendError
from midword.engine.sample.ensemble import (
    PROXY_WEIGHTS,
    Ensemble,
    check_weights,
    combine_distributions,
)
from midword.engine.sample.generate import Settings
from midword.engine.sample.sampling import ByteSampler, start_token

from midword.testing import CORPUS, real_encoder, tokenizer_path

from ..lm_oracle import LMOracle

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "models" / "default"
TOL = 1e-6
NAMES = ("llama3", "qwen3")  # gpt4o has a known end-node gap (README), so not here
MIX = (0.3, 0.7)
PRODUCT = (0.8, 1.5)
MAX_STARTS = 1000  # brute-force checks only bytes that start fewer tokens (time)


@dataclass
class Member:
    engine: object
    model: object
    oracle: LMOracle

    def exact(self, prefix: bytes) -> tuple[np.ndarray, float]:
        """From a fresh sampler: (probabilities [257] renormalized, log of the normalizer
        Z = sum over the 257 outcomes o of P(prefix o))."""
        sampler = ByteSampler(self.model, self.engine)
        sampler.reset(prefix)
        nb = sampler.next_bytes()
        both = np.r_[nb.next, nb.eos]
        top = both.max()
        raw = np.exp(both - top)
        return raw / raw.sum(), nb.prefix_logprob + top + float(np.log(raw.sum()))

    def brute(self, prefix: bytes, outcomes: list[int]) -> np.ndarray:
        """log P(prefix o) by brute force for each outcome o; 256 is end of text."""
        return np.array(
            [
                self.oracle.eos_logprob(prefix)
                if k == 256
                else self.oracle.prefix_logprob(prefix + bytes([k]))
                for k in outcomes
            ]
        )


def _member(name: str, seed: int) -> Member:
    from midword.engine.model.hf_backend import HFModel

    path = tokenizer_path(name)
    engine = load_engine(str(path))
    tiny = build_tiny_llama(
        engine.tok.size, seed=seed, hidden=16, layers=1, heads=2, dtype="float64"
    )
    model = HFModel(tiny, name=f"tiny-{name}-{seed}")
    oracle = LMOracle(model, real_encoder(path), engine.tok, start_token(model, engine))
    return Member(engine, model, oracle)


@pytest.fixture(scope="module")
def members() -> dict[str, Member]:
    """llama3 and qwen3 members, plus a second qwen3 model (the proxy-tuning anti-expert)."""
    return {
        "llama3": _member("llama3", 11),
        "qwen3": _member("qwen3", 12),
        "qwen3b": _member("qwen3", 13),
    }


def _pairs(members: dict[str, Member], *names: str) -> list[tuple[object, object]]:
    return [(members[n].model, members[n].engine) for n in names]


def prefixes() -> list[bytes]:
    """Pinned cuts (two inside a multi-byte character) and random cuts of the corpus."""
    rng = random.Random(8)
    data = "".join(CORPUS).encode()
    out = [b"x = 12", "中文".encode()[:4], "😀".encode()[:2], b"self.assertEq"]
    while len(out) < 6:
        i = rng.randrange(len(data))
        if not 0x80 <= data[i] < 0xC0:  # start on a character, end anywhere
            out.append(data[i : i + rng.randrange(2, 8)])
    return out


def _close(got: np.ndarray, want: np.ndarray, tol: float = TOL) -> bool:
    """Same zeros, and log-probabilities equal to ``tol`` elsewhere (relative, so rare
    outcomes count as much as likely ones)."""
    if not np.array_equal(got == 0, want == 0):
        return False
    live = want > 0
    return bool(np.all(np.abs(np.log(got[live]) - np.log(want[live])) < tol))


def _starts(member: Member) -> np.ndarray:
    """[256] how many tokens of the member's vocabulary start with each byte."""
    first = [b[0] for b in member.engine.tok.token_bytes if b]
    return np.bincount(first, minlength=256)


def _outcomes(dist: np.ndarray, prefix: bytes, cheap: np.ndarray, rng: random.Random) -> list[int]:
    """Two likely bytes, one random byte, and end of text when the text may end.

    Only ``cheap`` bytes (few tokens start with them): the brute force checks every
    token that starts with the byte after each end node, ~30 s for a space.
    """
    likely = [int(k) for k in np.argsort(-dist[:256]) if cheap[k]][:2]
    picked = likely + [rng.choice(np.flatnonzero(cheap).tolist())]
    try:
        prefix.decode("utf-8")
        picked.append(256)
    except UnicodeDecodeError:
        pass
    return picked


# ---------------------------------------------------------------- exactness
@pytest.mark.parametrize("prefix", prefixes(), ids=repr)
def test_mix_and_product_equal_the_combined_member_distributions(members, prefix) -> None:
    p = [members[n].exact(prefix)[0] for n in NAMES]
    want_mix = MIX[0] * p[0] + MIX[1] * p[1]
    powered = p[0] ** PRODUCT[0] * p[1] ** PRODUCT[1]
    want_product = powered / powered.sum()
    for combine, weights, want in (("mix", MIX, want_mix), ("product", PRODUCT, want_product)):
        ens = Ensemble(_pairs(members, *NAMES), weights, combine)
        ens.reset(prefix)
        got = np.exp(ens.distribution().logp)
        assert got.shape == (257,)
        assert _close(got, want, 1e-9), (combine, prefix, np.abs(got - want).max())


@pytest.mark.parametrize("prefix", prefixes()[:4], ids=repr)
def test_combination_matches_brute_force(members, prefix) -> None:
    rng = random.Random(len(prefix))
    mix = Ensemble(_pairs(members, *NAMES), MIX, "mix")
    product = Ensemble(_pairs(members, *NAMES), PRODUCT, "product")
    mix.reset(prefix)
    product.reset(prefix)
    got_mix, got_product = mix.distribution().logp, product.distribution().logp
    cheap = np.all([_starts(members[n]) < MAX_STARTS for n in NAMES], axis=0)
    outcomes = _outcomes(got_mix, prefix, cheap, rng)
    brute = [members[n].brute(prefix, outcomes) for n in NAMES]  # [member][outcome] logs
    norms = [members[n].exact(prefix)[1] for n in NAMES]
    want = sum(w * np.exp(b - z) for w, b, z in zip(MIX, brute, norms, strict=True))
    assert _close(np.exp(got_mix[outcomes]), want), (prefix, outcomes)
    # product: log p(k) - log p(ref) = sum_i w_i (log q_i(k) - log q_i(ref)), no normalizer
    ref = outcomes[0]
    assert np.isfinite(got_product[ref])
    for j, k in enumerate(outcomes):
        logs = [b[j] - b[0] for b in brute]
        if any(x == -np.inf for x in logs):
            assert got_product[k] == -np.inf, (prefix, k)
            continue
        ratio = sum(w * x for w, x in zip(PRODUCT, logs, strict=True))
        assert abs((got_product[k] - got_product[ref]) - ratio) < TOL, (prefix, k)


def test_an_ensemble_of_one_model_is_that_model(members) -> None:
    one = members["qwen3"]
    for prefix in (b"def pri", "中文".encode()[:4]):
        want = one.exact(prefix)[0]
        for combine, weight in (("mix", 2.5), ("product", 1.0)):
            ens = Ensemble(_pairs(members, "qwen3"), [weight], combine)
            ens.reset(prefix)
            assert _close(np.exp(ens.distribution().logp), want, 1e-12), (combine, prefix)
        muted = Ensemble(_pairs(members, "llama3", "qwen3"), [0.0, 1.0], "mix")
        muted.reset(prefix)
        dist = muted.distribution()  # a member weighted zero is never scored
        assert dist.members[0] is None and _close(np.exp(dist.logp), want, 1e-12)


def test_proxy_tuning(members) -> None:
    """expert == anti-expert: exactly the base; another anti-expert: base * expert / anti."""
    for prefix in (b"x = 12", "😀".encode()[:2]):
        base, expert, anti = (members[n].exact(prefix)[0] for n in ("llama3", "qwen3", "qwen3b"))
        same = Ensemble(_pairs(members, "llama3", "qwen3", "qwen3"), PROXY_WEIGHTS, "product")
        same.reset(prefix)
        assert _close(np.exp(same.distribution().logp), base, 1e-12), prefix
        tuned = Ensemble(_pairs(members, "llama3", "qwen3", "qwen3b"), PROXY_WEIGHTS, "product")
        tuned.reset(prefix)
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = np.where(base * expert * anti > 0, base * expert / anti, 0.0)
        got = np.exp(tuned.distribution().logp)
        assert _close(got, raw / raw.sum(), 1e-9), prefix
        assert np.abs(got - base).max() > 1e-3  # the expert pair really moves the distribution


# ---------------------------------------------------------------- combination rules
def test_impossible_outcomes_and_bad_weights() -> None:
    with np.errstate(divide="ignore"):
        a = np.log(np.array([0.5, 0.5, 0.0, 0.0]))
        b = np.log(np.array([0.0, 0.25, 0.75, 0.0]))
        c = np.log(np.array([0.0, 0.0, 0.0, 1.0]))
    mix = np.exp(combine_distributions([a, b], [0.5, 0.5], "mix"))
    assert np.allclose(mix, [0.25, 0.375, 0.375, 0.0]) and mix[3] == 0
    for weights in ([1.0, 1.0], [1.0, -0.5], [-1.0, 2.0]):  # a zero vetoes, whatever the sign
        prod = np.exp(combine_distributions([a, b], weights, "product"))
        assert np.allclose(prod, [0, 1, 0, 0]) and np.isfinite(prod).all()
    with pytest.raises(BackendError, match="agree on no next byte"):
        combine_distributions([a, c], [1.0, 1.0], "product")
    assert np.allclose(np.exp(combine_distributions([a, c], [1.0, 0.0], "product")), np.exp(a))
    for weights, combine in (
        ([1.0], "mix"),
        ([1.0, 2.0, 3.0], "product"),
        ([1.0, -1.0], "mix"),
        ([0.0, 0.0], "product"),
        ([1.0, float("nan")], "mix"),
        ([1.0, 1.0], "average"),
    ):
        with pytest.raises(ValueError):
            check_weights(weights, 2, combine)
    with pytest.raises(ValueError, match="one weight per model"):
        Ensemble.from_dirs(["/no/a", "/no/b"], [1.0], "mix")


def test_event_mapping(members) -> None:
    """A mapped special token becomes its own outcome and leaves end of text."""
    llama, qwen = members["llama3"], members["qwen3"]
    l_id, q_id = llama.engine.tok.special_ids[0], qwen.engine.tok.special_ids[0]
    prefix = b"x = 1"
    plain = Ensemble(_pairs(members, *NAMES), MIX, "mix")
    mapped = Ensemble(_pairs(members, *NAMES), MIX, "mix", events={"first": [l_id, q_id]})
    plain.reset(prefix)
    mapped.reset(prefix)
    a, b = np.exp(plain.distribution().logp), np.exp(mapped.distribution().logp)
    assert b.shape == (258,) and b[257] > 0 and b[256] > 0
    assert np.allclose(a[:256], b[:256]) and abs(a[256] - b[256] - b[257]) < 1e-12
    with pytest.raises(ValueError, match="special"):
        Ensemble(_pairs(members, *NAMES), MIX, "mix", events={"x": [5, None]})


# ---------------------------------------------------------------- sampling
def test_sampling_matches_the_distribution_and_is_reproducible(members) -> None:
    prefix = b"def pri"
    ens = Ensemble(_pairs(members, *NAMES), MIX, "mix")
    ens.reset(prefix)
    probs = np.exp(ens.distribution().logp)
    counts = np.zeros(257)
    for seed in range(200):
        out = ens.complete(prefix, Settings(mode="bytes", temperature=1.0, max_bytes=1, seed=seed))
        counts[out.data[0] if out.data else 256] += 1
    expected = probs * counts.sum()
    big = expected >= 5  # pool the rare outcomes so the chi-square approximation holds
    obs, exp = np.r_[counts[big], counts[~big].sum()], np.r_[expected[big], expected[~big].sum()]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    settings = Settings(mode="bytes", temperature=1.0, top_p=0.9, max_bytes=5, seed=42)
    first = ens.complete(prefix, settings)
    again = Ensemble(_pairs(members, *NAMES), MIX, "mix").complete(prefix, settings)
    assert first.data == again.data and first.stop_reason == again.stop_reason
    top3 = set(np.argsort(-probs)[:3].tolist())
    for seed in range(20):
        out = ens.complete(
            prefix, Settings(mode="bytes", temperature=1.0, top_k=3, max_bytes=1, seed=seed)
        )
        assert (out.data[0] if out.data else 256) in top3


def test_greedy_stop_strings_and_budget(members) -> None:
    ens = Ensemble(_pairs(members, *NAMES), PRODUCT, "product")
    free = ens.complete(b"def f", Settings(mode="bytes", max_bytes=6))
    assert free.stop_reason in ("eos", "max_bytes") and len(free.data) <= 6
    assert free.leaf_logprob is None and free.tokens == len(free.data)
    # greedy: each byte is the argmax of the combined distribution after the bytes before it
    ens.reset(b"def f" + free.data[:2])
    assert free.data[2] == int(np.argmax(ens.distribution().logp))
    if len(free.text) >= 2:
        stop = free.text[1]
        cut = ens.complete(b"def f", Settings(mode="bytes", max_bytes=6, stop=(stop,)))
        assert cut.stop_reason == "stop" and free.text.startswith(cut.text) and stop not in cut.text


# ---------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Tiny model directories: one on llama3, two on the shipped model's small tokenizer."""
    dirs = {}
    for name, tokenizer, seed in (
        ("llama3", tokenizer_path("llama3"), 21),
        ("expert", DEFAULT / "tokenizer.json", 22),
        ("anti", DEFAULT / "tokenizer.json", 23),
    ):
        d = tmp_path_factory.mktemp(f"tiny-{name}")
        size = load_engine(str(tokenizer)).tok.size
        build_tiny_llama(size, d, seed=seed, hidden=16, layers=1, heads=2)
        shutil.copy(tokenizer, d / "tokenizer.json")
        dirs[name] = str(d)
    return dirs


def _greedy(dirs: list[str], weights: tuple[float, ...], combine: str) -> object:
    ens = Ensemble.from_dirs(dirs, weights, combine, device="cpu", dtype="float64")
    return ens.complete(b"def f", Settings(mode="bytes", max_bytes=6))


def test_cli_ensemble_end_to_end(model_dirs) -> None:
    """A real subprocess: shipped model + llama3 model, JSON contract, same text as the API."""
    dirs = [str(DEFAULT), model_dirs["llama3"]]
    done = subprocess.run(
        [sys.executable, "-m", "midword", "complete", "def f", "--json", "--dtype", "float64"]
        + ["--max-bytes", "6", "--ensemble", *dirs, "--weights", "0.5", "0.5"],
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout)
    assert set(out) == {"completion", "completion_hex", "leaf_logprob", "tokens", "seconds"}
    want = _greedy(dirs, (0.5, 0.5), "mix")
    assert out["completion"] == want.text and out["tokens"] == want.tokens
    assert out["leaf_logprob"] is None


def test_cli_proxy_tuning(model_dirs, capsys) -> None:
    from midword.cli import main

    dirs = [str(DEFAULT), model_dirs["expert"], model_dirs["anti"]]
    argv = ["complete", "def f", "--json", "--dtype", "float64", "--max-bytes", "6"]
    assert main([*argv, "--proxy-tune", *dirs]) == 0
    tuned = json.loads(capsys.readouterr().out)
    assert tuned["completion"] == _greedy(dirs, PROXY_WEIGHTS, "product").text
    assert main([*argv, "--proxy-tune", *dirs, "--weights", "1", "0", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)  # expert and anti-expert weighted out
    assert alone["completion"] == _greedy(dirs[:1], (1.0,), "mix").text


def test_cli_rejects_bad_ensembles(capsys) -> None:
    from midword.cli import main

    two = ["--ensemble", str(DEFAULT), str(DEFAULT)]
    for args, message in (
        ([*two, "--weights", "1"], "one weight per model"),
        ([*two, "--weights", "1", "-1"], "mix weights must be >= 0"),
        ([*two, "--mode", "pbp"], "--mode bytes"),
        ([*two, "--method", "naive"], "--method bytesampler"),
        ([*two, "--model", "/some/model"], "not --model"),
        (["--proxy-tune", *[str(DEFAULT)] * 3, "--combine", "mix"], "product"),
        (["--weights", "1"], "need --ensemble"),
        (["--ensemble", str(DEFAULT), "/no/such/model"], "/no/such/model"),
    ):
        assert main(["complete", "x", *args]) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.startswith("midword complete: error:"), (args, err)
        assert err.count("\n") == 1, err
