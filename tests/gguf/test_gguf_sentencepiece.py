"""SentencePiece ('llama') GGUF vocabularies (engine/gguf/convert.py): files written here with
``gguf.GGUFWriter`` as llama.cpp's converter writes them (tokens, scores, token types), converted,
and checked against a brute-force SentencePiece encoder written from the algorithm
(:class:`SPMOracle`), against the original tokenizer.json where there is one, and through
midword's own tokenizer, covering trees, model and CLI. Anything not modelled is refused."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from midword.engine import build_tree, load_engine, load_tokenizer
from midword.engine.gguf import convert as mg
from midword.engine.gguf import sentencepiece as gguf_sp

from midword.testing import CORPUS, real_encoder, tokenizer_path

from ..gguf_support import norms_away_from_one, write_shape
from ..oracle import brute_force_tree, sample_ids, tree_sequences

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SPACE = "\u2581"
BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")
SPECIALS = [("<unk>", mg.UNKNOWN), ("<s>", mg.CONTROL), ("</s>", mg.CONTROL)]
BYTES = [(f"<0x{b:02X}>", mg.BYTE) for b in range(256)]
FUZZ_CHARS = (
    list("abcdefxyz_AZ09(){}<>/=.,:;'\" \t\n") + ["  ", "    ", "\n\n"] + list("é中文😀𝔘ñ▁")
)


# ------------------------------------------------------------------ the oracle
class _Ids:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class SPMOracle:
    """SentencePiece BPE as llama.cpp runs it, by brute force: USER_DEFINED texts are cut
    out first (longest text first, every occurrence left to right); each remaining piece
    gets the dummy ' ' when it starts the text or follows such a token, spaces become '▁',
    then, while some adjacent pair of symbols joins into a token, the pair of highest
    score (the leftmost of equals) is joined; a symbol that is no token (one character)
    is written as its UTF-8 bytes' ``<0xNN>`` tokens."""

    def __init__(self, tokens: list[str], types: list[int], scores: list[float], lead: bool):
        self.id_of = {t: i for i, t in enumerate(tokens)}
        self.score = dict(zip(tokens, scores, strict=True))
        users = [t for t, k in zip(tokens, types, strict=True) if k == mg.USER_DEFINED]
        self.users = sorted(users, key=len, reverse=True)
        self.byte_id = {
            int(m.group(1), 16): i for t, i in self.id_of.items() if (m := BYTE_PIECE.fullmatch(t))
        }
        self.lead = lead

    def ids(self, text: str) -> list[int]:
        pieces: list[str | int] = [text] if text else []
        for user in self.users:
            cut: list[str | int] = []
            for piece in pieces:
                if isinstance(piece, int):
                    cut.append(piece)
                    continue
                for k, part in enumerate(piece.split(user)):
                    if k:
                        cut.append(self.id_of[user])
                    if part:
                        cut.append(part)
            pieces = cut
        out: list[int] = []
        after_token = True
        for piece in pieces:
            if isinstance(piece, int):
                out.append(piece)
            else:
                out += self._merge((" " if self.lead and after_token else "") + piece)
            after_token = isinstance(piece, int)
        return out

    def _merge(self, text: str) -> list[int]:
        symbols = list(text.replace(" ", SPACE))
        while True:
            best = None
            for i in range(len(symbols) - 1):
                s = self.score.get(symbols[i] + symbols[i + 1])
                if s is not None and (best is None or s > best[0]):
                    best = (s, i)
            if best is None:
                break
            i = best[1]
            symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
        out: list[int] = []
        for sym in symbols:
            if sym in self.id_of:
                out.append(self.id_of[sym])
            else:
                out += [self.byte_id[b] for b in sym.encode()]
        return out

    def encode(self, text: str, add_special_tokens: bool = False) -> _Ids:
        """The ``tokenizers`` interface tests/oracle.py calls, over the text the model
        sees: behind the dummy space when there is one."""
        if self.lead:
            if not text.startswith(" "):
                return _Ids([-1])  # no encoding of a text starts without its dummy space
            text = text[1:]
        return _Ids(self.ids(text))


# ------------------------------------------------------------------ vocabularies
class Vocab:
    def __init__(self, entries: list[tuple[str, int, float]], lead: bool = True) -> None:
        self.tokens = [t for t, _, _ in entries]
        self.types = [k for _, k, _ in entries]
        self.scores = [s for _, _, s in entries]
        self.lead = lead

    def oracle(self) -> SPMOracle:
        return SPMOracle(self.tokens, self.types, self.scores, self.lead)


