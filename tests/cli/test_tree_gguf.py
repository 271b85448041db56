"""``midword tree --tokenizer X.gguf``: a GGUF file's tokenizer, rebuilt from its metadata
alone, gives the trees its tokenizer.json gives; bad files (truncated, corrupt, not GGUF,
a tokenizer midword cannot rebuild exactly) give one readable line and exit 2, never a
traceback, here and as ``--model``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..gguf.test_gguf import DEFAULT_TOKENIZER, write_vocab_gguf

gguf = pytest.importorskip("gguf")

PREFIXES = ["x = 12", "def f(sel", "  ret", "caf\u00e9 \u4e2d"]


def midword(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "midword", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line_refusal(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one line on stderr holding every needle, no traceback."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tree-gguf")
    spec = json.loads(DEFAULT_TOKENIZER.read_text())
    out = {"json": DEFAULT_TOKENIZER, "gguf": root / "vocab.gguf"}
    write_vocab_gguf(out["gguf"], spec, "dbrx")  # (the shipped tokenizer's split)
    whole = out["gguf"].read_bytes()
    out["truncated"] = root / "truncated.gguf"
    out["truncated"].write_bytes(whole[: len(whole) // 3])
    out["corrupt"] = root / "corrupt.gguf"
    out["corrupt"].write_bytes(whole[:8] + b"\xff" * 16 + whole[24:])
    out["binary"] = root / "package.whl"
    out["binary"].write_bytes(b"PK\x03\x04" + bytes(range(256)) * 8)
    out["empty"] = root / "empty.gguf"
    out["empty"].write_bytes(b"")
    out["falcon"] = root / "falcon.gguf"
    write_vocab_gguf(out["falcon"], spec, "falcon")
    return out


def test_tree_of_a_gguf_file_is_that_of_its_tokenizer_json(files: dict[str, Path]) -> None:
    """The same JSON trees from the GGUF file as from the tokenizer.json it was written
    from (the shipped tokenizer: Llama 3's split, merges always applied: llama.cpp's
    'dbrx')."""
    want = midword("tree", "--tokenizer", files["json"], "--json", *PREFIXES)
    got = midword("tree", "--tokenizer", files["gguf"], "--json", *PREFIXES)
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    assert got.stdout == want.stdout and len(got.stdout.splitlines()) == len(PREFIXES)
    text = midword("tree", "--tokenizer", files["gguf"], "def f(sel")
    assert text.returncode == 0 and "internal nodes:" in text.stdout, text.stderr


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("truncated", ("truncated.gguf", "truncated or corrupt")),
        ("corrupt", ("corrupt.gguf", "as a GGUF file")),
        ("binary", ("package.whl", "not a tokenizer.json")),
        ("empty", ("empty.gguf", "not a GGUF file")),
        ("falcon", ("'falcon'", "not a pre-tokenizer midword models exactly")),
    ],
)
def test_bad_tokenizer_files_are_one_line(
    files: dict[str, Path], name: str, needles: tuple[str, ...]
) -> None:
    one_line_refusal(midword("tree", "--tokenizer", files[name], "x"), *needles)


@pytest.mark.parametrize("name", ["truncated", "binary", "falcon"])
def test_bad_model_files_are_one_line(files: dict[str, Path], name: str) -> None:
    """As ``--model`` (whichever backend loads it): one line naming the file or the reason."""
    done = midword("complete", "--model", files[name], "--max-tokens", "1", "x")
    one_line_refusal(done)
    assert files[name].name in done.stderr or "falcon" in done.stderr, done.stderr
