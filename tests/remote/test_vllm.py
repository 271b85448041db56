"""The vLLM backend against a real vLLM server (tests/vllm_support.py starts it).

What the in-process backend is held to, the remote one is too, in float32 with a stated
tolerance (docs/team-server.md says why it holds): log-prob rows against a plain
in-process forward pass, next-byte distributions and the prefix probability against
the brute-force oracle (tests/lm_oracle.py, which scores every covering with plain
requests) and against the in-process sampler, the covering tree's leaf distribution,
the chain rule, and greedy PBP completions equal to in-process greedy.

Skipped only when no vLLM venv is there (MIDWORD_VLLM_PYTHON; .ci/run sets it).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.errors import EngineMismatch, EngineRefused, EngineUnavailable
from midword.engine.remote.backend import API_KEY_ENV, VLLMModel, connect_vllm
from midword.engine.sample.generate import Completer, Interrupted, Settings
from midword.engine.sample.sampling import ByteSampler

from midword.testing.fixtures import real_encoder, tokenizer_path

from ..engine.test_generate import _chi_square_ok
from ..lm_oracle import LMOracle
from ..vllm_support import (
    API_KEY,
    MODEL_DIR,
    REQUEST_TIMEOUT_S,
    SERVED_NAME,
    VLLMServer,
    free_port,
    requires_vllm,
    shared_vllm,
    stop_shared,
)

pytestmark = [pytest.mark.vllm, requires_vllm]

# Log-probs from vLLM's float32 kernels agree with transformers' float32 forward pass to
# about 2e-5 on this model (measured); 2e-4 leaves room for other batch compositions.
TOL = 2e-4
PREFIXES = [b"def ma", b"import nu", b"    self.x", b"x = 12", b'print("h', b"for i in ra"]


@pytest.fixture(scope="session")
def vllm() -> Iterator[VLLMServer]:
    yield shared_vllm()
    stop_shared()


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(MODEL_DIR))


@pytest.fixture(scope="module")
def remote(vllm: VLLMServer, engine) -> Iterator[VLLMModel]:
    model = connect_vllm(
        vllm.url, engine, model_dir=MODEL_DIR, api_key=API_KEY, timeout=REQUEST_TIMEOUT_S
    )
    yield model
    model.close()


@pytest.fixture(scope="module")
def local():
    import torch
    from midword.engine.model.hf_loading import load_hf_model

    torch.set_num_threads(1)
    return load_hf_model(str(MODEL_DIR), device="cpu", dtype="float32")


# ------------------------------------------------------------------ connecting
def test_connect_reads_the_served_model_and_its_context(remote: VLLMModel) -> None:
    config = json.loads((MODEL_DIR / "config.json").read_text())
    assert remote.name == SERVED_NAME
    assert remote.max_context == config["max_position_embeddings"]
    assert remote.vocab_size == config["vocab_size"]
    assert remote.window < remote.max_context


def test_connect_refuses_what_does_not_match(vllm: VLLMServer, engine) -> None:
    with pytest.raises(EngineMismatch, match="does not serve model 'nope'"):
        connect_vllm(vllm.url, engine, model_name="nope", api_key=API_KEY)
    other = load_engine(str(tokenizer_path("llama3")))
    with pytest.raises(EngineMismatch, match="tokenizes differently"):
        connect_vllm(vllm.url, other, api_key=API_KEY)
    with pytest.raises(EngineRefused, match=f"HTTP 401.*{API_KEY_ENV}"):
        connect_vllm(vllm.url, engine, api_key="wrong")
    with pytest.raises(EngineUnavailable, match="unreachable"):
        connect_vllm(f"http://127.0.0.1:{free_port()}", engine, api_key=API_KEY)


def test_api_key_comes_from_the_environment(
    vllm: VLLMServer, engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    connect_vllm(vllm.url, engine, timeout=REQUEST_TIMEOUT_S).close()


# ------------------------------------------------------------------ rows
def test_rows_equal_an_in_process_forward_pass(remote: VLLMModel, local, engine) -> None:
    ids = [0, *engine.tok.encode("def main():\n    print(total)\n")]
    got, want = remote.sequence_logprobs(ids), local.sequence_logprobs(ids)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < TOL


def test_session_rows_for_a_tree_equal_plain_rows(remote: VLLMModel, local) -> None:
    session = remote.session(bos_id=0)
    trunk, paths = [312, 1699], [(), (413,), (413, 26), (26,)]
    rows = session.logprobs(trunk, paths)
    for path, row in zip(paths, rows, strict=True):
        plain = local.sequence_logprobs([0, *trunk, *path])[-1]
        assert np.abs(row - plain).max() < TOL
    asked = remote.client.stats.requests
    again = session.logprobs([312, 1699, 413], [(), (26,)])  # the trunk grew into a node
    assert remote.client.stats.requests == asked  # kept rows: no request
    assert np.array_equal(again[0], rows[1]) and np.array_equal(again[1], rows[2])


def test_concurrent_mixed_requests_give_whole_rows(vllm: VLLMServer, engine) -> None:
    """Several clients at once, asking full rows, top ids and chosen ids: vLLM batches
    them together, and a batch with chosen ids shortens the others' rows; every row
    that comes back is the one asked for (short ones are asked again)."""
    models = [
        connect_vllm(vllm.url, engine, api_key=API_KEY, timeout=REQUEST_TIMEOUT_S) for _ in range(3)
    ]
    prompts = [[0, 312, 1699 + i] for i in range(6)]
    reference = models[0].full_rows(prompts)
    chosen_ids = list(range(40, 140))

    def client(k: int) -> list[np.ndarray]:
        model, rows = models[k], []
        for _ in range(6):
            if k == 0:
                rows += model.full_rows(prompts)
            elif k == 1:
                rows += model.top_rows(prompts, 20)
            else:
                rows += model.chosen_rows(prompts, chosen_ids)
        return rows

    with ThreadPoolExecutor(3) as pool:
        full, top, chosen = pool.map(client, range(3))
    for i, row in enumerate(full):
        assert np.abs(row - reference[i % 6]).max() < TOL
    for i, row in enumerate(top):
        want = np.sort(reference[i % 6])[-20:]
        assert np.abs(np.sort(row[np.isfinite(row)])[-20:] - want).max() < TOL
    for i, row in enumerate(chosen):
        assert np.abs(row[chosen_ids] - reference[i % 6][chosen_ids]).max() < TOL
    for model in models:
        model.close()


def test_a_long_context_is_cut_to_the_server_window(remote: VLLMModel, engine) -> None:
    session = remote.session(bos_id=0)
    trunk = engine.tok.encode("value = compute(value)\n" * 200)
    assert len(trunk) > remote.max_context
    row = session.logprobs(trunk, [()])[0]
    assert np.isfinite(row).all() and abs(np.logaddexp.reduce(row)) < 1e-4
    prompt = session.prompt(trunk)
    assert prompt[0] == 0 and len(prompt) <= remote.window
    assert prompt[1:] == trunk[len(trunk) - len(prompt) + 1 :]


# ------------------------------------------------------------------ exactness
@pytest.fixture(scope="module")
def oracle(remote: VLLMModel, engine) -> LMOracle:
    """Brute force over plain requests to the same server: no tree, no chosen ids."""
    return LMOracle(remote, real_encoder(MODEL_DIR / "tokenizer.json"), engine.tok, 0)


@pytest.mark.parametrize("prefix", PREFIXES[:4])
def test_next_bytes_match_the_oracle_and_in_process(
    prefix: bytes, remote: VLLMModel, local, engine, oracle: LMOracle
) -> None:
    sampler = remote.byte_sampler(engine)
    sampler.reset(prefix)
    dist = sampler.next_bytes()
    base = oracle.prefix_logprob(prefix)
    assert abs(dist.prefix_logprob - base) < TOL
    likely = np.argsort(dist.next)[::-1][:3]
    for b in likely:
        want = oracle.prefix_logprob(prefix + bytes([int(b)])) - base
        assert abs(dist.next[b] - want) < TOL, (prefix, int(b))
    assert abs(dist.eos - (oracle.eos_logprob(prefix) - base)) < TOL
    in_process = ByteSampler(local, engine)
    in_process.reset(prefix)
    other = in_process.next_bytes()
    finite = np.isfinite(other.next)
    assert np.array_equal(finite, np.isfinite(dist.next))
    assert np.abs(dist.next[finite] - other.next[finite]).max() < TOL


def test_leaf_distribution_matches_the_oracle(remote: VLLMModel, engine, oracle: LMOracle) -> None:
    completer = remote.completer(engine)
    for prefix in PREFIXES[:3]:
        completer.sampler.reset(prefix)
        leaves = completer.leaf_set()
        trunk = tuple(completer.sampler.vct.tree().trunk)
        picks = np.argsort(leaves.weights)[::-1][:5]
        for k in picks:
            seq = trunk + tuple(int(t) for t in leaves.sequence(int(k)))
            trunk_lp = oracle.seq_logprob(trunk) if trunk else 0.0
            assert abs(leaves.weights[k] - (oracle.seq_logprob(seq) - trunk_lp)) < TOL


def test_chosen_ids_give_the_full_rows_values(remote: VLLMModel, engine) -> None:
    """A node's chosen-id row equals the full row where it is read."""
    completer = remote.completer(engine)
    before = remote.client.stats.copy()
    completer.sampler.reset(b"    self.assertEq")
    chosen = completer.leaf_set()
    spent = remote.client.stats.minus(before)
    assert spent.chosen_rows > 0  # the deep nodes need few ids
    full = ByteSampler(remote, engine, track_prefix=False)  # plain rows only
    full.reset(b"    self.assertEq")
    plain = full.leaf_set()
    assert np.array_equal(chosen.token, plain.token)
    assert np.abs(chosen.weights - plain.weights).max() < TOL