def llama2_vocab() -> Vocab:
    """The fixture's vocabulary (Mistral v0.1's) with scores as SentencePiece's BPE trainer
    gives them, which llama.cpp's converter copies: falling with the id, the byte and
    special tokens 0, and the runs of '▁' below all others, in id order (where the
    fixture's merges put them)."""
    spec = json.loads(tokenizer_path("llama2").read_text())
    by_id = {i: t for t, i in spec["model"]["vocab"].items()}
    entries = []
    for i in range(len(by_id)):
        text = by_id[i]
        kind = dict(SPECIALS).get(text, mg.BYTE if BYTE_PIECE.fullmatch(text) else mg.NORMAL)
        score = 0.0 if kind != mg.NORMAL else -float(i)
        if kind == mg.NORMAL and len(text) > 1 and set(text) == {SPACE}:
            score = -1e6 - i
        entries.append((text, kind, score))
    return Vocab(entries)


def small_vocab(seed: int, lead: bool = True, users: tuple[str, ...] = ()) -> Vocab:
    """Specials, the 256 bytes, single characters, then tokens joined from two earlier ones
    at random, each scoring below all before it (as training makes them; none inside an
    earlier one), listed in shuffled order: the merge order is not the id order."""
    rng = random.Random(seed)
    chars = list(f"{SPACE}abcdexyz<>\n") + ["s", "/"]
    entries: list[tuple[str, int, float]] = [(t, k, 0.0) for t, k in SPECIALS + BYTES]
    entries += [(c, mg.NORMAL, -1000.0 - k) for k, c in enumerate(chars)]
    joined: list[tuple[str, int, float]] = []
    score = -100.0
    while len(joined) < 70:
        new = rng.choice(chars + [t for t, _, _ in joined]) + rng.choice(chars)
        if len(new) <= 5 and not {"<", ">"} & set(new) and not any(new in t for t, _, _ in joined):
            score -= rng.randrange(1, 20)
            joined.append((new, mg.NORMAL, score))
    rng.shuffle(joined)
    entries += joined + [(u, mg.USER_DEFINED, 0.0) for u in users]
    return Vocab(entries, lead)


def write_vocab(w: gguf.GGUFWriter, vocab: Vocab, scores: bool = True) -> None:
    """The tokenizer.ggml.* keys of a 'llama' vocabulary (BOS / EOS ids left to llama.cpp's
    defaults, 1 and 2)."""
    w.add_tokenizer_model("llama")
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if scores:
        w.add_token_scores(vocab.scores)
    w.add_add_space_prefix(vocab.lead)


