"""KV cache layers that grow in place (engine/model/kvcache.py) give the plain cache's numbers.

The plain transformers `DynamicLayer` concatenates the whole layer on every append; ours
writes the new rows into a buffer with spare capacity. The same random sequences of
appends, row selections (prefix crops, compactions, full gathers) and resets, on the
growing cache and on the plain one, must give bitwise equal logits and cached rows
(float64), for every architecture of the matrix; within capacity the buffer must stay
where it is (the point of it), and grow geometrically, in a few sizes, when it fills.

Tests marked ``cuda`` run the same comparison on a GPU (skipped elsewhere;
MIDWORD_GPU_TEST_DEVICE=cpu dry-runs them on the CPU).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from midword.engine.model import kvcache  # noqa: E402
from midword.engine.model.hf_backend import HFModel, HFSession  # noqa: E402
from midword.engine.model.kvcache import GROWTH, ROW_BLOCK, KVCache  # noqa: E402

from .test_architectures import CONFIGS, build, random_tree  # noqa: E402

GPU = os.environ.get("MIDWORD_GPU_TEST_DEVICE", "cuda")
cuda_only = pytest.mark.skipif(
    GPU == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU"
)
VOCAB = 300  # token ids drawn here stay below this


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run faster single-threaded (and leave the shared cores alone)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------------------
# driving a growing and a plain cache through the same random operations
# --------------------------------------------------------------------------------------


class Twin:
    """A growing and a plain cache of one model, fed the same operations."""

    def __init__(self, model: Any, device: str) -> None:
        self.model, self.device = model, device
        self.growing, self.plain = KVCache(), KVCache(grow_in_place=False)
        assert self.growing.grows_in_place and not self.plain.grows_in_place

    def append(self, rng: random.Random, inference: bool) -> None:
        """A forward pass of 1..300 new tokens on both; logits and rows equal."""
        count = rng.choice([1, 1, 2, 3, 7, 31, 120, ROW_BLOCK + 44])
        held = len(self.plain)
        ids = torch.tensor([[rng.randrange(3, VOCAB) for _ in range(count)]], device=self.device)
        positions = torch.arange(held, held + count, device=self.device)[None]  # [1, count]
        logits = [self._forward(kv, ids, positions, inference) for kv in self.caches()]
        assert_same(*logits)
        self.check_rows()

    def select(self, rows: list[int], inference: bool) -> None:
        with torch.inference_mode() if inference else torch.no_grad():
            for kv in self.caches():
                kv.select_rows(rows)
        self.check_rows()

    def caches(self) -> tuple[KVCache, KVCache]:
        return self.growing, self.plain

    def check_rows(self) -> None:
        assert len(self.growing) == len(self.plain)
        layers = zip(self.growing.layer_tensors(), self.plain.layer_tensors(), strict=True)
        for (k1, v1), (k2, v2) in layers:
            if k2 is None:  # reset and not filled again
                assert k1 is None and v1 is None and v2 is None
                continue
            assert_same(k1, k2)
            assert_same(v1, v2)

    def _forward(self, kv: KVCache, ids: Any, positions: Any, inference: bool) -> Any:
        with torch.inference_mode() if inference else torch.no_grad():
            out = self.model(
                input_ids=ids,
                position_ids=positions,
                use_cache=True,
                **kv.forward_kwargs(self.model),
            )
        return out.logits


def assert_same(a: Any, b: Any) -> None:
    """Bitwise equal tensors (the growing cache does the same arithmetic on the same rows)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    if not torch.equal(a, b):
        diff = (a.double() - b.double()).abs().max().item()
        raise AssertionError(f"tensors differ by up to {diff:.3g}")


def random_rows(rng: random.Random, held: int) -> tuple[str, list[int]]:
    """Rows to keep of `held`: a prefix crop, a compaction (a prefix, then later rows in
    any order) or a full gather (any rows in any order, usually not starting at row 0)."""
    kind = rng.choice(["crop", "compact", "compact", "gather"])
    if kind == "crop":
        return kind, list(range(rng.randrange(held + 1)))
    if kind == "compact":
        head = rng.randrange(1, held + 1)
        later = rng.sample(range(head, held), rng.randrange(held - head + 1))
        return kind, [*range(head), *later]
    return kind, rng.sample(range(held), rng.randrange(1, held + 1))