def test_greedy_search_asks_the_top_ids_not_full_rows(remote: VLLMModel, engine) -> None:
    """A greedy lazy search reads a many-leaf node through the server's top ids (and its
    children exactly): no full row when a leaf is among the top (greedy equality with
    in-process is checked below)."""
    completer = remote.completer(engine)
    before = remote.client.stats.copy()
    for prefix in PREFIXES:
        completer.complete(prefix, Settings(max_tokens=1))
    spent = remote.client.stats.minus(before)
    assert spent.top_rows >= 1  # a node with many leaves was asked for its top ids ...
    assert spent.full_rows <= 1  # ... and a leaf was among them (it is, but for one here)
    assert spent.bytes_received < 40_000 * len(PREFIXES)  # a full row alone is 146 KB


def test_chain_rule(remote: VLLMModel, engine) -> None:
    sampler = remote.byte_sampler(engine)
    text = b"def main():\n    ret"
    sampler.reset(b"")
    previous = None
    for i in range(1, len(text) + 1):
        sampler.reset(text[:i])
        dist = sampler.next_bytes()
        if previous is not None:
            assert (
                abs(previous.prefix_logprob + previous.next[text[i - 1]] - dist.prefix_logprob)
                < TOL
            )
        previous = dist


# ------------------------------------------------------------------ completions
@pytest.mark.parametrize("solve", ["lazy", "tree"])
def test_greedy_pbp_equals_in_process_greedy(solve: str, remote: VLLMModel, local, engine) -> None:
    ours, theirs = remote.completer(engine), Completer(local, engine)
    settings = Settings(max_tokens=12, solve=solve)
    for prefix in PREFIXES:
        got, want = ours.complete(prefix, settings), theirs.complete(prefix, settings)
        assert got.data == want.data, prefix
        assert got.stop_reason == want.stop_reason
        if solve == "tree":
            assert abs(got.leaf_logprob - want.leaf_logprob) < TOL