def write_gguf(path: Path, vocab: Vocab, model: transformers.PreTrainedModel | None = None,
               scores: bool = True) -> Path:  # fmt: skip
    from .test_gguf import gguf_name, permute_rows

    w = gguf.GGUFWriter(str(path), "llama")
    write_vocab(w, vocab, scores)
    if model is not None:
        cfg = model.config
        write_shape(w, cfg)
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        w.add_rope_dimension_count(cfg.head_dim)
        for name, tensor in model.state_dict().items():
            if name == "lm_head.weight" and cfg.tie_word_embeddings:
                continue
            data = tensor.numpy()
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
                data = permute_rows(data, heads)
            w.add_tensor(gguf_name(name), data.astype("float32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def rebuilt(tmp: Path, vocab: Vocab) -> Path:
    """tokenizer.json converted from a vocabulary-only GGUF file of ``vocab``."""
    spec = mg.tokenizer_json(mg.GGUFFile(write_gguf(tmp / "v.gguf", vocab)))
    out = tmp / "tokenizer.json"
    out.write_text(json.dumps(spec, ensure_ascii=False))
    return out


def fuzz_texts(n: int, seed: int) -> list[str]:
    """Corpus fragments and random mixes of code, unicode, runs of spaces, emoji and
    special-token text."""
    rng = random.Random(seed)
    data = "\n".join(CORPUS)
    out = ["", " ", "  x", "a\nb", "<s>a</s><unk>", "<0x41>", "é𝔘😀 中文", "x\t\t  \n\n\ny"]
    for _ in range(n):
        if rng.random() < 0.5:
            i = rng.randrange(len(data))
            out.append(data[i : i + rng.randrange(1, 200)])
        else:
            out.append("".join(rng.choice(FUZZ_CHARS) for _ in range(rng.randrange(1, 40))))
    return out


def token_runs(vocab: Vocab, n: int, seed: int) -> list[str]:
    """Texts of a few tokens side by side, where merges compete most."""
    rng = random.Random(seed)
    pieces = [t.replace(SPACE, " ") for t, k in zip(vocab.tokens, vocab.types, strict=True) if k == mg.NORMAL and len(t) > 1]  # fmt: skip
    return ["".join(rng.choices(pieces, k=rng.randrange(2, 6))) for _ in range(n)]


@pytest.fixture(scope="module")
def llama2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Vocab, Path]:
    vocab = llama2_vocab()
    return vocab, rebuilt(tmp_path_factory.mktemp("llama2"), vocab)


# ------------------------------------------------------------------ encoding
def test_llama2_vocabulary_encodes_like_llama_cpp_and_the_original(llama2) -> None:  # noqa: ANN001
    vocab, path = llama2
    oracle, original = vocab.oracle(), real_encoder(tokenizer_path("llama2"))
    hf, tok = real_encoder(path), load_tokenizer(path, use_cache=False)
    assert tok.lead == b" " and not tok.split
    for text in fuzz_texts(250, seed=1):
        want = oracle.ids(text)
        assert hf.encode(text, add_special_tokens=False).ids == want, text
        assert tok.encode(text) == want, text
        assert original.encode(text, add_special_tokens=False).ids == want, text


def test_merges_follow_scores_not_ids(tmp_path: Path) -> None:
    """Shuffled scores: the rebuilt file encodes as the oracle, and merging in id order
    (the order of the token list) would not."""
    for seed in range(3):
        vocab = small_vocab(seed)
        path = rebuilt(tmp_path, vocab)
        hf, tok, oracle = real_encoder(path), load_tokenizer(path, use_cache=False), vocab.oracle()
        by_id = Vocab(list(zip(vocab.tokens, vocab.types, [-float(i) for i in range(len(vocab.tokens))], strict=True)))  # fmt: skip
        differs = 0
        for text in fuzz_texts(200, seed=seed) + token_runs(vocab, 200, seed):
            want = oracle.ids(text)
            assert hf.encode(text, add_special_tokens=False).ids == want, (seed, text)
            assert tok.encode(text) == want, (seed, text)
            differs += by_id.oracle().ids(text) != want
        assert differs > 0, seed


def test_one_pair_wins_by_score(tmp_path: Path) -> None:
    """'ab' comes first in the list, 'bc' scores higher: 'abc' is a + bc."""
    entries = [(t, k, 0.0) for t, k in SPECIALS + BYTES]
    entries += [("a", mg.NORMAL, -9.0), ("b", mg.NORMAL, -9.0), ("c", mg.NORMAL, -9.0)]
    entries += [("ab", mg.NORMAL, -5.0), ("bc", mg.NORMAL, -1.0)]
    vocab = Vocab(entries, lead=False)
    spec = mg.tokenizer_json(mg.GGUFFile(write_gguf(tmp_path / "abc.gguf", vocab)))
    assert spec["model"]["merges"] == [["b", "c"], ["a", "b"]]
    assert vocab.oracle().ids("abc") == [259, 263]


def test_gemma_like_vocabulary_without_dummy_prefix(tmp_path: Path) -> None:
    """add_space_prefix off, USER_DEFINED runs of newlines and spaces cut out first."""
    users = ("\n\n", "\n\n\n", "  ", "    ", "<b>")
    vocab = small_vocab(5, lead=False, users=users)
    path = rebuilt(tmp_path, vocab)
    spec = json.loads(path.read_text())
    assert all(a["content"] in users for a in spec["added_tokens"] if not a["special"])
    hf, tok, oracle = real_encoder(path), load_tokenizer(path, use_cache=False), vocab.oracle()
    assert tok.lead == b""
    extra = ["a\n\n\n\n\nb", "x     y", "<b><b>a", "\n\n  \n", " a"]
    for text in fuzz_texts(200, seed=7) + extra:
        want = oracle.ids(text)
        assert hf.encode(text, add_special_tokens=False).ids == want, text
        if SPACE not in text:  # (midword refuses a typed '▁'; its encoder reads it as ' ')
            assert tok.encode(text) == want, text


# ------------------------------------------------------------------ covering trees
def _check_trees(path: Path, oracle: SPMOracle, prefixes: list[bytes], seed: int) -> None:
    eng = load_engine(str(path))
    rng = random.Random(seed)
    for prefix in prefixes:
        tree = build_tree(eng, prefix)
        claimed = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves[:150]]
        sample = sample_ids(eng.tok, 150, rng) + claimed
        mine = {tuple(tree.trunk) + s for s in tree_sequences(tree, sample)}
        truth = brute_force_tree(oracle, eng.tok, eng.lead + prefix, sample)
        assert mine == truth, (prefix, sorted(mine ^ truth)[:5])