def run_random_operations(twin: Twin, seed: int, steps: int) -> list[str]:
    """`steps` random appends, selections and resets (in or out of inference mode); the
    kinds done, so a test can check that it covered them."""
    rng, done = random.Random(seed), []
    for _ in range(steps):
        held = len(twin.plain)
        kind = rng.choice(["append"] * 4 + ["select"] * 3 + ["reset"])
        inference = rng.random() < 0.7
        if kind == "append" or held == 0:
            twin.append(rng, inference)
            done.append("append")
        elif kind == "select":
            what, rows = random_rows(rng, held)
            twin.select(rows, inference)
            done.append(what)
        else:
            # inside inference mode: transformers 5.17 zeroes the rows in place (5.24
            # drops them), which rows made in inference mode allow only there
            with torch.inference_mode():
                for kv in twin.caches():
                    kv.hf.reset()
            twin.check_rows()
            done.append("reset")
    return done


@pytest.fixture(scope="module")
def llama() -> Any:
    return build("llama", seed=3, device="cpu", dtype="float64")


def test_random_operations_give_the_plain_caches_logits(llama: Any) -> None:
    twin = Twin(llama, "cpu")
    done = run_random_operations(twin, seed=1, steps=80)
    assert {"append", "crop", "compact", "gather", "reset"} <= set(done)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_every_architecture_gives_the_plain_caches_logits(arch: str) -> None:
    """Sliding windows (the model's own mask over the rows), multi-query (gpt_bigcode),
    latent attention with keys and values of different widths (deepseek_v3), experts."""
    twin = Twin(build(arch, seed=5, device="cpu", dtype="float64"), "cpu")
    run_random_operations(twin, seed=2, steps=14)


class PlainSession(HFSession):
    """An HFSession on the plain transformers cache (the behaviour before growth)."""

    def __init__(self, model: HFModel, bos_id: int | None = None) -> None:
        super().__init__(model, bos_id)
        self._kv = KVCache(grow_in_place=False)

    def _clear(self) -> None:
        super()._clear()
        self._kv = KVCache(grow_in_place=False)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma2", "gpt_bigcode", "deepseek_v3"])
def test_sessions_score_trees_the_same_on_either_cache(arch: str) -> None:
    """The engine's use: trees on a trunk that grows, is edited, is backspaced, resets."""
    model = HFModel(build(arch, seed=7, device="cpu", dtype="float64"), name=f"tiny-{arch}")
    growing, plain = model.session(bos_id=1), PlainSession(model, bos_id=1)
    assert growing._kv.grows_in_place and not plain._kv.grows_in_place
    rng = random.Random(4)
    trunk = [rng.randrange(10, VOCAB) for _ in range(40)]
    for round_ in range(12):
        paths = random_tree(rng, size=rng.randrange(2, 10), deep=rng.choice([0, 9]))
        rows = [s.logprobs(trunk, paths) for s in (growing, plain)]
        assert np.array_equal(rows[0], rows[1]), (arch, round_)
        assert growing.cache_len() == plain.cache_len()
        trunk = edited(rng, trunk, max(paths, key=len))
        if round_ == 7:
            growing.reset()
            plain.reset()


def edited(rng: random.Random, trunk: list[int], path: tuple[int, ...]) -> list[int]:
    """The trunk after typing into the tree, a backspace, an edit further up, or a paste."""
    kind = rng.choice(["type", "backspace", "edit", "paste"])
    if kind == "type":
        return trunk + list(path) + [rng.randrange(10, VOCAB)]
    if kind == "backspace":
        return trunk[: max(1, len(trunk) - rng.randrange(1, 4))]
    if kind == "edit":
        cut = rng.randrange(1, len(trunk))
        return trunk[:cut] + [rng.randrange(10, VOCAB)] + trunk[cut + 1 :]
    return trunk + [rng.randrange(10, VOCAB) for _ in range(rng.randrange(30, 80))]


