"""Sampling at temperature 1 over a remote engine without the cursor node's row.

The node that ends at the cursor has most of the vocabulary as leaves: reading its row
over vLLM costs a whole row of JSON. `RemoteCompleter` instead lets the server draw the
token after it (`LazyTree`'s drawn nodes) and rejects the search's round when that token
is not a leaf there. Checked here without a vLLM, against in-process models:

* `LazyTree` with drawn nodes samples the exact leaf distribution (chi-square against the
  whole scored tree, with the test's power against the likeliest mistake computed, and
  that mistake failing it);
* the remote completer over a fake vLLM (httpx's MockTransport serving rows and streamed
  generation from the same in-process model) samples the exact leaf distribution too,
  asks no full row, goes on with the stream that drew the leaf, and asks a rejected draw
  again with a new seed.

tests/remote/test_vllm.py holds the same path against a real vLLM.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from midword.engine import VCT, load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.remote.backend import RemoteCompleter, VLLMClient, VLLMModel
from midword.engine.remote.sampling import SEED_STEP
from midword.engine.sample.generate import Interrupted, Settings
from midword.engine.sample.lazy_pbp import LazyTree
from midword.engine.sample.sampling import ByteSampler, session_rows
from midword.engine.sample.transform import Transform
from scipy import stats

from midword.testing import shipped_test_model

from ..engine.test_generate import _chi_square_ok
from ..engine.test_lazy_pbp import PREFIXES, SyntheticRows, frequencies_fit, tree_of
from ..engine.test_lazy_pbp import exact_leaves as exact_synthetic

PREFIX = b"def ma"  # three nodes; the third ends at the cursor with 3,528 of 4,096 as leaves
START = 0  # the shipped model's BOS


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(shipped_test_model()))


class SkewedModel(FakeModel):
    """`FakeModel` with extra mass on chosen ids in every row: put on the tokens that are
    not leaves at the cursor, a draw there is rejected about half the time."""

    def __init__(self, vocab_size: int, boosted: np.ndarray, boost: float = 3.0) -> None:
        super().__init__(vocab_size, seed=5, scale=1.0)
        self.boosted, self.boost = boosted, boost

    def _logprobs_for_hash(self, h: int) -> np.ndarray:  # what rows and sessions read
        logits = super()._logprobs_for_hash(h)
        logits[self.boosted] += self.boost
        return logits - np.logaddexp.reduce(logits)


def cursor_node(engine, prefix: bytes = PREFIX):
    vct = VCT(engine)
    vct.push_bytes(prefix)
    tree = vct.tree()
    return tree, next(n for n in tree.nodes if n.ends_at_prefix_end)


def skewed(engine, prefix: bytes) -> SkewedModel:
    """A model whose draws at ``prefix``'s cursor node are often not leaves there."""
    _, node = cursor_node(engine, prefix)
    outside = np.setdiff1d(np.arange(engine.tok.size), node.leaves)
    return SkewedModel(engine.tok.size, outside)


@pytest.fixture(scope="module")
def model(engine) -> SkewedModel:
    return skewed(engine, PREFIX)


def exact_leaves(model, engine, prefix: bytes = PREFIX) -> dict[tuple[int, ...], float]:
    """Every leaf sequence below the trunk and its probability (the whole tree scored)."""
    sampler = ByteSampler(model, engine, track_prefix=False, start_id=START)
    sampler.reset(prefix)
    leaves = sampler.leaf_set()
    probs = np.exp(leaves.weights - np.logaddexp.reduce(leaves.weights))
    return {leaves.sequence(k): float(p) for k, p in enumerate(probs)}


def chi_square_power(exact: np.ndarray, wrong: np.ndarray, n: int) -> float:
    """Power of `_chi_square_ok` (level 0.001, bins under 5 expected pooled) with ``n``
    draws when they come from ``wrong`` instead of ``exact``."""
    big = exact * n >= 5
    p = np.r_[exact[big], exact[~big].sum()]
    q = np.r_[wrong[big], wrong[~big].sum()]
    dof = len(p) - 1
    noncentrality = n * float(((q - p) ** 2 / p).sum())
    return float(stats.ncx2.sf(stats.chi2.isf(0.001, dof), dof, noncentrality))


