"""The tree mask on every causal-LM architecture code users run.

A covering tree is scored in one forward pass, with a tree mask over a cached trunk.
For tiny random models built from the config of each architecture in
`VERIFIED_ARCHITECTURES`, that must equal plain forward passes over each whole context
(float64, 1e-9 on log-probabilities): on a cold cache, on a cached trunk, after the
trunk grows into the tree and after a backspace, with prompts and tree paths longer
than the sliding window (window 6 here), and on the KV cache left behind by a long
byte-mode run (garbage-collected at every byte). Architectures the tree mask would be
wrong for are refused at load, and the tests show the numbers they would give.

The device and dtype come from MIDWORD_TEST_DEVICE / MIDWORD_TEST_DTYPE (default cpu,
float64); benchmarks/cuda_check.sh runs this file on a GPU in float32 and bfloat16,
where "equal" follows the half-precision policy of docs/cuda.md (`assert_close`).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from midword.engine.errors import BackendError, ForwardStopped
from midword.engine.model.backend import TokenPath

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from midword.engine.model.hf_backend import CAUSAL_PREFILL_MIN, HFModel, HFSession  # noqa: E402
from midword.engine.model.hf_loading import load_hf_model  # noqa: E402
from midword.engine.model.tree_mask import (  # noqa: E402
    VERIFIED_ARCHITECTURES,
    TreeMaskPlan,
    tree_mask_plan,
)

DEVICE = os.environ.get("MIDWORD_TEST_DEVICE", "cpu")
DTYPE = os.environ.get("MIDWORD_TEST_DTYPE", "float64")
WINDOW = 6  # sliding window of the sliding layers: prompts and tree paths run past it
VOCAB = 4224  # the byte-mode run's tokenizer (the shipped model's, 4,096 ids) and spare ids
TOLERANCE = {"float64": 1e-9, "float32": 2e-4, "bfloat16": 0.03, "float16": 0.01}

_SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    initializer_range=0.2,  # far from uniform: numeric mistakes show
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
_GPT = dict(n_embd=32, n_layer=2, n_head=4, n_positions=512)
_MOE = dict(num_experts_per_tok=2, moe_intermediate_size=16)
# model_type -> config overrides of _SMALL: the features real checkpoints of it use
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": dict(sliding_window=WINDOW),
    "qwen2": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
    "qwen3": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
    "starcoder2": dict(sliding_window=WINDOW, use_bias=True),
    "gpt_bigcode": dict(_GPT, multi_query=True),
    "gpt_neox": dict(rotary_pct=0.5),
    "phi3": dict(sliding_window=WINDOW),
    "gemma": dict(head_dim=8),
    "gemma2": dict(
        sliding_window=WINDOW,
        head_dim=8,
        attn_logit_softcapping=3.0,  # small caps: tanh far from linear on these logits
        final_logit_softcapping=2.0,
    ),
    "gemma3_text": dict(
        sliding_window=WINDOW,
        head_dim=8,
        sliding_window_pattern=2,
        attn_logit_softcapping=3.0,
        final_logit_softcapping=2.0,
    ),
    "olmo": {},
    "olmo2": {},
    "granite": dict(
        logits_scaling=2.0,
        residual_multiplier=0.5,
        embedding_multiplier=3.0,
        attention_multiplier=0.3,
    ),
    "gpt2": _GPT,
    "phi": {},
    "qwen2_moe": dict(_MOE, num_experts=4, shared_expert_intermediate_size=32),
    "qwen3_moe": dict(  # Qwen3-Coder-30B-A3B: routed experts only, q/k norms, a window
        _MOE, num_experts=4, decoder_sparse_step=1, use_sliding_window=True, sliding_window=WINDOW
    ),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW),
    "deepseek_v3": dict(  # multi-head latent attention, routed and shared experts
        _MOE,
        num_key_value_heads=4,
        n_routed_experts=4,
        kv_lora_rank=16,
        q_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
    ),
}
_EXPERT_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts")
SLIDING = sorted(a for a, c in CONFIGS.items() if "sliding_window" in c)


def test_every_verified_architecture_is_in_the_matrix() -> None:
    assert sorted(CONFIGS) == sorted(VERIFIED_ARCHITECTURES)


# --------------------------------------------------------------------------------------
# models and the oracle
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run faster single-threaded (and do not fight over shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def build(arch: str, seed: int = 0, device: str = DEVICE, dtype: str = DTYPE) -> Any:
    """A tiny random model of `arch` (the same weights every run, in any dtype)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(arch, **{**_SMALL, **CONFIGS[arch]})
    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if getattr(config, "attn_logit_softcapping", None):
        kwargs["attn_implementation"] = "eager"  # sdpa has no soft-capping
    if dtype == "float64" and any(k in CONFIGS[arch] for k in _EXPERT_COUNTS):
        kwargs["experts_implementation"] = "eager"  # grouped_mm has no float64
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, **kwargs).to(device).eval()
    if dtype == "float64":  # modules kept in float32 on purpose too (deepseek_v3's router)
        model.to(torch.float64)
    return model


