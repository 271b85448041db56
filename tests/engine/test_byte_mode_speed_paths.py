"""The fast paths behind byte mode's speed keep the old results: in-place KV garbage
collection, read-only log-prob rows handed out without a copy, next-byte sums in
probability space (with the log-domain fallback for tiny terms), the hand-made draw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from midword.engine.model.fake import FakeModel
from midword.engine.sample import sampling
from midword.engine.sample.generate import _pick
from midword.engine.sample.sampling import ByteSampler
from midword.engine.sample.transform import Transform

torch = pytest.importorskip("torch")
from midword.engine.model.kvcache import KVCache  # noqa: E402

from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def llama():
    return build_tiny_llama(300, seed=1, dtype="float64")


def _filled(llama, inference: bool) -> KVCache:
    kv = KVCache()
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 10]])  # [1, 7]
    with torch.inference_mode() if inference else torch.no_grad():
        llama(input_ids=ids, **kv.forward_kwargs(llama), use_cache=True)
    return kv


@pytest.mark.parametrize("inference", [True, False])
def test_gc_keeps_the_head_in_place_and_moves_the_rest(llama, inference: bool) -> None:
    kv = _filled(llama, inference)
    before = [(k.clone(), v.clone()) for k, v in kv.layer_tensors()]
    head_ptr = kv.layer_tensors()[0][0].data_ptr()
    rows = [0, 1, 2, 6, 4]
    with torch.inference_mode():
        kv.select_rows(rows)
    assert kv.layer_tensors()[0][0].data_ptr() == head_ptr  # the head was not copied
    for (k0, v0), (k1, v1) in zip(before, kv.layer_tensors(), strict=True):
        assert torch.equal(k1, k0[:, :, rows]) and torch.equal(v1, v0[:, :, rows])


def test_gc_outside_inference_mode_copies_inference_tensors(llama) -> None:
    kv = _filled(llama, inference=True)
    before = [k.clone() for k, _ in kv.layer_tensors()]
    kv.select_rows([0, 3, 1])  # inference tensors cannot be written here: index_select
    for k0, (k1, _) in zip(before, kv.layer_tensors(), strict=True):
        assert torch.equal(k1, k0[:, :, [0, 3, 1]])


def test_logprob_rows_are_the_logprobs_read_only() -> None:
    model = FakeModel(50, seed=2)
    rows = model.session(bos_id=0).logprob_rows([3, 4], [(), (5,), (5, 6)])
    matrix = model.session(bos_id=0).logprobs([3, 4], [(), (5,), (5, 6)])
    assert np.array_equal(np.stack(rows), matrix)
    assert not any(r.flags.writeable for r in rows) and matrix.flags.writeable
    with pytest.raises(ValueError):
        rows[0][0] = 0.0


@pytest.fixture(scope="module")
def sampler():
    from midword.engine import load_engine

    engine = load_engine(str(ROOT / "models" / "default"))
    out = ByteSampler(FakeModel(engine.tok.size, seed=4, scale=3.0), engine)
    out.reset(b"    def run(self, ar")
    return out


@pytest.mark.parametrize("transform", [Transform(), Transform(top_k=20), Transform(0.5)])
def test_linear_sums_equal_log_sums(sampler, transform: Transform) -> None:
    sc = sampler._score(transform)
    fast = sampling._linear_sums(sc, sampler._bytes)
    exact = sampling._log_sums(sc, sampler._bytes)
    assert fast is not None
    assert np.array_equal(np.isfinite(fast[0]), np.isfinite(exact[0]))
    finite = np.isfinite(exact[0])
    assert np.allclose(fast[0][finite], exact[0][finite], atol=1e-12, rtol=0)
    assert fast[1] == exact[1] or abs(fast[1] - exact[1]) < 1e-12  # both -inf: top-k


def test_tiny_terms_take_the_log_domain_path(sampler) -> None:
    sc = sampler._score()
    tiny = sampling._ScoredTree(sc.tree, sc.node_lp - 700.0, sc.rows, sc.offsets)  # e^-700 and less
    assert sampling._linear_sums(tiny, sampler._bytes) is None
    sums, mass = sampling._aggregate(tiny, sampler._bytes)
    exact = sampling._log_sums(sc, sampler._bytes)
    finite = np.isfinite(exact[0])
    assert np.allclose(sums[finite], exact[0][finite] - 700.0, atol=1e-9, rtol=0)
    assert abs(mass - (exact[1] - 700.0)) < 1e-9


def test_pick_draws_what_rng_choice_draws() -> None:
    for seed in range(200):
        logp = np.log(np.random.default_rng(seed).dirichlet(np.full(40, 0.3)))
        p = np.exp(logp - logp.max())
        want = np.random.default_rng(seed + 1).choice(40, p=p / p.sum())
        assert _pick(logp, False, np.random.default_rng(seed + 1)) == want
