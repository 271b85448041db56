"""Tests of the scoring backends: tree attention, KV-cache reuse and garbage collection.

The oracle is a plain forward pass over the whole sequence (no cache, no mask)
for Hugging Face models, and `FakeModel.next_logprobs` for the fake. Models are
tiny random Llama / Qwen2 / Qwen3 built from configs, in float64 (by default: see DTYPE).
"""

from __future__ import annotations

import doctest
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from midword.engine.errors import BackendError
from midword.engine.model import backend, fake, forward_plan
from midword.engine.model.backend import ScoringSession, TokenPath, TreeScoringSession
from midword.engine.model.fake import FakeModel
from midword.engine.model.forward_plan import ForwardStep

# MIDWORD_TEST_DEVICE / MIDWORD_TEST_DTYPE run the HF tests elsewhere (cuda_check.sh:
# cuda, float32 and bfloat16); the default is the exactness check, float64 on the CPU
DEVICE = os.environ.get("MIDWORD_TEST_DEVICE", "cpu")
DTYPE = os.environ.get("MIDWORD_TEST_DTYPE", "float64")
# float64 agrees to ~1e-15 here; half precision: total variation (`row_error`)
ATOL = {"float64": 1e-9, "float32": 2e-4, "bfloat16": 0.03, "float16": 0.01}[DTYPE]
ARCHS = {"llama": 1000, "qwen2": 512, "qwen3": 300}  # architecture -> vocab size

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from midword.engine.model.hf_backend import HFModel, HFSession  # noqa: E402
from midword.engine.model.hf_loading import load_hf_model  # noqa: E402
from midword.engine.model.kvcache import KVCache  # noqa: E402

from midword.testing.tiny_models import build_tiny_causal_lm, build_tiny_llama  # noqa: E402

# --------------------------------------------------------------------------------------
# fixtures and helpers
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run far faster single-threaded (and do not fight over 2 shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=sorted(ARCHS))
def hf_model(request: pytest.FixtureRequest) -> HFModel:
    arch = request.param
    model = build_tiny_causal_lm(arch, ARCHS[arch], seed=7, dtype=DTYPE).to(DEVICE)
    return HFModel(model, name=f"tiny-{arch}")


@pytest.fixture(scope="module")
def llama() -> HFModel:
    model = build_tiny_llama(ARCHS["llama"], seed=3, dtype=DTYPE).to(DEVICE)
    return HFModel(model, name="tiny-llama")


class Oracle:
    """Reference log-probs from a plain forward pass over the whole context (memoized)."""

    def __init__(self, model: HFModel | FakeModel) -> None:
        self.model = model
        self.memo: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, context: tuple[int, ...]) -> np.ndarray:
        if context not in self.memo:
            self.memo[context] = self._compute(context)
        return self.memo[context]

    def _compute(self, context: tuple[int, ...]) -> np.ndarray:
        if isinstance(self.model, FakeModel):
            return self.model.next_logprobs(context)
        ids = torch.tensor([context], dtype=torch.long, device=self.model.device)  # [1, n]
        with torch.no_grad():
            logits = self.model.model(input_ids=ids, use_cache=False).logits[0, -1]  # [V]
        return torch.log_softmax(logits.double(), dim=-1).cpu().numpy()


def row_error(row: np.ndarray, ref: np.ndarray) -> float:
    """Largest log-prob difference; in half precision the total variation distance (a
    log-prob of a token of probability 1e-6 carries no bf16 digit; docs/cuda.md)."""
    if DTYPE in ("float64", "float32"):
        return float(np.abs(row - ref).max())
    return 0.5 * float(np.abs(np.exp(row) - np.exp(ref)).sum())


def context_of(bos: int | None, trunk: list[int]) -> tuple[int, ...]:
    return ((bos,) if bos is not None else ()) + tuple(trunk)


