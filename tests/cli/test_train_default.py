"""Tests of models/train_default.py and its steps in models/training/ (a tiny run into a
temporary directory) and of the shipped default model in models/default.

The tiny run trains a 300-token tokenizer and a one-layer model on 20 stdlib files for a few
seconds; it checks the directory structure, not the quality.
"""

from __future__ import annotations

import doctest
import hashlib
import importlib.util
import json
import random
import re
import sys
import tarfile
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "models" / "train_default.py"
DEFAULT_MODEL = ROOT / "models" / "default"
EXPECTED_FILES = (
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "heldout_files.json",
    "training_summary.json",
    "README.md",
)
SAMPLE = 'def naïve_sum(xs: list[int]) -> int:\n    """Σ of xs."""\n\treturn sum(xs)  # 🐍\r\n'


STEPS = ("corpus", "tokenizer", "fim", "recipe", "model", "evaluation")


def load_script() -> ModuleType:
    """models/train_default.py as a module (models/ is not a package). Loading it puts
    models/ on sys.path, where its steps are: the package ``training``."""
    spec = importlib.util.spec_from_file_location("train_default", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_default", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def td() -> ModuleType:
    """The command line: main() and its parser."""
    return load_script()


@pytest.fixture(scope="module")
def tr(td: ModuleType) -> SimpleNamespace:
    """The steps the tests reach into, ``tr.corpus`` for models/training/corpus.py etc."""
    return SimpleNamespace(**{name: importlib.import_module(f"training.{name}") for name in STEPS})


@pytest.fixture(scope="module")
def tiny_run(td: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Run the training script's main() with a tiny budget; returns (out dir, argv)."""
    import torch

    out = tmp_path_factory.mktemp("tiny-default")
    argv = [
        "--out", str(out), "--minutes", "0.25", "--threads", str(torch.get_num_threads()),
        "--max-files", "20", "--vocab", "300", "--width", "32", "--layers", "1",
        "--heads", "2", "--ffn", "64", "--seq-len", "64", "--batch-size", "4",
        "--warmup-steps", "5", "--calibrate", "2", "--log-every", "5", "--eval-every", "5",
    ]  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        assert td.main(argv) == 0
    return out, argv


# --------------------------------------------------------------------------- units


def test_help_exits_cleanly(td: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        td.build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    assert "--minutes" in capsys.readouterr().out


def test_heldout_rule_is_sha1_mod_50(tr: SimpleNamespace) -> None:
    for rel in ("os.py", "asyncio/tasks.py", "json/__init__.py", "email/_parseaddr.py"):
        expected = int(hashlib.sha1(rel.encode()).hexdigest(), 16) % 50 == 0
        assert tr.corpus.is_heldout(rel) is expected


def test_candidates_exclude_tests_and_machine_files(tr: SimpleNamespace) -> None:
    assert tr.corpus.is_candidate("os.py")
    assert tr.corpus.is_candidate("asyncio/tasks.py")
    for rel in (
        "test/test_os.py",
        "idlelib/idle_test/test_run.py",
        "lib2to3/tests/test_parser.py",
        "unittest/test/test_case.py",
        "site-packages/pip/__init__.py",
        "config-3.11-x86_64-linux-gnu/python-config.py",
        "_sysconfigdata__linux_x86_64-linux-gnu.py",
        "pydoc_data/topics.py",
    ):
        assert not tr.corpus.is_candidate(rel), rel


def test_doc_windows_score_every_token_once(tr: SimpleNamespace) -> None:
    for n in (1, 2, 5, 16, 17, 40, 123):
        ids = list(range(n + 1))
        scored: list[int] = []
        for inp, tgt, first in tr.evaluation.doc_windows(ids, 16):
            assert len(inp) == len(tgt) <= 16
            assert all(t == i + 1 for i, t in zip(inp, tgt, strict=True))
            scored.extend(tgt[max(0, first) :])
        assert scored == ids[1:], n


def test_lr_schedule_warms_up_then_decays(tr: SimpleNamespace) -> None:
    recipe = tr.recipe.Recipe(lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    lrs = [tr.model.lr_at(s, 200, recipe) for s in range(200)]
    assert lrs[0] == pytest.approx(1e-4)
    assert lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False))
    assert lrs[-1] == pytest.approx(1e-4, rel=0.01)


# --------------------------------------------------------------------------- FIM transform

FIM_TEXT = 'def naïve(x):\n    """Σ"""\n    return x + 1  # 🐍\n\n\nclass A:\n    pass\n'


def test_random_character_split_round_trips(tr: SimpleNamespace) -> None:
    rng = random.Random(0)
    cuts = set()
    for _ in range(300):
        prefix, middle, suffix = tr.fim.split_at_random_characters(FIM_TEXT, rng)
        assert prefix + middle + suffix == FIM_TEXT
        cuts.add((len(prefix), len(prefix) + len(middle)))
    # Character positions: some fall inside a word (as no token or line boundary would).
    mid_word = [i for i, _ in cuts if 0 < i < len(FIM_TEXT) and FIM_TEXT[i - 1 : i + 1].isalpha()]
    assert mid_word
    assert len(cuts) > 100


def test_fim_pieces_psm_and_spm_orders(tr: SimpleNamespace) -> None:
    ids = tr.fim.FimIds(eot=0, prefix=1, suffix=2, middle=3)
    assert tr.fim.fim_pieces("P", "M", "S", False, ids) == [1, "P", 2, "S", 3, "M"]
    # SPM: the prefix and the middle are one text, tokenized together.
    assert tr.fim.fim_pieces("P", "M", "S", True, ids) == [1, 2, "S", 3, "PM"]


def test_line_chunks_join_back_and_end_on_newlines(tr: SimpleNamespace) -> None:
    text = "".join(f"line {i} " + "x" * (i % 37) + "\n" for i in range(400)) + "tail"
    chunks = tr.fim.line_chunks(text, random.Random(1), 50, 300)
    assert "".join(chunks) == text
    assert all(c.endswith("\n") for c in chunks[:-1])
    assert all(len(c) >= 50 for c in chunks[:-1])
    assert all(len(c) < 300 + 50 for c in chunks)  # the line that crosses the target ends it


def documents_text(tok, docs: list[list[int]]) -> str:
    return "".join(tok.decode(d, skip_special_tokens=False) for d in docs)


def test_plan_documents_formats_and_rates(
    tr: SimpleNamespace, tiny_run: tuple[Path, list[str]]
) -> None:
    from tokenizers import Tokenizer

    out, _ = tiny_run
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = tr.fim.FimIds.of(tok)
    assert (ids.eot, ids.prefix, ids.suffix, ids.middle) == (0, 1, 2, 3)
    texts = [FIM_TEXT * 40, "x = 1\n" * 300]
    recipe = tr.recipe.Recipe(fim_rate=0.5, spm_rate=0.5, fim_chunk_min=40, fim_chunk_max=200)
    docs = tr.fim.plan_documents(texts, recipe, 0, ids, random.Random(5))
    kinds = {"psm": 0, "spm": 0, "plain": 0}
    rebuilt = []
    for doc in docs:
        assert doc[0] == 0 and all(p not in (0,) for p in doc[1:])
        body = doc[1:]
        if body[:2] == [1, 2]:  # SPM: <pre><suf> suffix <mid> prefix+middle
            kinds["spm"] += 1
            _, _, suffix, mid, prefix_middle = body
            assert mid == 3
            rebuilt.append(prefix_middle + suffix)
        elif body[0] == 1:  # PSM: <pre> prefix <suf> suffix <mid> middle
            kinds["psm"] += 1
            _, prefix, s, suffix, m, middle = body
            assert (s, m) == (2, 3)
            rebuilt.append(prefix + middle + suffix)
        else:
            kinds["plain"] += 1
            rebuilt.append(body[0])
    assert "".join(rebuilt) == "".join(texts)  # every character is used once, in order
    assert min(kinds.values()) >= 5, kinds

    # The token ids: specials as they are, each text part tokenized on its own.
    encoded = tr.fim.encode_pieces(tok, docs)
    for doc, enc in zip(docs, encoded, strict=True):
        expect = [t for p in doc for t in ([p] if isinstance(p, int) else tok.encode(p).ids)]
        assert enc == expect
    decoded = documents_text(tok, encoded)
    assert decoded.count("<|fim_middle|>") == kinds["psm"] + kinds["spm"]


def test_fim_rate_zero_is_the_plain_documents(tr: SimpleNamespace) -> None:
    texts = [FIM_TEXT, "import os\n"]
    docs = tr.fim.plan_documents(texts, tr.recipe.Recipe(fim_rate=0.0), 0, None, random.Random(0))
    assert docs == [[0, FIM_TEXT], [0, "import os\n"]]


def test_data_tar_round_trips_the_corpus(tr: SimpleNamespace, tmp_path: Path) -> None:
    root = tmp_path / "lib"
    files = {
        "os.py": "import sys\r\n",
        "json/__init__.py": "x = 1\n",
        "test/test_os.py": "skipped\n",
        "gen.py": "# generated by gencodec.py\n",
        "empty.py": "  \n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode())
    first, second = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    meta = tr.corpus.make_data_tar(root, first)
    tr.corpus.make_data_tar(root, second)
    assert first.read_bytes() == second.read_bytes()  # reproducible bytes
    assert meta["files"] == 2
    with tarfile.open(first) as tar:
        assert sorted(tar.getnames()) == sorted(
            [tr.corpus.DATA_TAR_META, "json/__init__.py", "os.py"]
        )
    from_dir, from_tar = tr.corpus.load_corpus(root), tr.corpus.load_corpus_from_tar(first)
    assert (
        from_tar.train_files + from_tar.heldout_files
        == from_dir.train_files + from_dir.heldout_files
    )
    assert from_tar.fingerprint() == from_dir.fingerprint()
    assert "import sys\n" in from_tar.train_texts + from_tar.heldout_texts


def test_validation_split_is_disjoint(tr: SimpleNamespace) -> None:
    rels = [f"pkg/m{i}.py" for i in range(400)]
    corpus = tr.corpus.Corpus(Path("."), list(rels), [], [f"t{i}" for i in range(400)], [])
    tr.corpus.split_validation(corpus)
    assert corpus.validation_files and corpus.train_files
    assert all(tr.corpus.is_validation(r) for r in corpus.validation_files)
    assert not any(tr.corpus.is_validation(r) for r in corpus.train_files)
    assert sorted(corpus.train_files + corpus.validation_files) == sorted(rels)
    assert all(
        t == f"t{r[5:-3]}" for r, t in zip(corpus.train_files, corpus.train_texts, strict=True)
    )


def _steps_with_examples() -> list[str]:
    folder = ROOT / "models" / "training"
    return [p.stem for p in sorted(folder.glob("*.py")) if ">>>" in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("name", _steps_with_examples())
def test_step_docstring_examples(td: ModuleType, name: str) -> None:
    """The examples in models/training/ (tests/test_doctests.py walks the installed packages,
    which do not include it)."""
    module = importlib.import_module(f"training.{name}")
    assert module.__file__ is not None and Path(module.__file__).parent.name == "training"
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
    assert result.failed == 0, f"{result.failed} example(s) of training.{name} failed (see stdout)"


# --------------------------------------------------------------------------- tiny run


def test_tiny_run_writes_model_directory(tiny_run: tuple[Path, list[str]]) -> None:
    out, _ = tiny_run
    missing = [f for f in EXPECTED_FILES if not (out / f).is_file()]
    assert not missing


def test_tiny_run_config_and_model_load(tiny_run: tuple[Path, list[str]]) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out, _ = tiny_run
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "llama"
    assert config.tie_word_embeddings is True
    assert config.vocab_size == 300
    assert config.bos_token_id == config.eos_token_id == 0
    model = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[0, 5, 6, 7]])).logits
    assert logits.shape == (1, 4, 300)
    assert torch.isfinite(logits).all()


def test_tiny_run_tokenizer_structure_and_round_trip(
    tr: SimpleNamespace, tiny_run: tuple[Path, list[str]]
) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    out, _ = tiny_run
    spec = json.loads((out / "tokenizer.json").read_text())
    assert spec["model"]["type"] == "BPE"
    assert spec["normalizer"] is None
    assert spec["decoder"]["type"] == "ByteLevel"
    split, byte_level = spec["pre_tokenizer"]["pretokenizers"]
    assert spec["pre_tokenizer"]["type"] == "Sequence"
    assert split["type"] == "Split" and split["behavior"] == "Isolated"
    assert split["pattern"] == {"Regex": tr.tokenizer.CL100K_PATTERN}
    assert byte_level["type"] == "ByteLevel"
    assert byte_level["add_prefix_space"] is False and byte_level["use_regex"] is False
    assert [(t["id"], t["content"], t["special"]) for t in spec["added_tokens"]] == [
        (0, "<|endoftext|>", True),
        (1, "<|fim_prefix|>", True),
        (2, "<|fim_suffix|>", True),
        (3, "<|fim_middle|>", True),
    ]

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == 300
    assert tok.token_to_id("<|endoftext|>") == 0
    # All 256 byte symbols are in the vocabulary, so any text round-trips.
    assert tok.decode(tok.encode(SAMPLE).ids) == SAMPLE
    hf = AutoTokenizer.from_pretrained(out)
    assert hf.eos_token_id == hf.bos_token_id == 0
    assert hf.decode(hf(SAMPLE)["input_ids"]) == SAMPLE


def test_tiny_run_heldout_is_disjoint_from_training(
    tr: SimpleNamespace, tiny_run: tuple[Path, list[str]]
) -> None:
    out, _ = tiny_run
    heldout = json.loads((out / "heldout_files.json").read_text())
    summary = json.loads((out / "training_summary.json").read_text())
    held, train = set(heldout["files"]), set(summary["data"]["train_files"])
    assert held and train
    assert not held & train
    assert all(tr.corpus.is_heldout(f) for f in held)
    assert not any(tr.corpus.is_heldout(f) for f in train)
    assert heldout["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_tiny_run_model_card(tiny_run: tuple[Path, list[str]]) -> None:
    out, argv = tiny_run
    card = (out / "README.md").read_text()
    summary = json.loads((out / "training_summary.json").read_text())
    bpb = summary["results"]["heldout_bpb"]
    assert 0 < bpb < 20
    assert f"Held-out bits per byte: {bpb:.4f}" in card
    assert "python models/train_default.py" in card and "--max-files 20" in card
    assert summary["command"] in card
    assert "## Next-character accuracy at mid-identifier cuts" in card
    assert "(filled in by benchmarks/bench_default_model.py)" in card


# --------------------------------------------------------------------------- shipped model


needs_default = pytest.mark.skipif(
    not (DEFAULT_MODEL / "config.json").is_file(), reason="models/default not trained yet"
)


@needs_default
def test_default_model_directory() -> None:
    missing = [f for f in EXPECTED_FILES if not (DEFAULT_MODEL / f).is_file()]
    assert not missing
    size = sum(p.stat().st_size for p in DEFAULT_MODEL.rglob("*") if p.is_file())
    assert size <= 25_000_000
    card = (DEFAULT_MODEL / "README.md").read_text()
    assert re.search(r"Held-out bits per byte: \d+\.\d+", card)
    assert "## Next-character accuracy at mid-identifier cuts" in card
    heldout = json.loads((DEFAULT_MODEL / "heldout_files.json").read_text())
    assert heldout["files"] and all(isinstance(f, str) for f in heldout["files"])


@needs_default
def test_default_model_loads_and_generates_python() -> None:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tok = Tokenizer.from_file(str(DEFAULT_MODEL / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL)
    model.eval()
    assert model.config.model_type == "llama"
    assert model.config.tie_word_embeddings is True
    assert model.config.vocab_size == tok.get_vocab_size()
    eot = tok.token_to_id("<|endoftext|>")
    assert model.config.bos_token_id == model.config.eos_token_id == eot
    prompt = "import os\n\n\ndef "
    ids = torch.tensor([[eot, *tok.encode(prompt).ids]])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, ids.shape[1] :].tolist())
    assert text.strip(), "greedy continuation is empty"
    # A trained model continues `def ` with an identifier, not with noise.
    assert re.match(r"[A-Za-z_]", text), repr(text)