def test_byte_mode_equals_in_process(remote: VLLMModel, local, engine) -> None:
    settings = Settings(mode="bytes", max_bytes=12)
    got = remote.completer(engine).complete(b"def ma", settings)
    want = Completer(local, engine).complete(b"def ma", settings)
    assert got.data == want.data


def test_sampled_completion_and_stop_strings(remote: VLLMModel, engine) -> None:
    completer = remote.completer(engine)
    result = completer.complete(b"import nu", Settings(temperature=0.8, seed=3, max_tokens=16))
    again = completer.complete(b"import nu", Settings(temperature=0.8, seed=3, max_tokens=16))
    assert result.data == again.data  # the server seeds its sampler from the settings
    full = completer.complete(b"import nu", Settings(max_tokens=16)).text
    assert len(full) >= 4
    stop = full[2:4]  # a stop string the greedy text holds: it ends just before it
    stopped = completer.complete(b"import nu", Settings(max_tokens=16, stop=(stop,)))
    assert stopped.text == full[: full.find(stop)] and stopped.stop_reason == "stop"


def test_temperature_one_draws_the_cursor_leaf_from_the_server(
    remote: VLLMModel, local, engine
) -> None:
    """Sampling at temperature 1 asks no full row: the token after the node that ends at
    the cursor is drawn by vLLM (a draw that is not a leaf there is asked again). The
    one-token completions (each its leaf) follow the in-process sampler's exact leaf
    distribution (chi-square at 0.001, by text); tests/remote/test_vllm_draws.py holds the
    method to a skewed model where a mistake would show."""
    prefix, n = b"x = 12", 300  # 98% of the leaf mass is at the cursor node (7% not leaves)
    completer = remote.completer(engine)
    before = remote.client.stats.copy()
    counts: dict[bytes, int] = {}
    for seed in range(n):
        out = completer.complete(prefix, Settings(temperature=1.0, max_tokens=1, seed=seed))
        key = b"<eos>" if out.stop_reason == "eos" else out.data
        counts[key] = counts.get(key, 0) + 1
    spent = remote.client.stats.minus(before)
    assert spent.full_rows == 0 and spent.leaf_draws >= n * 0.8
    in_process = Completer(local, engine)
    in_process.sampler.reset(prefix)
    leaves = in_process.leaf_set()
    probs = np.exp(leaves.weights - np.logaddexp.reduce(leaves.weights))
    rest = in_process.sampler.vct.tree().rest
    exact: dict[bytes, float] = {}
    for k, p in enumerate(probs):
        seq = leaves.sequence(k)
        key = b"<eos>" if seq[-1] in engine.tok.special_ids else engine.tok.decode(seq)[rest:]
        exact[key] = exact.get(key, 0.0) + float(p)
    assert set(counts) <= set(exact)
    keys = list(exact)
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    assert _chi_square_ok(observed, np.array([exact[k] for k in keys]))
    again = completer.complete(prefix, Settings(temperature=1.0, max_tokens=12, seed=5))
    assert (
        again.data
        == completer.complete(prefix, Settings(temperature=1.0, max_tokens=12, seed=5)).data
    )