# --------------------------------------------------------------------------------------
# capacity: reused while it lasts, grown geometrically, given back after a big crop
# --------------------------------------------------------------------------------------


def test_appends_within_capacity_write_into_the_same_buffer(llama: Any) -> None:
    kv = KVCache()
    with torch.inference_mode():
        llama(input_ids=torch.tensor([[1, 5, 6]]), **kv.forward_kwargs(llama), use_cache=True)
        where = [(k.data_ptr(), v.data_ptr()) for k, v in kv.layer_tensors()]
        for token in range(7, 27):
            llama(input_ids=torch.tensor([[token]]), **kv.forward_kwargs(llama), use_cache=True)
            assert [(k.data_ptr(), v.data_ptr()) for k, v in kv.layer_tensors()] == where
        kv.select_rows([0, 1, 2, 9, 4])  # a compaction stays in the buffer too
        llama(input_ids=torch.tensor([[8]]), **kv.forward_kwargs(llama), use_cache=True)
        assert [(k.data_ptr(), v.data_ptr()) for k, v in kv.layer_tensors()] == where
        kv.select_rows([5, 0, 3, 1])  # and a full gather (no kept prefix)
        llama(input_ids=torch.tensor([[9]]), **kv.forward_kwargs(llama), use_cache=True)
    assert [(k.data_ptr(), v.data_ptr()) for k, v in kv.layer_tensors()] == where
    assert len(kv) == 5 and kv.capacity() == ROW_BLOCK


def random_rows_tensor(gen: Any, count: int, dtype: Any = None) -> Any:
    """[1, 2, count, 4] keys or values."""
    return torch.randn(1, 2, count, 4, generator=gen, dtype=dtype or torch.float64)


def test_growth_is_geometric_in_few_sizes_and_equals_concatenation() -> None:
    """Two thousand one-row appends: a handful of buffers, sizes multiples of ROW_BLOCK
    growing by GROWTH; the rows are the plain cache's."""
    growing, plain = KVCache(), KVCache(grow_in_place=False)
    gen = torch.Generator().manual_seed(0)
    capacities = []
    for _ in range(2000):
        k, v = random_rows_tensor(gen, 1), random_rows_tensor(gen, 1)
        out = growing.hf.update(k, v, 0)
        assert all(torch.equal(a, b) for a, b in zip(out, plain.hf.update(k, v, 0), strict=True))
        if not capacities or capacities[-1] != growing.capacity():
            capacities.append(growing.capacity())
    assert capacities[0] == ROW_BLOCK and len(capacities) <= 8, capacities
    assert all(c % ROW_BLOCK == 0 for c in capacities)
    assert all(b >= GROWTH * a for a, b in zip(capacities, capacities[1:], strict=False))


def test_buffers_stop_at_the_positions_the_model_takes() -> None:
    """``max_rows``: no spare rows past the model's positions (x1.5 growth would make 768
    rows for a 512-position model), unless more rows must be held."""
    capped, plain = KVCache(max_rows=600), KVCache(grow_in_place=False)
    gen = torch.Generator().manual_seed(1)
    capacities = []
    for _ in range(700):
        k, v = random_rows_tensor(gen, 1), random_rows_tensor(gen, 1)
        out = capped.hf.update(k, v, 0)
        assert all(torch.equal(a, b) for a, b in zip(out, plain.hf.update(k, v, 0), strict=True))
        capacities.append(capped.capacity())
    assert max(capacities[:600]) == 600  # 256, 512, then 600 (not 768)
    assert capacities[-1] == 700  # past the positions: exactly what must be held