# ------------------------------------------------------------------ the lazy tree alone
def drawn_leaf_counts(
    model, engine, draw_leaf_only: bool, n: int, with_root: bool = False
) -> Counter:
    """Leaves sampled with the cursor node drawn (``with_root``: the root too, its draws
    going on into its children, one of them scored on entry)."""
    tree, node = cursor_node(engine)
    drawn = [(), node.path] if with_root else [node.path]
    session = model.session(bos_id=START)

    def fetch(paths):
        return session_rows(session, tree.trunk, paths)

    counts: Counter = Counter()
    events = np.asarray(engine.tok.special_ids, dtype=np.int64)  # leaves at the cursor too
    leaves = np.r_[np.asarray(node.leaves), events]
    for seed in range(n):
        draws = np.random.default_rng((seed, 1))

        def draw(path, draws=draws):
            p = np.exp(session_rows(session, tree.trunk, [path])[0])
            if draw_leaf_only:  # the mistake: a draw at the cursor that only gives a leaf
                p = np.where(np.isin(np.arange(len(p)), leaves), p, 0.0)
                assert path == node.path
            return int(draws.choice(len(p), p=p / p.sum()))

        lazy = LazyTree(tree, fetch, events=events, draw=draw, drawn=drawn)
        counts[lazy.sample(np.random.default_rng(seed)).sequence] += 1
    return counts


@pytest.mark.parametrize("with_root", [False, True])
def test_lazy_tree_with_drawn_nodes_samples_the_exact_leaves(model, engine, with_root) -> None:
    n = 6000
    exact = exact_leaves(model, engine)
    keys = list(exact)
    counts = drawn_leaf_counts(model, engine, draw_leaf_only=False, n=n, with_root=with_root)
    assert set(counts) <= set(keys)
    probs = np.array([exact[k] for k in keys])
    assert _chi_square_ok(np.array([counts[k] for k in keys], dtype=float), probs)
    # the likeliest mistake (the cursor node weighted by its whole row, not its leaf
    # mass): this test finds it with probability > 0.999
    tree, node = cursor_node(engine)
    at_cursor = np.array([k[:-1] == node.path for k in keys])
    mass = probs[at_cursor].sum()
    share = 1.0 / (1.0 + (1.0 - mass) / mass * leaf_mass(model, tree, node))
    wrong = np.where(at_cursor, probs / mass * share, probs / (1 - mass) * (1 - share))
    assert chi_square_power(probs, wrong, n) > 0.999


def leaf_mass(model, tree, node) -> float:
    """The cursor node's leaf mass p(leaves | node): the mistake divides by it."""
    session = model.session(bos_id=START)
    row = session_rows(session, tree.trunk, [node.path])[0]
    return float(np.exp(row[np.asarray(node.leaves)]).sum())


def synthetic_counts(engine, prefix: bytes):
    """(exact, draw) for `frequencies_fit` on synthetic rows that send walks into internal
    children and outside the tree (tests/engine/test_lazy_pbp.py), with the even-indexed nodes
    drawn and the others scored: draws go on into children scored on entry."""
    tree = tree_of(engine, prefix)
    rows = SyntheticRows(tree, engine.tok.size, seed=len(prefix))
    drawn = [node.path for i, node in enumerate(tree.nodes) if i % 2 == 0]
    rng = np.random.default_rng(3)

    def token(path):
        p = np.exp(rows.row(path))
        return int(rng.choice(len(p), p=p / p.sum()))

    def sample() -> tuple[int, ...]:
        return LazyTree(tree, rows, draw=token, drawn=drawn).sample(rng).sequence

    return exact_synthetic(tree, rows, Transform()), sample


@pytest.mark.parametrize("prefix", PREFIXES)
def test_drawn_nodes_with_children_sample_the_exact_leaves(engine, prefix) -> None:
    exact, sample = synthetic_counts(engine, prefix)
    assert frequencies_fit(exact, sample, 2000)


def test_a_draw_that_only_gives_leaves_fails_the_check(model, engine) -> None:
    """The chi-square above can fail: drawing among the leaves alone (no rejection)."""
    exact = exact_leaves(model, engine)
    keys = list(exact)
    counts = drawn_leaf_counts(model, engine, draw_leaf_only=True, n=3000)
    probs = np.array([exact[k] for k in keys])
    assert not _chi_square_ok(np.array([counts[k] for k in keys], dtype=float), probs)


def test_drawn_nodes_need_a_draw_and_the_identity_transform(engine) -> None:
    tree, _ = cursor_node(engine)
    with pytest.raises(ValueError, match="identity transform"):
        LazyTree(tree, lambda paths: [], drawn=[()])
    with pytest.raises(ValueError, match="identity transform"):
        LazyTree(tree, lambda paths: [], lambda row: row, draw=lambda path: 0, drawn=[()])