def distinct_nodes(paths: list[TokenPath]) -> set[TokenPath]:
    return {p[:d] for p in paths for d in range(1, len(p) + 1)}


def needed_keys(ctx: tuple[int, ...], paths: list[TokenPath]) -> set[tuple[int, ...]]:
    """Absolute contexts of every row the cache must hold: trunk prefixes and trie nodes."""
    keys = {ctx[: i + 1] for i in range(len(ctx))}
    return keys | {ctx + p for p in distinct_nodes(paths)}


def check_call(
    session: TreeScoringSession,
    oracle: Oracle,
    bos: int | None,
    trunk: list[int],
    paths: list[TokenPath],
) -> float:
    """Score, compare every row with the oracle, check the cache invariant; max abs error."""
    lp = session.logprobs(trunk, paths)
    ctx = context_of(bos, trunk)
    assert lp.shape == (len(paths), session.vocab_size) and lp.dtype == np.float64
    worst = 0.0
    for path, row in zip(paths, lp, strict=True):
        worst = max(worst, row_error(row, oracle(ctx + path)))
    assert session.cache_len() == session.expected_cache_len()
    assert needed_keys(ctx, paths) <= session.cached_contexts()
    if not session.hold_last_tree:  # else the last tree's nodes may stay too
        assert session.cache_len() == len(ctx) + len(distinct_nodes(paths))
    return worst


def costed_calls(
    session: TreeScoringSession, oracle: Oracle
) -> Callable[[list[int], list[TokenPath], int], None]:
    """call(trunk, paths, cost): one checked call (BOS 1) that must evaluate `cost` tokens."""

    def call(trunk: list[int], paths: list[TokenPath], cost: int) -> None:
        before = session.inference_tokens
        assert check_call(session, oracle, 1, trunk, paths) <= ATOL
        assert session.inference_tokens - before == cost

    return call


def random_tree(rng: random.Random, alphabet: range, size: int = 8) -> list[TokenPath]:
    """Paths of a random trie (depth 1-4, branching), plus () and some inner nodes."""
    nodes: list[TokenPath] = [()]
    for _ in range(size):
        parent = rng.choice([n for n in nodes if len(n) < 4])
        child = parent + (rng.choice(alphabet),)
        if child not in nodes:
            nodes.append(child)
    leaves = [n for n in nodes if not any(m[: len(n)] == n and m != n for m in nodes)]
    inner = rng.sample(nodes, k=min(3, len(nodes)))
    return sorted(set(leaves) | set(inner), key=lambda p: (len(p), p))


SessionFactory = Callable[..., TreeScoringSession]


@pytest.fixture(params=["fake", "hf"])
def make_session(request: pytest.FixtureRequest, llama: HFModel) -> tuple[SessionFactory, Oracle]:
    """A session factory plus its oracle, for tests that both backends must pass."""
    if request.param == "fake":
        fake = FakeModel(ARCHS["llama"], seed=5)
        return fake.session, Oracle(fake)
    return llama.session, Oracle(llama)


# --------------------------------------------------------------------------------------
# exactness: tree attention == sequential forward passes
# --------------------------------------------------------------------------------------


def test_session_types() -> None:
    fake = FakeModel(10).session()
    assert isinstance(fake, ScoringSession)
    assert isinstance(fake, TreeScoringSession)