def test_trees_against_brute_force(llama2, tmp_path: Path) -> None:  # noqa: ANN001
    """Covering trees of the converted tokenizers equal tests/oracle.py's brute force over
    the SentencePiece oracle (the llama2 vocabulary, and shuffled scores)."""
    vocab, path = llama2
    prefixes = [b"Hello wor", b"x = 12", b"a  b", "中文".encode()[:4], b"def f(x):\n    ret"]
    _check_trees(path, vocab.oracle(), prefixes, seed=1)
    small = small_vocab(1)
    _check_trees(rebuilt(tmp_path, small), small.oracle(), [b"abc", b"xyz ab", b"ed\nc"], 2)


# ------------------------------------------------------------------ the model
def tiny_model(vocab_size: int, hidden: int = 64) -> transformers.PreTrainedModel:
    torch.manual_seed(4)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=hidden // 4, max_position_embeddings=256, rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return norms_away_from_one(model)


def test_converted_model_gives_the_source_logits(tmp_path: Path) -> None:
    from .test_gguf import load_folder, logits

    vocab = small_vocab(2)
    source = tiny_model(len(vocab.tokens))
    file = write_gguf(tmp_path / "tiny.gguf", vocab, source)
    folder = mg.convert_gguf(file, "float32", cache_dir=tmp_path / "cache")
    ids = [1, *vocab.oracle().ids("abc de\nxy"), 7]
    assert torch.equal(logits(load_folder(folder), ids), logits(source, ids))
    config = json.loads((folder / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)  # llama.cpp's defaults
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_config["add_bos_token"] is True and tok_config["bos_token"] == "<s>"
    assert load_tokenizer(folder / "tokenizer.json", use_cache=False).encode("ab") == (
        vocab.oracle().ids("ab")
    )


def test_complete_accepts_a_sentencepiece_gguf_file(tmp_path: Path) -> None:
    vocab = llama2_vocab()
    file = write_gguf(tmp_path / "m.gguf", vocab, tiny_model(len(vocab.tokens), hidden=16))
    env = {**os.environ, "MIDWORD_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "midword", "complete", "--model", str(file), "--device", "cpu"]
    cmd += ["--max-tokens", "3", "--json", "def ma"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1])["completion"] is not None


# ------------------------------------------------------------------ refusals
def _with(vocab: Vocab, *entries: tuple[str, int, float]) -> Vocab:
    rows = list(zip(vocab.tokens, vocab.types, vocab.scores, strict=True)) + list(entries)
    return Vocab(rows, vocab.lead)


def _tie(v: Vocab, second: float = -50.0) -> Vocab:
    """'qqww' and 'wwqq' scored alike (``second``: the score of 'wwqq')."""
    return _with(
        v, ("q", mg.NORMAL, -999.0), ("w", mg.NORMAL, -999.0), ("qq", mg.NORMAL, -10.0),
        ("ww", mg.NORMAL, -11.0), ("qqww", mg.NORMAL, -50.0), ("wwqq", mg.NORMAL, second),
    )  # fmt: skip


def _above_halves(v: Vocab) -> Vocab:
    """'s/q' scores above '/q', which it is merged from."""
    return _with(
        v, ("q", mg.NORMAL, -999.0), ("/q", mg.NORMAL, -29.0), ("s/q", mg.NORMAL, -12.0),
        ("s/q/", mg.NORMAL, -21.0), ("s/q/q", mg.NORMAL, -33.0),
    )  # fmt: skip


REFUSED = [
    ("same score", _tie),
    ("CONTROL token '<s>'.*formed by merging", lambda v: _with(v, ("<s", mg.NORMAL, -5.0))),
    ("unknown token type 7", lambda v: _with(v, ("qq", 7, -5.0))),
    ("character 'é'.*not in the vocabulary", lambda v: _with(v, ("éa", mg.NORMAL, -5.0))),
    ("character 'q' is a CONTROL token", lambda v: _with(v, ("q", mg.CONTROL, 0.0))),
    ("dummy prefix", lambda v: _with(v, ("<b>", mg.USER_DEFINED, 0.0))),
    (
        "no byte token <0x41>",
        lambda v: Vocab(
            [
                r if r[0] != "<0x41>" else ("<0x41>", mg.UNUSED, 0.0)
                for r in zip(v.tokens, v.types, v.scores, strict=True)
            ]
        ),
    ),  # fmt: skip
    ("above its half '/q'", lambda v: _above_halves(v)),
    ("holds '▁'", lambda v: _with(v, (f"{SPACE}x", mg.USER_DEFINED, 0.0))),
]


@pytest.mark.parametrize(("name", "change"), REFUSED, ids=[r[0][:20] for r in REFUSED])
def test_unmodelled_vocabularies_are_refused_by_name(tmp_path: Path, name: str, change) -> None:  # noqa: ANN001
    vocab = change(small_vocab(3))
    with pytest.raises(mg.GGUFError, match=name):
        mg.tokenizer_json(mg.GGUFFile(write_gguf(tmp_path / "v.gguf", vocab)))


def test_overlapping_user_texts_and_missing_scores_are_refused(tmp_path: Path) -> None:
    overlap = small_vocab(3, lead=False, users=("ab", "bc"))
    with pytest.raises(mg.GGUFError, match="'ab' and 'bc' overlap"):
        mg.tokenizer_json(mg.GGUFFile(write_gguf(tmp_path / "o.gguf", overlap)))
    with pytest.raises(mg.GGUFError, match="no tokenizer.ggml.scores"):
        mg.tokenizer_json(mg.GGUFFile(write_gguf(tmp_path / "s.gguf", small_vocab(3), scores=False)))  # fmt: skip


def test_the_refused_cases_really_differ() -> None:
    """What the refusals guard against: with tied scores llama.cpp joins the leftmost
    pair, and either rank order of the two merges gets one of two texts wrong; a CONTROL
    token that merging forms is emitted for plain text."""
    tied = _tie(small_vocab(3)).oracle()
    qqww_first, wwqq_first = (
        _tie(small_vocab(3), -50.5).oracle(),
        _tie(small_vocab(3), -49.5).oracle(),
    )
    assert tied.ids("wwqqww") != qqww_first.ids("wwqqww")
    assert tied.ids("qqwwqq") != wwqq_first.ids("qqwwqq")
    control = _with(small_vocab(3), ("<s", mg.NORMAL, -5.0)).oracle()
    assert control.ids("a<s>")[-1] == 1  # <s> itself


def test_a_token_above_its_half_would_mislead_the_trees(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Why :func:`_above_halves` is refused: converted anyway, the rebuilt file still
    encodes as llama.cpp, but midword's tokenizer (whose merge order puts every merge after
    its halves') does not."""
    monkeypatch.setattr(gguf_sp, "_refuse_tokens_above_halves", lambda *args: None)
    vocab = _above_halves(small_vocab(3))
    path = rebuilt(tmp_path, vocab)
    want = vocab.oracle().ids("s/q/q")
    assert [vocab.tokens[i] for i in want] == [SPACE, "s/q/q"]
    assert real_encoder(path).encode("s/q/q", add_special_tokens=False).ids == want
    assert load_tokenizer(path, use_cache=False).encode("s/q/q") != want


def test_server_loads_a_sentencepiece_gguf_file(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The language server's loader converts the file and serves the converted model with
    the rebuilt SentencePiece tokenizer."""
    from midword.server.loading import load_backend
    from midword.server.options import ServerOptions

    from .test_gguf import logits

    monkeypatch.setenv("MIDWORD_CACHE", str(tmp_path / "cache"))
    vocab = small_vocab(4)
    source = tiny_model(len(vocab.tokens))
    file = write_gguf(tmp_path / "m.gguf", vocab, source)
    options = ServerOptions(model=str(file), backend="torch", device="cpu", dtype="float32")
    backend = load_backend(options, [str(file)], lambda m, p: None)
    ids = [1, *vocab.oracle().ids("xyz ab")]
    assert torch.equal(logits(backend.model.model, ids), logits(source, ids))
    assert backend.engine.is_sentencepiece and backend.engine.tok.encode("xyz ab") == ids[1:]