def test_a_node_whose_draws_keep_missing_is_scored(model, engine) -> None:
    """After `draw_tries` rejected draws the node's row is fetched: the search ends."""
    tree, node = cursor_node(engine)
    session = model.session(bos_id=START)
    fetched: list[tuple[int, ...]] = []

    def fetch(paths):
        fetched.append(paths[-1])
        return session_rows(session, tree.trunk, paths)

    outside = int(np.setdiff1d(np.arange(engine.tok.size), node.leaves)[0])
    draws: list[tuple[int, ...]] = []

    def draw(path):
        draws.append(path)
        return outside

    lazy = LazyTree(tree, fetch, draw=draw, drawn=[node.path], draw_tries=3)
    for seed in range(400):  # walks go to the cursor node about one time in ten here
        lazy.sample(np.random.default_rng(seed))
    assert draws == [node.path] * 3 and fetched.count(node.path) == 1


# ------------------------------------------------------------------ over a fake vLLM
class FakeVLLM:
    """/v1/completions of a vLLM serving ``model``: log-prob rows (full, chosen ids, top
    ids) and streamed generation at temperature 1, seeded by the request's seed. Each
    stream is recorded: its body, and the tokens the client read before closing it."""

    def __init__(self, model, vocab: int, scripted: dict[int, int] | None = None) -> None:
        self.model, self.vocab = model, vocab
        self.scripted = scripted or {}  # seed -> the first token a stream with it gives
        self.streams: list[dict] = []
        self.rng = np.random.default_rng(0)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body.get("stream"):
            record = {"body": body, "read": []}
            self.streams.append(record)
            return httpx.Response(200, content=self._stream(body, record["read"]))
        return httpx.Response(200, json={"choices": self._rows(body)})

    def _rows(self, body: dict) -> list[dict]:
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            row = self.model.next_logprobs(prompt)
            if body.get("logprob_token_ids"):
                ids = body["logprob_token_ids"]
            elif body["logprobs"] == -1:
                ids = range(self.vocab)
            else:
                ids = np.argsort(-row)[: body["logprobs"]].tolist()
            entry = {f"token_id:{t}": float(row[t]) for t in ids}
            choices.append({"index": i, "logprobs": {"top_logprobs": [entry]}})
        return choices

    def _stream(self, body: dict, read: list[int]) -> Iterator[bytes]:
        """Tokens at the body's temperature (top-k, top-p: not served, not needed here)."""
        seed = body.get("seed")
        rng = np.random.default_rng(seed) if seed is not None else self.rng
        context = list(body["prompt"])
        for k in range(body["max_tokens"]):
            row = self.model.next_logprobs(context)
            if body["temperature"] == 0:
                token = int(np.argmax(row))
            else:
                p = np.exp((row - row.max()) / body["temperature"])
                token = int(rng.choice(self.vocab, p=p / p.sum()))
            if k == 0 and seed in self.scripted:
                token = self.scripted[seed]
            stop = token in body["stop_token_ids"]
            last = stop or k + 1 == body["max_tokens"]
            finish = ("stop" if stop else "length") if last else None
            choice = {"index": 0, "token_ids": [token], "finish_reason": finish}
            if stop:
                choice["stop_reason"] = token
            read.append(token)
            yield f"data: {json.dumps({'choices': [choice]})}\n\n".encode()
            if last:
                break
            context.append(token)
        yield b"data: [DONE]\n\n"


def remote_completer(fake: FakeVLLM, engine) -> RemoteCompleter:
    client = VLLMClient("http://fake")
    client._http = httpx.Client(base_url="http://fake", transport=httpx.MockTransport(fake.handle))
    model = VLLMModel(client, "fake", engine.tok.size, 512, START, START, engine.tok.special_ids)
    return model.completer(engine)


def test_remote_sampling_matches_the_exact_leaf_distribution(model, engine) -> None:
    """A completion of one token is its leaf: its text (or the end) against the exact
    distribution of the whole in-process tree, by text (several leaves may spell one)."""
    n = 4000
    completer = remote_completer(FakeVLLM(model, engine.tok.size), engine)
    counts: Counter = Counter()
    for seed in range(n):
        out = completer.complete(PREFIX, Settings(temperature=1.0, max_tokens=1, seed=seed))
        counts[b"<eos>" if out.stop_reason == "eos" else out.data] += 1
    tree, _ = cursor_node(engine)
    exact: Counter = Counter()
    for seq, p in exact_leaves(model, engine).items():
        special = seq[-1] in engine.tok.special_ids
        exact[b"<eos>" if special else engine.tok.decode(seq)[tree.rest :]] += p
    keys = list(exact)
    assert set(counts) <= set(keys)
    observed = np.array([counts[k] for k in keys], dtype=float)
    assert _chi_square_ok(observed, np.array([exact[k] for k in keys]))
    assert completer.model.client.stats.full_rows == 0
    spent = completer.model.client.stats
    assert spent.leaf_draws > 0.05 * n and spent.rejected_draws > 0.5 * spent.leaf_draws