@pytest.mark.parametrize("bos", [1, None])
def test_tree_matches_sequential(hf_model: HFModel, bos: int | None) -> None:
    """Random trees, cold and on a cached trunk, before and after GC, trunk growth and shrink."""
    oracle, rng = Oracle(hf_model), random.Random(11)
    alphabet = range(3, 9)  # few tokens: shared prefixes, and trunks that run into the tree
    session = hf_model.session(bos_id=bos)
    trunk = [rng.randrange(hf_model.vocab_size) for _ in range(5)]
    worst = check_call(session, oracle, bos, trunk, random_tree(rng, alphabet))  # cold cache
    for _ in range(4):
        paths = random_tree(rng, alphabet)
        worst = max(worst, check_call(session, oracle, bos, trunk, paths))  # cached trunk
        worst = max(worst, check_call(session, oracle, bos, trunk, paths[::2]))  # after GC
        grown = trunk + list(max(paths, key=len)) + [rng.choice(alphabet)]
        worst = max(worst, check_call(session, oracle, bos, grown, random_tree(rng, alphabet)))
        trunk = grown[: len(trunk) + 1]  # backspace over part of the growth
        worst = max(worst, check_call(session, oracle, bos, trunk, random_tree(rng, alphabet)))
    assert worst <= ATOL


def test_kv_rows_after_gc_equal_fresh_computation(hf_model: HFModel) -> None:
    """After many calls, the cache holds the same K/V rows a fresh session computes at once."""
    rng = random.Random(5)
    session = hf_model.session(bos_id=1)
    trunk, paths = [10, 11, 12], [()]
    for _ in range(6):
        trunk = trunk + list(max(paths, key=len))[:1]  # grow into the tree (rows promoted)
        paths = random_tree(rng, range(3, 7))
        session.logprobs(trunk, paths)
    fresh = hf_model.session(bos_id=1)
    fresh.logprobs(trunk, paths)
    assert isinstance(session, HFSession) and isinstance(fresh, HFSession)
    for (k1, v1), (k2, v2) in zip(
        session._kv.layer_tensors(), fresh._kv.layer_tensors(), strict=True
    ):
        assert k1.shape == k2.shape
        assert torch.allclose(k1, k2, atol=10 * ATOL, rtol=0)
        assert torch.allclose(v1, v2, atol=10 * ATOL, rtol=0)


def test_float32_model_is_close() -> None:
    """The mask's fill value works for float32 too (tolerance of float32 arithmetic)."""
    model = HFModel(build_tiny_llama(400, seed=2, dtype="float32").to(DEVICE))
    session, oracle = model.session(bos_id=1), Oracle(model)
    worst = check_call(session, oracle, 1, [5, 6, 7], [(), (8,), (8, 9), (10, 11, 12)])
    worst = max(worst, check_call(session, oracle, 1, [5, 6, 7, 8], [(), (9,), (13,)]))
    assert worst <= 2e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_logits_are_normalized_in_float32(dtype: torch.dtype) -> None:
    """Rows from float32/half logits: float64 arrays equal to the float64 log-softmax of
    the same (rounded) logits within float32 rounding, each summing to one."""
    from midword.engine.model.hf_backend import _to_logprobs

    logits = (torch.randn(3, 50_000, generator=torch.Generator().manual_seed(0)) * 8).to(dtype)
    rows = _to_logprobs(logits)
    exact = logits.double().log_softmax(-1).numpy()
    assert rows.dtype == np.float64 and rows.shape == (3, 50_000)
    assert np.max(np.abs(rows - exact)) < 1e-5
    assert np.allclose(np.exp(rows).sum(-1), 1.0, atol=1e-5)


def test_float64_logits_stay_float64() -> None:
    from midword.engine.model.hf_backend import _to_logprobs

    logits = torch.randn(2, 1000, dtype=torch.float64)
    assert np.array_equal(_to_logprobs(logits), logits.log_softmax(-1).numpy())


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tree_matches_sequential_cuda() -> None:
    model = build_tiny_llama(ARCHS["llama"], seed=3, dtype="float64").to("cuda")
    hf = HFModel(model)
    session, rng = hf.session(bos_id=1), random.Random(4)
    worst = 0.0
    for trunk in ([5, 6], [5, 6, 7, 8], [5]):
        paths = random_tree(rng, range(3, 9))
        lp = session.logprobs(trunk, paths)
        for path, row in zip(paths, lp, strict=True):
            ref = hf.sequence_logprobs([1, *trunk, *path])[-1]
            worst = max(worst, float(np.abs(row - ref).max()))
    assert worst <= ATOL


