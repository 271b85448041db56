"""Completion API and commands: determinism, transforms, sampling frequencies against the
exact next-byte distribution, baselines, and the public JSON contracts."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.generate import Completer, Settings
from midword.engine.sample.sampling import ByteSampler
from midword.engine.sample.transform import Transform

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "models" / "default"


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(DEFAULT))


@pytest.fixture(scope="module")
def fake(engine):
    return FakeModel(engine.tok.size, seed=5, scale=1.0)


@pytest.mark.parametrize("solve", ["lazy", "tree"])
def test_greedy_is_deterministic(engine, fake, solve) -> None:
    settings = Settings(max_tokens=6, solve=solve)
    first = Completer(fake, engine).complete(b"    self.assertEq", settings)
    again = Completer(fake, engine).complete(b"    self.assertEq", settings)
    assert first.text == again.text and first.tokens == again.tokens
    if solve == "tree":  # the lazy solve never sums the whole tree: no normalized log-prob
        assert first.leaf_logprob is not None and first.leaf_logprob <= 0


def test_identity_transform_changes_nothing() -> None:
    rng = np.random.default_rng(0)
    logp = np.log(rng.dirichlet(np.ones(50), size=3))
    assert np.array_equal(Transform(temperature=1.0, top_k=0, top_p=1.0).apply(logp), logp)
    top2 = Transform(top_k=2).apply(logp)
    assert (np.isfinite(top2).sum(axis=1) == 2).all()
    assert np.allclose(np.exp(top2).sum(axis=1), 1.0)


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray) -> bool:
    """Pearson chi-square at significance 0.001 (bins with expected < 5 pooled)."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = np.r_[counts[big], counts[~big].sum()]
    exp = np.r_[expected[big], expected[~big].sum()]
    keep = exp > 0
    stat = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
    dof = max(1, int(keep.sum()) - 1)
    z = 3.09  # one-sided 0.001; Wilson-Hilferty approximation of the chi-square quantile
    critical = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    return stat < critical


@pytest.mark.parametrize(("mode", "solve"), [("pbp", "lazy"), ("pbp", "tree"), ("bytes", "lazy")])
def test_first_byte_frequencies_match_exact_distribution(engine, fake, mode, solve) -> None:
    prefix = b"def pri"
    sampler = ByteSampler(fake, engine)
    sampler.reset(prefix)
    probs = np.exp(sampler.next_bytes().normalized())  # [257]: bytes then eos
    completer = Completer(fake, engine)
    counts = np.zeros(257)
    for seed in range(300):
        out = completer.complete(
            prefix,
            Settings(mode=mode, temperature=1.0, max_tokens=1, max_bytes=1, seed=seed, solve=solve),
        )
        counts[out.data[0] if out.data else 256] += 1
    assert _chi_square_ok(counts, probs)


def test_baselines_keep_the_prefix_constraint(engine, fake) -> None:
    completer = Completer(fake, engine)
    for method in ("healing1", "healing2", "healing4", "naive"):
        out = completer.complete(b"x = 12", Settings(method=method, max_tokens=4))
        assert out.tokens >= 1 and out.leaf_logprob is None


def test_stop_strings_cut_the_completion(engine, fake) -> None:
    completer = Completer(fake, engine)
    free = completer.complete(b"def f", Settings(max_tokens=12))
    if len(free.text) < 2:
        pytest.fail(f"completion too short to test stop strings: {free.text!r}")
    stop = free.text[1]
    cut = completer.complete(b"def f", Settings(max_tokens=12, stop=(stop,)))
    assert stop not in cut.text and free.text.startswith(cut.text)


def test_bad_settings_are_rejected() -> None:
    for bad in (
        {"method": "beam"},
        {"mode": "words"},
        {"temperature": -1},
        {"top_p": 0},
        {"solve": "all"},
    ):
        with pytest.raises(ValueError):
            Settings(**bad)


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "midword", *args], input=stdin, capture_output=True, timeout=300
    )