def test_temperature_one_asks_no_full_row(model, engine) -> None:
    fake = FakeVLLM(FakeModel(engine.tok.size, seed=2), engine.tok.size)
    completer = remote_completer(fake, engine)
    stats = completer.model.client.stats
    for seed in range(4):  # "x = 12": nearly all of the mass is at the cursor node
        out = completer.complete(b"x = 12", Settings(temperature=1.0, max_tokens=6, seed=seed))
        assert out.tokens >= 1
    assert stats.full_rows == 0 and stats.leaf_draws >= 4
    neutral = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    neutral |= {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    assert all(s["body"].items() >= neutral.items() for s in fake.streams)
    # what it replaced: the cursor node's row, whole
    completer.draw_leaves = False
    completer.complete(b"x = 12", Settings(temperature=1.0, max_tokens=6, seed=4))
    assert stats.full_rows >= 1


def test_the_completion_goes_on_with_the_stream_that_drew_the_leaf(model, engine) -> None:
    prefix = b"x = 12"  # the walks go to the cursor node; a draw there is a leaf half the time
    fake = FakeVLLM(skewed(engine, prefix), engine.tok.size)
    completer = remote_completer(fake, engine)
    tree, node = cursor_node(engine, prefix)
    drawn = 0
    for seed in range(16):
        fake.streams.clear()
        out = completer.complete(prefix, Settings(temperature=1.0, max_tokens=5, seed=seed))
        last = fake.streams[-1]
        for rejected in fake.streams[:-1]:
            assert len(rejected["read"]) == 1  # closed after its first token
        path = tuple(last["body"]["prompt"][1 + len(tree.trunk) :])
        tokens = tuple(t for t in last["read"] if t not in engine.tok.special_ids)
        assert out.data == engine.tok.decode(path + tokens)[tree.rest :]
        drawn += path in {n.path for n in tree.nodes}  # a draw's stream (not one from a leaf)
    assert drawn >= 8 and completer.model.client.stats.rejected_draws >= 4


def test_a_rejected_draw_is_asked_again_with_a_new_seed(engine) -> None:
    prefix = b"x = 12"
    tree, node = cursor_node(engine, prefix)
    outside = int(np.setdiff1d(np.arange(4, engine.tok.size), node.leaves)[0])
    fake = FakeVLLM(FakeModel(engine.tok.size), engine.tok.size, scripted={7: outside})
    completer = remote_completer(fake, engine)
    out = completer.complete(prefix, Settings(temperature=1.0, max_tokens=3, seed=7))
    seeds = [s["body"]["seed"] for s in fake.streams]
    assert fake.streams[0]["body"]["prompt"] == [START, *tree.trunk, *node.path]  # a draw
    assert seeds[0] == 7 and fake.streams[0]["read"] == [outside]
    assert len(seeds) >= 2 and seeds[1] == 7 + SEED_STEP and len(set(seeds)) == len(seeds)
    assert completer.model.client.stats.rejected_draws == len(seeds) - 1
    again = completer.complete(prefix, Settings(temperature=1.0, max_tokens=3, seed=7))
    assert again.data == out.data  # a seed gives the same completion


@pytest.mark.parametrize(
    "settings",
    [Settings(max_tokens=2), Settings(temperature=0.7, max_tokens=2, seed=1),
     Settings(temperature=1.0, max_tokens=2, seed=1, ignore_eos=True),
     Settings(temperature=1.0, top_k=4000, max_tokens=2, seed=1)],
)  # fmt: skip
def test_greedy_and_other_transforms_draw_nothing(model, engine, settings) -> None:
    fake = FakeVLLM(FakeModel(engine.tok.size, seed=2), engine.tok.size)
    completer = remote_completer(fake, engine)
    completer.complete(b"x = 12", settings)  # the cursor node has nearly all of the mass
    assert completer.model.client.stats.leaf_draws == 0


def test_a_cancel_after_a_draw_closes_its_stream(engine) -> None:
    fake = FakeVLLM(FakeModel(engine.tok.size), engine.tok.size)
    completer = remote_completer(fake, engine)
    with pytest.raises(Interrupted):
        completer.complete(
            b"x = 12",
            Settings(temperature=1.0, max_tokens=40, seed=2),
            should_stop=lambda: len(fake.streams) > 0,  # once the first draw is made
        )
    assert len(fake.streams) == 1 and len(fake.streams[0]["read"]) == 1
    assert completer._stream is None