# --------------------------------------------------------------------------------------
# cache reuse and inference-token accounting (both backends)
# --------------------------------------------------------------------------------------


def test_incremental_reuse(make_session: tuple[SessionFactory, Oracle]) -> None:
    """Only new trunk tokens and new trie nodes are evaluated; GC keeps exactly the tree."""
    factory, oracle = make_session
    s = factory(bos_id=1)

    def call(trunk: list[int], paths: list[TokenPath], cost: int, rows: int) -> None:
        before = s.inference_tokens
        assert check_call(s, oracle, 1, trunk, paths) <= ATOL
        assert (s.inference_tokens - before, s.cache_len()) == (cost, rows)

    call([5, 6, 7], [(), (8,), (8, 9), (10,)], cost=7, rows=7)  # bos + 3 trunk + 3 nodes
    call([5, 6, 7], [(), (8,), (8, 9), (10,)], cost=0, rows=7)  # same question: all cached
    call([5, 6, 7], [(8, 9)], cost=0, rows=6)  # GC drops (10,)
    call([5, 6, 7], [(8,)], cost=0, rows=5)  # an inner node asked on its own: cached
    call([5, 6, 7], [(8, 9)], cost=1, rows=6)  # (8, 9) was collected: evaluated again
    call([5, 6, 7, 8], [(), (9,), (11,)], cost=1, rows=7)  # trunk grows into (8,): only (11,)
    call([5, 6, 7, 8, 9, 12], [()], cost=1, rows=7)  # promote 9, evaluate 12
    call([5, 6, 7, 8, 9], [(), (12,)], cost=0, rows=7)  # backspace: 12 becomes a node again
    call([5, 6, 7], [(), (8,), (8, 9)], cost=0, rows=6)  # backspace two: trunk rows demoted
    call([5, 6], [()], cost=0, rows=3)
    call([5, 6, 20, 21], [(22,), (22, 23)], cost=4, rows=7)  # divergence: 20, 21, 22, 23


def test_long_backspace_reevaluates_trunk_end(make_session: tuple[SessionFactory, Oracle]) -> None:
    """Log-probs are kept for the last `trunk_logits_window` trunk rows only.

    A row whose K/V is cached but whose log-probs were dropped (or never computed)
    is evaluated again when its log-probs are asked for, and only then.
    """
    factory, oracle = make_session
    s = factory(bos_id=1, trunk_logits_window=2)

    call = costed_calls(s, oracle)
    trunk = list(range(10, 30))
    call(trunk, [()], cost=21)  # log-probs computed for the last 2 trunk rows only
    call(trunk[:19], [()], cost=0)  # within the window: free
    call(trunk[:5], [(15, 16)], cost=1)  # old trunk rows as nodes: (15,) reused, (15, 16) redone
    call(trunk[:6], [()], cost=1)  # the trunk grew into (15,), whose log-probs were never kept
    call(trunk[:5], [(), (7,)], cost=2)  # the trunk end again, and the new node
    call(trunk[:5], [(30,)], cost=1)  # no () asked: nothing redone
    for n in range(6, 12):  # type one token at a time: each trunk end gets log-probs
        call(trunk[:n], [()], cost=1)
    call(trunk[:10], [()], cost=0)  # still in the window
    call(trunk[:7], [()], cost=1)  # fell out of the window: evaluated again