def test_cli_json_contracts_on_the_shipped_model() -> None:
    for solve in ("lazy", "tree"):
        done = _run(
            "complete", "--json", "--max-tokens", "4", "--solve", solve, "-", stdin=b"import o"
        )
        assert done.returncode == 0, done.stderr.decode()
        out = json.loads(done.stdout)
        assert set(out) == {"completion", "completion_hex", "leaf_logprob", "tokens", "seconds"}
        assert isinstance(out["completion"], str) and 1 <= out["tokens"] <= 4
        assert (out["leaf_logprob"] is None) == (solve == "lazy")
    done = _run("next-bytes", "--json", "--dtype", "float64", "import o")
    assert done.returncode == 0, done.stderr.decode()
    nb = json.loads(done.stdout)
    assert set(nb) == {"prefix_logprob", "next", "inference_tokens"}
    assert nb["prefix_logprob"] < 0 and all(k == "eos" or 0 <= int(k) < 256 for k in nb["next"])
    assert sum(math.exp(v) for v in nb["next"].values()) <= 1 + 1e-9


def test_cli_reports_bad_input_in_one_line() -> None:
    done = _run("complete", "--prefix-file", "/no/such/file")
    assert done.returncode == 2 and b"cannot read" in done.stderr
    done = _run("next-bytes", "--model", "/no/such/model", "x")
    assert done.returncode == 2 and done.stderr.count(b"\n") == 1


@pytest.fixture(scope="module")
def shipped(engine):
    """The shipped model itself: trained on canonical tokenizations, so a cut that the
    prompt pipeline gets wrong shows up in its greedy output."""
    from midword.engine.model.hf_loading import load_hf_model

    return Completer(load_hf_model(str(DEFAULT), device="cpu", dtype="float32"), engine)


def _greedy(completer: Completer, prefix: str, method: str) -> str:
    return completer.complete(prefix.encode(), Settings(method=method, max_tokens=4)).text


def test_token_healing_fixes_a_cut_token(shipped) -> None:
    prefix = "for i in ra"
    ids = shipped.tok.encode(prefix + "nge")
    assert ids[:-1] == shipped.tok.encode(prefix)[:-1]  # one token back is enough here
    assert not _greedy(shipped, prefix, "naive").startswith("nge")
    assert _greedy(shipped, prefix, "healing1").startswith("nge")
    assert _greedy(shipped, prefix, "bytesampler").startswith("nge")


def test_token_healing_cannot_fix_a_deeper_cut(shipped) -> None:
    prefix = "def f(x):\n    retu"
    cut, whole = shipped.tok.encode(prefix), shipped.tok.encode(prefix + "rn")
    shared = next(i for i, (a, b) in enumerate(zip(cut, whole, strict=False)) if a != b)
    assert len(cut) - shared > 2  # the word "return" re-tokenizes 3+ tokens back
    for method in ("naive", "healing1", "healing2"):
        assert not _greedy(shipped, prefix, method).startswith("rn"), method
    assert _greedy(shipped, prefix, "bytesampler").startswith("rn")


def test_token_healing_backs_off_whole_bytes_after_a_dummy_prefix() -> None:
    """llama2's encoding starts with a dummy-prefix space that the prefix does not have:
    healing backs off the last token's bytes ("wor"), not one byte fewer."""
    from midword.engine.sample.sampling import start_token

    from midword.testing.fixtures import tokenizer_path

    engine = load_engine(str(tokenizer_path("llama2")))
    tok, fake = engine.tok, FakeModel(engine.tok.size, seed=7, scale=1.0)
    prefix = b"def hello_wor"
    ids = tok.encode(prefix.decode())
    assert tok.decode(ids) == b" " + prefix and tok.token_bytes[ids[-1]] == b"wor"
    # the reference: the best token after the kept ones that agrees with the removed bytes
    need = tok.token_bytes[ids[-1]]
    row = fake.session(bos_id=start_token(fake, engine)).logprobs(ids[:-1], [()])[0]
    agree = [
        t for t, b in enumerate(tok.token_bytes) if b and (b.startswith(need) or need.startswith(b))
    ]
    best = max(agree, key=lambda t: row[t])
    done = Completer(fake, engine).complete(prefix, Settings(method="healing1", max_tokens=1))
    assert done.data == tok.token_bytes[best][len(need) :]