@contextlib.contextmanager
def float64_throughout() -> Iterator[None]:
    """Keep float64 where a model computes in float32 on purpose: eager attention's
    softmax (gemma2, gemma3 here) and deepseek_v3's router. Rounded to float32, a sum
    over a longer row (the tree's) differs from the plain pass's in the 7th digit: the
    model's own rounding, not the tree mask's. Float64 is float64 only without it."""
    softmax, tensor_type = torch.nn.functional.softmax, torch.Tensor.type

    def softmax64(x: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
        keep = dtype is torch.float32 and x.dtype == torch.float64
        return softmax(x, dim=dim, dtype=None if keep else dtype)

    def type64(self: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> Any:
        if dtype is torch.float32 and self.dtype == torch.float64:
            return self
        return tensor_type(self, dtype, *args, **kwargs) if dtype is not None else tensor_type(self)

    torch.nn.functional.softmax, torch.Tensor.type = softmax64, type64
    try:
        yield
    finally:
        torch.nn.functional.softmax, torch.Tensor.type = softmax, tensor_type


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def arch_model(request: pytest.FixtureRequest) -> tuple[str, HFModel]:
    return request.param, HFModel(build(request.param, seed=7), name=f"tiny-{request.param}")


@pytest.fixture(autouse=True)
def exact_arithmetic() -> Iterator[None]:
    with float64_throughout() if DTYPE == "float64" else contextlib.nullcontext():
        yield


class Oracle:
    """Log-probs after a context from one plain forward pass over it (no cache, no mask)."""

    def __init__(self, model: HFModel) -> None:
        self.model = model
        self.memo: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, context: tuple[int, ...]) -> np.ndarray:
        if context not in self.memo:
            ids = torch.tensor([context], dtype=torch.long, device=self.model.device)
            last = {"logits_to_keep": 1} if self.model.keeps_logits else {}  # the head's rows
            with torch.inference_mode():
                logits = self.model.model(input_ids=ids, use_cache=False, **last).logits[0, -1]
            self.memo[context] = logits.double().log_softmax(-1).cpu().numpy()
        return self.memo[context]


def row_error(row: np.ndarray, ref: np.ndarray, dtype: str = DTYPE) -> float:
    """Largest log-prob difference (float32/64); in half precision the total variation
    distance of the two distributions (a log-prob of a token of probability 1e-6 carries
    no bf16 digit worth comparing). See docs/cuda.md."""
    if dtype in ("float64", "float32"):
        return float(np.abs(row - ref).max())
    return 0.5 * float(np.abs(np.exp(row) - np.exp(ref)).sum())


def check(
    session: HFSession,
    oracle: Oracle,
    trunk: list[int],
    paths: list[TokenPath],
    dtype: str = DTYPE,
) -> float:
    """Score `paths` on `trunk`; the worst error against the oracle, with the cache size."""
    rows = session.logprobs(trunk, paths)
    ctx = (1, *trunk)
    nodes = {p[:d] for p in paths for d in range(1, len(p) + 1)}
    assert session.cache_len() == len(ctx) + len(nodes)
    errors = [row_error(row, oracle(ctx + p), dtype) for p, row in zip(paths, rows, strict=True)]
    return max(errors)


def random_tree(rng: random.Random, size: int = 8, deep: int = 0) -> list[TokenPath]:
    """A random trie over a few token ids (shared prefixes), plus () and, with `deep`,
    one path of that length (longer than the window: the tree itself slides)."""
    nodes: list[TokenPath] = [()]
    for _ in range(size):
        parent = rng.choice([n for n in nodes if len(n) < 4])
        child = parent + (rng.randrange(3, 9),)
        if child not in nodes:
            nodes.append(child)
    if deep:
        nodes.append(tuple(rng.randrange(3, 9) for _ in range(deep)))
    return sorted(set(nodes), key=lambda p: (len(p), p))


# --------------------------------------------------------------------------------------
# exactness: tree attention == plain forward passes
# --------------------------------------------------------------------------------------


def test_tree_matches_plain_forward_passes(
    arch_model: tuple[str, HFModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cold cache, cached trunk, collected rows, trunk growth into the tree, backspace;
    the prompt and one tree path are longer than the window. Long runs of new trunk
    tokens (a prompt, a paste) go through the model's own causal mask, the tree on top
    through the tree mask: both are checked, cold and on a cached trunk."""
    arch, model = arch_model
    causal_flags = spy_on_forward(monkeypatch)
    oracle, rng = Oracle(model), random.Random(11)
    session = model.session(bos_id=1)
    trunk = [rng.randrange(10, 300) for _ in range(CAUSAL_PREFILL_MIN + 8)]
    worst = check(session, oracle, trunk, random_tree(rng, deep=2 * WINDOW - 4))
    for _ in range(3):
        paths = random_tree(rng, deep=WINDOW + 2)
        worst = max(worst, check(session, oracle, trunk, paths))  # cached trunk
        worst = max(worst, check(session, oracle, trunk, paths[::2]))  # after GC
        grown = trunk + list(max(paths, key=len)) + [rng.randrange(3, 9)]
        worst = max(worst, check(session, oracle, grown, random_tree(rng)))
        trunk = grown[: len(trunk) + 2]  # backspace over part of the growth
        worst = max(worst, check(session, oracle, trunk, random_tree(rng)))
    pasted = [rng.randrange(10, 300) for _ in range(CAUSAL_PREFILL_MIN)]
    worst = max(worst, check(session, oracle, trunk + pasted, [()]))  # causal on the cache
    trunk += pasted + pasted[::-1]
    worst = max(worst, check(session, oracle, trunk, random_tree(rng, deep=WINDOW + 1)))
    assert worst <= TOLERANCE[DTYPE], (arch, worst)
    assert causal_flags.count(True) == 3 and False in causal_flags


@pytest.mark.parametrize("stop_before_layer", [0, 1])
def test_a_pass_stopped_between_layers_leaves_the_session_as_before(
    arch_model: tuple[str, HFModel], stop_before_layer: int
) -> None:
    """A newer request stops a prefill chunk between two layers of its pass: every layer
    is cut back to the rows cached before it (some already hold the chunk's rows), so
    the next call resumes from there and scores as plain forward passes do."""
    arch, model = arch_model
    assert len(model.layers) == 2, f"{arch}: the decoder layers were not found"
    oracle, rng = Oracle(model), random.Random(5)
    session = model.session(bos_id=1)
    trunk = [rng.randrange(10, 300) for _ in range(3 * CAUSAL_PREFILL_MIN)]
    first = check(session, oracle, trunk[:CAUSAL_PREFILL_MIN], random_tree(rng))
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > stop_before_layer

    with session.stop_inside_forward(stop), pytest.raises(ForwardStopped):
        session.logprobs(trunk[: 2 * CAUSAL_PREFILL_MIN], [()])
    assert len(asked) == stop_before_layer + 1  # asked before each layer it reached
    kept = 1 + CAUSAL_PREFILL_MIN  # bos + the first chunk; the tree's rows are dropped
    assert session.cache_len() == session.expected_cache_len() == kept
    assert {keys.shape[-2] for keys, _ in session._kv.layer_tensors()} == {kept}
    assert session.cached_trunk_len(trunk) == CAUSAL_PREFILL_MIN
    evaluated = session.inference_tokens
    resumed = check(session, oracle, trunk, random_tree(rng, deep=WINDOW + 1))
    assert session.inference_tokens > evaluated + CAUSAL_PREFILL_MIN  # the stopped chunk again
    assert max(first, resumed) <= TOLERANCE[DTYPE], (arch, first, resumed)
    assert not any(layer._forward_pre_hooks for layer in model.layers)  # removed on exit


def test_a_first_pass_stopped_starts_the_session_afresh(arch_model: tuple[str, HFModel]) -> None:
    """Stopped in the pass that made the cache's layers: nothing is kept, and the next
    call scores from scratch."""
    arch, model = arch_model
    oracle, rng = Oracle(model), random.Random(6)
    session = model.session(bos_id=1)
    trunk = [rng.randrange(10, 300) for _ in range(CAUSAL_PREFILL_MIN + 5)]
    asked: list[int] = []

    def stop_before_the_second_layer() -> bool:
        asked.append(1)
        return len(asked) > 1

    with session.stop_inside_forward(stop_before_the_second_layer), pytest.raises(ForwardStopped):
        session.logprobs(trunk, [()])
    assert session.cache_len() == session.expected_cache_len() == 0
    assert check(session, oracle, trunk, random_tree(rng)) <= TOLERANCE[DTYPE], arch


def spy_on_forward(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for every forward call of a session, whether it took the causal path."""
    flags: list[bool] = []
    forward = HFSession._forward

    def recorded(self: HFSession, step: Any, causal: bool = False) -> np.ndarray:
        flags.append(causal)
        return forward(self, step, causal)

    monkeypatch.setattr(HFSession, "_forward", recorded)
    return flags


CODE = (
    b"def mean(values: list[float]) -> float:\n"
    b"    total = sum(values)  # one pass\n"
    b"    return total / max(1, len(values))\n"
)


def test_kv_cache_after_a_long_byte_mode_run(arch_model: tuple[str, HFModel]) -> None:
    """Byte mode along 110 bytes of code (an exact next-byte distribution at every byte,
    its tree scored and the cache garbage-collected each time, the trunk far past the
    window): the last tree's log-probs equal plain forward passes, and every cached K/V
    row equals a fresh session's."""
    from midword.engine import ByteSampler

    arch, model = arch_model
    sampler = ByteSampler(model, byte_engine())
    sampler.reset(b"")
    for byte in CODE:
        dist = sampler.next_bytes()
        assert np.isfinite(dist.next[byte]), (arch, byte)
        sampler.push(bytes([byte]))
    sampler.next_bytes()
    session = sampler.session
    assert isinstance(session, HFSession) and session.bos_id is not None
    trunk, paths = list(session._trunk), [(), *session._nodes]  # the last call's question
    assert len(trunk) > 2 * WINDOW and len(paths) > 1
    fresh = model.session(bos_id=session.bos_id)
    fresh.logprobs(trunk, paths)
    for (k1, v1), (k2, v2) in zip(
        session._kv.layer_tensors(), fresh._kv.layer_tensors(), strict=True
    ):
        assert k1.shape == k2.shape and v1.shape == v2.shape
        assert torch.allclose(k1, k2, atol=TOLERANCE[DTYPE] * 10, rtol=0), arch
        assert torch.allclose(v1, v2, atol=TOLERANCE[DTYPE] * 10, rtol=0), arch
    oracle = Oracle(model)
    before = session.inference_tokens
    rows = session.logprobs(trunk, paths)
    assert session.inference_tokens == before  # all cached: no model call
    ctx = (session.bos_id, *trunk)
    worst = max(row_error(r, oracle(ctx + p)) for p, r in zip(paths, rows, strict=True))
    assert worst <= TOLERANCE[DTYPE], (arch, worst)


_ENGINES: dict[str, Any] = {}


def byte_engine() -> Any:
    """The engine of the shipped model's tokenizer (a byte-level BPE of code; loaded once)."""
    from midword.engine import load_engine

    from midword.models import shipped_test_model

    if "engine" not in _ENGINES:
        _ENGINES["engine"] = load_engine(str(shipped_test_model()))
    return _ENGINES["engine"]


# --------------------------------------------------------------------------------------
# the window matters, and what the tree mask cannot take is refused
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", SLIDING)
def test_sliding_window_is_applied(arch: str) -> None:
    """Without the window in the tree mask, a prompt past the window gives wrong numbers
    (so the exactness test above can fail), and with it, exact ones."""
    model = HFModel(build(arch, seed=5))
    assert model.mask_plan.window == WINDOW
    trunk, paths = list(range(10, 30)), [(), (5,), (5, 6)]
    exact = check(model.session(bos_id=1), Oracle(model), trunk, paths)
    model.mask_plan = TreeMaskPlan(by_layer_type=model.mask_plan.by_layer_type)  # no window
    wrong = check(model.session(bos_id=1), Oracle(model), trunk, paths)
    assert exact <= TOLERANCE[DTYPE] and wrong > 3 * TOLERANCE[DTYPE], (exact, wrong)


def test_unverified_architecture_is_refused_at_load(tmp_path: Path) -> None:
    """BLOOM adds ALiBi biases computed from the attention mask: a tree mask would give
    wrong numbers, so it is refused before its weights are read."""
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(vocab_size=300, hidden_size=32, n_layer=1, n_head=4)
    BloomForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(BackendError, match="'bloom' has not been verified to take the tree"):
        load_hf_model(tmp_path, device="cpu", dtype="float32")
    with pytest.raises(BackendError, match="verified: deepseek_v3, gemma"):
        HFModel(BloomForCausalLM(config))


@pytest.mark.parametrize(
    ("arch", "overrides", "message"),
    [
        ("llama", dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0}), "'dynamic'"),
        (
            "phi3",
            dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 4}),
            "'longrope'",
        ),
        ("gemma3_text", dict(layer_types=["chunked_attention"] * 2), "chunked_attention"),
    ],
)
def test_attention_the_mask_cannot_take_is_refused(
    arch: str, overrides: dict[str, Any], message: str
) -> None:
    from transformers import AutoConfig

    config = AutoConfig.for_model(arch, **{**_SMALL, **CONFIGS[arch]})
    tree_mask_plan(config)  # accepted as it is
    for key, value in overrides.items():
        setattr(config, key, value)
    with pytest.raises(BackendError, match=message):
        tree_mask_plan(config)