def test_cancel_stops_the_stream(remote: VLLMModel, engine) -> None:
    completer = remote.completer(engine)
    before = remote.client.stats.streamed_tokens
    calls = {"n": 0}

    def stop_after_three() -> bool:
        calls["n"] += 1
        return calls["n"] > 4

    with pytest.raises(Interrupted):
        completer.complete(
            b"import nu", Settings(max_tokens=200, ignore_eos=False), should_stop=stop_after_three
        )
    assert remote.client.stats.streamed_tokens - before < 10
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(remote) > 0:
        time.sleep(0.1)
    assert _running(remote) == 0  # the closed stream aborted the request server-side


def _running(remote: VLLMModel) -> float:
    for line in remote.client.get_text("/metrics").splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    return math.nan


# ------------------------------------------------------------------ command line
def test_cli_complete_and_next_bytes_over_vllm(vllm: VLLMServer) -> None:
    env = {**os.environ, API_KEY_ENV: API_KEY}
    common = ["--model", str(MODEL_DIR), "--json"]
    remote = ["--engine", "vllm", "--url", vllm.url]

    def run(*args: str) -> list[dict]:
        out = subprocess.run(
            [sys.executable, "-m", "midword", *args], env=env, capture_output=True, timeout=300
        )
        assert out.returncode == 0, out.stderr.decode()
        return [json.loads(line) for line in out.stdout.decode().splitlines()]

    prefixes = ["def ma", "x = 12"]
    here = run("complete", *common, "--max-tokens", "8", *prefixes)
    there = run("complete", *common, *remote, "--max-tokens", "8", *prefixes)
    assert [r["completion_hex"] for r in there] == [r["completion_hex"] for r in here]
    here_nb = run("next-bytes", *common, "def ma")[0]
    there_nb = run("next-bytes", *common, *remote, "def ma")[0]
    assert set(here_nb["next"]) == set(there_nb["next"])
    assert max(abs(here_nb["next"][k] - there_nb["next"][k]) for k in here_nb["next"]) < TOL
    bad = subprocess.run(
        [sys.executable, "-m", "midword", "complete", *common, "--engine", "vllm", "x"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert bad.returncode == 2 and b"--url" in bad.stderr