def test_last_tree_keeps_its_log_probs_through_a_completion(
    make_session: tuple[SessionFactory, Oracle],
) -> None:
    """The editor's loop: a keystroke scores a tree, a completion grows the trunk by more
    than the log-prob window, the next keystroke asks the same trunk again. The tree's
    trunk end and the node the trunk grew into keep their log-probs (pinned) until a newer
    tree's rows take their place."""
    factory, oracle = make_session
    s = factory(bos_id=1, trunk_logits_window=2)

    call = costed_calls(s, oracle)
    trunk = [5, 6, 7]
    call(trunk, [(), (8,), (8, 9), (10,)], cost=7)
    grown = [*trunk, 8]
    call(grown, [()], cost=0)  # the trunk grew into (8,)
    for token in (11, 12, 13, 14, 15):  # generated one at a time
        grown.append(token)
        call(grown, [()], cost=1)
    call(trunk, [(), (8,), (8, 9)], cost=1)  # only (8, 9), which the completion dropped
    call(grown[:5], [()], cost=1)  # an unpinned row out of the window: evaluated again

    call(grown[:4], [(), (9,)], cost=1)  # a newer tree: its rows are pinned instead
    for n in range(5, 9):
        call([*grown[:4], 9, 20, 21, 22][:n], [()], cost=0 if n == 5 else 1)
    call(grown[:4], [()], cost=0)  # the newer tree's trunk end
    call(trunk, [()], cost=1)  # the older tree's: no longer pinned, out of the window


def test_held_nodes_of_the_last_tree() -> None:
    """On a session that holds the last tree (llama.cpp's), a completion keeps the tree's
    nodes: the next keystroke's tree costs nothing, even where the completion began with
    one of the nodes (its children hang under the trunk then). A trunk that leaves their
    context drops them; a newer tree replaces them."""
    model = FakeModel(ARCHS["llama"], seed=5)
    oracle = Oracle(model)
    s = model.session(bos_id=1, trunk_logits_window=2, hold_last_tree=True)

    call = costed_calls(s, oracle)
    trunk, tree = [5, 6, 7], [(), (8,), (8, 9), (10,)]
    call(trunk, tree, cost=7)
    for n in range(1, 5):  # a completion that starts off the tree
        call([*trunk, 20, 21, 22, 23][: 3 + n], [()], cost=1)
    assert s.cache_len() == 4 + 4 + 3  # bos, trunk, the completion, 3 held nodes
    call(trunk, tree, cost=0)
    for n in range(1, 4):  # one that starts with the node (8,)
        call([*trunk, 8, 11, 12][: 3 + n], [()], cost=0 if n == 1 else 1)
    call(trunk, tree, cost=0)
    call([*trunk, 30], [(), (31,)], cost=2)  # a newer tree: the older one is not held
    call([*trunk, 30, 32, 33], [()], cost=2)
    call(trunk, tree, cost=4)  # only the trunk end stayed (a trunk row)
    call([5, 40], [()], cost=1)  # the trunk leaves the tree's context
    assert s._held == {} and s.cache_len() == 3


@pytest.mark.parametrize("backend_kind", ["fake", "fake-holding", "hf"])
def test_random_walk_invariants(backend_kind: str, llama: HFModel) -> None:
    """50 random edits (type, backspace, retype, generate, re-ask): exact, and cost =
    missing rows. A session that holds the last tree's nodes (as llama.cpp's does) must
    hold some, and what it holds must be what it says."""
    model: HFModel | FakeModel = llama if backend_kind == "hf" else FakeModel(1000, seed=9)
    oracle, rng = Oracle(model), random.Random(2024)
    reused_held = 0
    for bos in (None, 1):
        session = model.session(bos_id=bos, trunk_logits_window=10**9)
        session.hold_last_tree = backend_kind == "fake-holding"
        trunk: list[int] = [40, 41]
        for _ in range(50):
            trunk = random_edit(rng, trunk)
            paths = random_tree(rng, range(3, 7), size=rng.randrange(0, 8))
            if rng.random() < 0.3:  # a completion: the trunk grows one token at a time
                paths = [()]
            if not trunk and bos is None:
                paths = [p for p in paths if p]
            ctx = context_of(bos, trunk)
            need, cached = needed_keys(ctx, paths), session.cached_contexts()
            held = {ctx[:anchor] + p for anchor, p in session._held}
            before = session.inference_tokens
            assert check_call(session, oracle, bos, trunk, paths) <= ATOL
            assert session.inference_tokens - before == len(need - cached)
            reused_held += len(need & held)
    assert (reused_held > 0) == (backend_kind == "fake-holding")