def test_sliding_layers_in_a_one_mask_architecture_are_refused() -> None:
    from types import SimpleNamespace

    config = SimpleNamespace(model_type="llama", layer_types=["sliding_attention"])
    with pytest.raises(BackendError, match="not verified with sliding-window layers"):
        tree_mask_plan(config)


def test_soft_capping_needs_eager_attention() -> None:
    """sdpa cannot soft-cap attention logits: such a model is refused, not run without."""
    model = build("gemma2", seed=1)
    model.config._attn_implementation = "sdpa"
    with pytest.raises(BackendError, match="soft-capping needs eager attention"):
        HFModel(model)


def test_saved_sliding_window_model_loads_eager_and_exact(tmp_path: Path) -> None:
    """load_hf_model picks eager attention for a soft-capped model, and the tree is exact
    past the window."""
    build("gemma2", seed=2).save_pretrained(tmp_path)
    model = load_hf_model(tmp_path, device=DEVICE, dtype=DTYPE)
    assert model.model.config._attn_implementation == "eager"
    assert model.mask_plan == TreeMaskPlan(window=WINDOW, by_layer_type=True)
    error = check(model.session(bos_id=1), Oracle(model), list(range(10, 25)), [(), (4, 5)])
    assert error <= TOLERANCE[DTYPE]
