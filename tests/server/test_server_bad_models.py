"""Bad model files given to a running language server: each is one readable line in the
``error`` status (no traceback), and the server stays up and answers (empty) until a
model that loads is configured. The files: a binary that is not a GGUF (a wheel), a
truncated GGUF, a GGUF llama.cpp cannot load (an architecture it does not know), and a
GGUF whose tokenizer midword cannot rebuild exactly (a pre-tokenizer it does not model).
The server reads a GGUF file's tokenizer before the model (on llama.cpp too, so that the
reading's passing memory is not added to the mapped weights): a file that both refuse, or
one cut short, is reported by midword's own reader."""

from __future__ import annotations

import asyncio
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from midword.models import shipped_test_model
from midword.testing.gguf_files import write_qwen2_gguf
from midword.testing.shapes import TINY_SHIPPED

from .test_server_robustness import raw_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKENIZER = shipped_test_model() / "tokenizer.json"


def tiny_gguf(path: Path, pre: str = "qwen2") -> Path:
    write_qwen2_gguf(path, TINY_SHIPPED, TOKENIZER, "Q8_0", pre=pre)
    return path


def a_wheel(tmp: Path) -> Path:
    path = tmp / "midword-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("midword/__init__.py", "x = 1\n" * 100)
    return path


def truncated(tmp: Path) -> Path:
    whole = tiny_gguf(tmp / "whole.gguf").read_bytes()
    path = tmp / "truncated.gguf"
    path.write_bytes(whole[: len(whole) // 2])
    return path


def unknown_architecture(tmp: Path) -> Path:
    # a pre-tokenizer not named "qwen2", so only the architecture and its keys change
    data = tiny_gguf(tmp / "q.gguf", pre="gpt-2").read_bytes()
    path = tmp / "unknown-arch.gguf"
    path.write_bytes(data.replace(b"qwen2", b"qwenZ"))  # same length: the file stays valid
    return path


def unknown_pre_tokenizer(tmp: Path) -> Path:
    return tiny_gguf(tmp / "unknown-pre.gguf", pre="no-such-pre")


# kind -> (the file, the backend asked for, what the status must say)
BAD: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "not a GGUF (a wheel)": (a_wheel, "auto", "not a GGUF model file"),
    "truncated GGUF": (truncated, "auto", "runs past the file's end"),
    "truncated GGUF, torch": (truncated, "torch", "runs past the file's end"),
    "architecture llama.cpp does not know": (
        unknown_architecture,
        "auto",
        "unknown model architecture: 'qwenZ'",
    ),
    "pre-tokenizer llama.cpp does not know": (unknown_pre_tokenizer, "auto", "'no-such-pre'"),
    "pre-tokenizer midword does not model": (
        unknown_pre_tokenizer,
        "torch",
        "is not a pre-tokenizer midword models exactly",
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_a_bad_model_is_one_line_and_the_server_stays_up(tmp_path: Path, kind: str) -> None:
    make, backend, says = BAD[kind]
    path = make(tmp_path)
    async with raw_server() as (proc, client):
        await client.initialize({"model": str(path), "backend": backend})
        assert await client.wait_state("ready", "error", timeout=120) == "error"
        status = [n for n in client.notifications if n["method"] == "midword/status"][-1]
        message = status["params"]["message"]
        assert message.startswith("model load failed: ") and says in message, message
        assert "\n" not in message and "Traceback" not in message, message
        assert len(message) < 400, message
        client.open("file:///tmp/x.py", "import os\nos.pa")
        answer = await asyncio.wait_for(client.inline("file:///tmp/x.py", 1, 5, kind=1), 10)
        assert answer["result"]["items"] == []  # answered, empty: the server is up
        stats = await asyncio.wait_for(client.request("midword/stats", {}), 10)
        assert stats["result"]["state"] == "error"
        response = await asyncio.wait_for(client.request("shutdown", None), 10)
        assert "error" not in response
        client.notify("exit", None)
        await asyncio.wait_for(proc.wait(), 30)  # a loaded machine exits slowly