def random_edit(rng: random.Random, trunk: list[int]) -> list[int]:
    r = rng.random()
    if r < 0.35:
        return trunk + [rng.randrange(3, 7) for _ in range(rng.randrange(1, 3))]
    if r < 0.6:
        return trunk[: max(0, len(trunk) - rng.randrange(1, 4))]
    if r < 0.7:
        return trunk[: max(0, len(trunk) - 2)] + [rng.randrange(3, 7)]
    return trunk


def test_empty_context(make_session: tuple[SessionFactory, Oracle]) -> None:
    factory, oracle = make_session
    s = factory(bos_id=None)
    with pytest.raises(ValueError, match="needs a context"):
        s.logprobs([], [()])
    assert check_call(s, oracle, None, [], [(5,), (5, 6)]) <= ATOL  # first token has no context
    assert s.logprobs([5], []).shape == (0, s.vocab_size)
    assert s.cache_len() == 1


def test_reset(make_session: tuple[SessionFactory, Oracle]) -> None:
    factory, oracle = make_session
    s = factory(bos_id=1)
    check_call(s, oracle, 1, [5, 6], [(7,)])
    s.reset()
    assert s.cache_len() == 0 and s.inference_tokens == 4
    assert check_call(s, oracle, 1, [5, 6], [(7,)]) <= ATOL
    assert s.inference_tokens == 8


# --------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trunk", "paths", "message"),
    [
        ([5, 1000], [()], "token id 1000 in trunk is out of range"),
        ([5, -1], [()], "token id -1 in trunk is out of range"),
        ([5], [(3, 1000)], "token id 1000 in path is out of range"),
        ([5.0], [()], "integer token ids"),
    ],
)
def test_token_out_of_range(
    make_session: tuple[SessionFactory, Oracle], trunk: list[Any], paths: list[Any], message: str
) -> None:
    factory, _ = make_session
    s = factory(bos_id=1)
    with pytest.raises(ValueError, match=message):
        s.logprobs(trunk, paths)
    with pytest.raises(ValueError, match="in bos_id is out of range"):
        factory(bos_id=1000)


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="model directory not found"):
        load_hf_model(tmp_path / "nope")


