"""Model folders that cannot serve: each gives one clear line of error (exit 2) in the CLI
and an error status, with the same reason, in the language server, never a traceback wall.

The folders are real: a BERT encoder saved by transformers (AutoModelForCausalLM would
quietly load it as BertLMHeadModel with a random head), the same without its
`architectures` entry (caught by the weights missing from the checkpoint), and the shipped
model with a WordPiece tokenizer.json."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from ..server.test_server_robustness import raw_server

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "models" / "default"
REASONS = {
    "encoder": "is not a causal language model (architectures: BertModel)",
    "headless": "weights of the causal LM are missing from the checkpoint",
    "unverified": "architecture 'bert' has not been verified",
    "wordpiece": "unsupported tokenizer model 'WordPiece'",
}


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

    root = tmp_path_factory.mktemp("bad-models")
    encoder = root / "encoder"
    config = BertConfig(
        vocab_size=4096, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64,
    )  # fmt: skip
    BertModel(config).save_pretrained(encoder)
    shutil.copy(DEFAULT / "tokenizer.json", encoder)
    unverified = root / "unverified"  # no architectures: read as the model type's causal LM
    shutil.copytree(encoder, unverified)
    saved = json.loads((unverified / "config.json").read_text())
    saved.pop("architectures")
    (unverified / "config.json").write_text(json.dumps(saved))
    headless = root / "headless"  # a verified architecture whose checkpoint has no LM head
    llama = LlamaConfig(
        vocab_size=4096, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, tie_word_embeddings=False,
    )  # fmt: skip
    LlamaModel(llama).save_pretrained(headless)
    saved = json.loads((headless / "config.json").read_text())
    saved.pop("architectures")
    (headless / "config.json").write_text(json.dumps(saved))
    shutil.copy(DEFAULT / "tokenizer.json", headless)
    wordpiece = root / "wordpiece"
    shutil.copytree(DEFAULT, wordpiece)
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(wordpiece / "tokenizer.json"))
    return {
        "encoder": encoder,
        "headless": headless,
        "unverified": unverified,
        "wordpiece": wordpiece,
    }


@pytest.mark.parametrize("kind", sorted(REASONS))
def test_cli_gives_one_line(bad_models: dict[str, Path], kind: str) -> None:
    """As a user meets it: a fresh process, whatever transformers prints on import."""
    done = subprocess.run(
        [sys.executable, "-m", "midword", "complete", "--model", str(bad_models[kind]), "x = "],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_one_line(done.returncode, done.stdout, done.stderr, "complete", kind)


@pytest.mark.parametrize("kind", sorted(REASONS))
def test_next_bytes_gives_one_line(
    bad_models: dict[str, Path], kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The other model command, in this process (it loads models as `complete` does; a
    second process per folder would cost an import of torch and transformers each)."""
    from midword.cli import main

    code = main(["next-bytes", "--model", str(bad_models[kind]), "x = "])
    out, err = capsys.readouterr()
    assert_one_line(code, out, err, "next-bytes", kind)


def assert_one_line(code: int, out: str, err: str, command: str, kind: str) -> None:
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"midword {command}: error:") and REASONS[kind] in lines[0]


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", sorted(REASONS))
async def test_server_shows_an_error_status(bad_models: dict[str, Path], kind: str) -> None:
    async with raw_server() as (proc, client):
        await client.initialize({"model": str(bad_models[kind])})
        assert await client.wait_state("ready", "error", timeout=120) == "error"
        status = [n for n in client.notifications if n["method"] == "midword/status"][-1]
        assert REASONS[kind] in status["params"]["message"], status
        client.open("file:///tmp/bad.py", "import os\nos.pa")
        answer = await asyncio.wait_for(client.inline("file:///tmp/bad.py", 1, 5, kind=1), 10)
        assert answer["result"]["items"] == []  # still serving, with nothing to offer
        client.notify("exit", None)
        await asyncio.wait_for(proc.wait(), 30)  # a loaded machine exits slowly


@pytest.mark.asyncio
@pytest.mark.parametrize("fallback", [True, False])
async def test_a_missing_device_falls_back_only_when_allowed(fallback: bool) -> None:
    """Asking for a device this torch lacks: served on the best one there is (the status
    says so) when deviceFallback allows it, else an error status that names the device."""
    if torch.cuda.is_available():
        pytest.skip("needs a machine without the device asked for (cuda here)")
    options = {"model": str(DEFAULT), "device": "cuda", "deviceFallback": fallback}
    async with raw_server() as (proc, client):
        await client.initialize(options)
        state = await client.wait_state("ready", "error", timeout=120)
        status = [n for n in client.notifications if n["method"] == "midword/status"][-1]
        message = status["params"]["message"]
        if fallback:
            assert state == "ready" and "cuda missing: on cpu" in message, status
            client.open("file:///tmp/fallback.py", "import os\nos.pa")
            answer = await asyncio.wait_for(client.inline("file:///tmp/fallback.py", 1, 5, 1), 60)
            assert answer["result"]["items"], answer  # served, on the cpu
        else:
            assert state == "error" and "'cuda'" in message, status
        client.notify("exit", None)
        await asyncio.wait_for(proc.wait(), 30)  # a loaded machine exits slowly