def test_a_large_buffer_cropped_short_is_replaced_by_a_small_one() -> None:
    kv, gen = KVCache(), torch.Generator().manual_seed(1)
    keys = random_rows_tensor(gen, 5000)
    kv.hf.update(keys, -keys, 0)
    assert kv.capacity() == 5120
    kv.select_rows(range(10))
    new = random_rows_tensor(gen, 1)
    kv.hf.update(new, -new, 0)
    assert kv.capacity() == ROW_BLOCK
    ((k, v),) = kv.layer_tensors()
    assert torch.equal(k, torch.cat([keys[..., :10, :], new], dim=-2)) and torch.equal(v, -k)


def test_inference_tensors_appended_outside_inference_mode_move_to_a_new_buffer() -> None:
    """A buffer made in inference mode cannot be written outside it: the rows move."""
    kv, gen = KVCache(), torch.Generator().manual_seed(2)
    first, second = random_rows_tensor(gen, 3), random_rows_tensor(gen, 2)
    with torch.inference_mode():
        kv.hf.update(first, first, 0)
    before = kv.layer_tensors()[0][0].data_ptr()
    with torch.no_grad():
        keys, _ = kv.hf.update(second, second, 0)
    assert keys.data_ptr() != before and not keys.is_inference()
    assert torch.equal(keys, torch.cat([first, second], dim=-2))


def test_inputs_with_autograd_history_take_the_plain_path() -> None:
    kv, gen = KVCache(), torch.Generator().manual_seed(3)
    first = random_rows_tensor(gen, 2)
    kv.hf.update(first, first, 0)
    second = random_rows_tensor(gen, 1).requires_grad_()
    keys, _ = kv.hf.update(second, second, 0)
    assert keys.requires_grad and kv.hf.layers[0]._key_buffer is None  # cat, as before
    assert torch.equal(keys.detach(), torch.cat([first, second.detach()], dim=-2))


# --------------------------------------------------------------------------------------
# another transformers: the plain layer, not other numbers
# --------------------------------------------------------------------------------------


def test_the_probe_accepts_this_transformers_dynamic_layer() -> None:
    from transformers.cache_utils import DynamicLayer

    assert kvcache._growing_layer_class() is not None
    growing = type("Growing", (kvcache._GrowInPlace, DynamicLayer), {"_layer_type": None})
    assert kvcache._behaves_like(growing, DynamicLayer)


def test_the_probe_refuses_a_layer_whose_update_does_more() -> None:
    """A future DynamicLayer that keeps extra state on update: subclassing would skip it."""
    from transformers.cache_utils import DynamicLayer

    class Counting(DynamicLayer):
        _layer_type = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            self.appended = getattr(self, "appended", 0) + key_states.shape[-2]
            return super().update(key_states, value_states, *args, **kwargs)

    growing = type("Growing", (kvcache._GrowInPlace, Counting), {"_layer_type": None})
    assert not kvcache._behaves_like(growing, Counting)


def test_without_the_expected_api_the_cache_is_the_plain_one(
    llama: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.cache_utils import DynamicLayer

    class OldLayout:  # transformers before 4.56: lists of tensors, no layers
        key_cache: list[Any] = []

    assert not kvcache._install_growing_layers(OldLayout())
    monkeypatch.setattr(kvcache, "_growing_layer_class", lambda: None)
    kv = KVCache()
    with torch.inference_mode():
        llama(input_ids=torch.tensor([[1, 5, 6]]), **kv.forward_kwargs(llama), use_cache=True)
    assert not kv.grows_in_place and type(kv.hf.layers[0]) is DynamicLayer
    assert len(kv) == kv.capacity() == 3


# --------------------------------------------------------------------------------------
# on a GPU
# --------------------------------------------------------------------------------------


@pytest.mark.cuda
@cuda_only
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_random_operations_on_the_gpu(dtype: str) -> None:
    """Buffers live on the tensors' device and dtype; the same numbers as the plain cache."""
    twin = Twin(build("llama", seed=3, device=GPU, dtype=dtype), GPU)
    run_random_operations(twin, seed=6, steps=40)
    keys = twin.growing.layer_tensors()[0][0]
    buffer = twin.growing.hf.layers[0]._key_buffer
    assert buffer is None or (buffer.device == keys.device and buffer.dtype == keys.dtype)