def test_dir_without_config(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(
        BackendError, match=r"not a Hugging Face model directory \(no config.json\)"
    ):
        load_hf_model(tmp_path)


def test_dir_that_is_not_a_causal_lm(tmp_path: Path) -> None:
    from transformers import ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    with pytest.raises(BackendError, match=r"not a causal language model \(model_type=vit\)"):
        load_hf_model(tmp_path)


def test_config_without_weights(tmp_path: Path) -> None:
    build_tiny_llama(300).config.save_pretrained(tmp_path)
    with pytest.raises(BackendError, match="could not load model"):
        load_hf_model(tmp_path)


def test_uncached_hub_id() -> None:
    with pytest.raises(BackendError, match="downloads are disabled"):
        load_hf_model("midword-test/no-such-model")


def test_bad_dtype(tmp_path: Path) -> None:
    build_tiny_llama(300, tmp_path)
    with pytest.raises(ValueError, match="unknown dtype"):
        load_hf_model(tmp_path, dtype="int8")


def test_load_saved_model(tmp_path: Path) -> None:
    """A saved tiny model loads from its directory and scores exactly in float64."""
    build_tiny_causal_lm("qwen3", 300, tmp_path, seed=1)
    model = load_hf_model(tmp_path, device="cpu", dtype="float64")
    assert (model.vocab_size, model.dtype, model.device.type) == (300, torch.float64, "cpu")
    assert check_call(model.session(bos_id=1), Oracle(model), 1, [5, 6], [(), (7, 8)]) <= ATOL


def test_model_error_is_backend_error_and_resets(
    llama: HFModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, oracle = llama.session(bos_id=1), Oracle(llama)
    check_call(session, oracle, 1, [5, 6], [(7,)])

    def out_of_memory(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    monkeypatch.setattr(llama.model, "forward", out_of_memory)
    with pytest.raises(BackendError, match=r"^model forward failed: RuntimeError: CUDA out of mem"):
        session.logprobs([5, 6, 8], [()])  # 8 needs a forward pass
    assert session.cache_len() == 0  # a half-updated cache is dropped
    monkeypatch.undo()
    assert check_call(session, oracle, 1, [5, 6, 7], [()]) <= ATOL


# --------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------


def test_kvcache_select_rows(llama: HFModel) -> None:
    kv = KVCache()
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]], device=llama.device)  # [1, 6]
    with torch.no_grad():
        llama.model(input_ids=ids, **kv.forward_kwargs(llama.model), use_cache=True)
    assert len(kv) == 6
    before = [(k.clone(), v.clone()) for k, v in kv.layer_tensors()]
    kv.select_rows([0, 1, 2, 3, 4, 5])  # identity: no-op
    kv.select_rows([0, 1, 4, 2])
    assert len(kv) == 4
    for (k0, v0), (k1, v1) in zip(before, kv.layer_tensors(), strict=True):
        assert torch.equal(k1, k0[:, :, [0, 1, 4, 2]]) and torch.equal(v1, v0[:, :, [0, 1, 4, 2]])
    kv.select_rows([0, 1])  # a prefix: crop
    assert len(kv) == 2
    with pytest.raises(IndexError):
        kv.select_rows([0, 2])
    kv.check_layers()


def test_attention_mask_of_a_tree_on_a_kept_trunk() -> None:
    """Kept rows: trunk t0 t1, node a. New: node b (sibling of a), node c (child of a)."""
    step = ForwardStep(
        keep=np.array([0, 1, 2]),
        tokens=np.array([7, 8]),
        positions=np.array([2, 3]),
        row_parent=np.array([-1, 0, 1, 1, 2]),
        trunk_rows=np.array([0, 1]),
        logit_queries=np.array([0, 1]),
        order=np.arange(5),
    )
    assert step.attention_mask().astype(int).tolist() == [[1, 1, 0, 1, 0], [1, 1, 1, 0, 1]]


def test_fake_session_sees_only_the_mask() -> None:
    """The fake scores the context its mask shows, so a wrong mask cannot go unnoticed."""
    model = FakeModel(50, seed=1)
    session = model.session(bos_id=0)
    lp = session.logprobs([3, 4], [(5,), (6,), (5, 7)])
    assert np.array_equal(lp[0], model.next_logprobs([0, 3, 4, 5]))
    assert np.array_equal(lp[2], model.next_logprobs([0, 3, 4, 5, 7]))
    assert not np.array_equal(lp[0], lp[1])
    broken = ForwardStep(
        keep=np.zeros(0, np.int64),
        tokens=np.array([3, 5, 6]),
        positions=np.array([0, 1, 1]),
        row_parent=np.array([-1, 0, 1]),  # 6 hangs off 5 but sits at 5's position
        trunk_rows=np.array([0]),
        logit_queries=np.array([2]),
        order=np.arange(3),
    )
    with pytest.raises(AssertionError, match="not a single context"):
        model.session()._apply(broken)


def test_backend_doctests() -> None:
    results = [doctest.testmod(module) for module in (backend, forward_plan, fake)]
    assert sum(r.failed for r in results) == 0 and sum(r.attempted for r in results) > 10


def test_backend_import_is_light() -> None:
    """`import midword.engine.model.backend` imports neither torch nor transformers."""
    code = (
        "import sys, midword.engine.model.backend\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
