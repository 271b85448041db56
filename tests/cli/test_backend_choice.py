"""Which backend runs a model (engine/model/choice.py) and what the command line says
about it: llama.cpp for a GGUF file when llama-cpp-python is there, torch otherwise (with
one line saying how to install it), torch for a model folder, and one readable error for
a request that cannot be met."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from midword.engine import BackendError, choose_backend
from midword.engine.model import choice

from midword.models import shipped_test_model
from midword.testing.gguf_files import write_qwen2_gguf
from midword.testing.shapes import TINY_SHIPPED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("choice") / "tiny.gguf"
    write_qwen2_gguf(path, TINY_SHIPPED, shipped_test_model() / "tokenizer.json", "Q8_0")
    return path


def test_auto_picks_by_file_and_package(gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_backend(str(shipped_test_model())).backend == "torch"
    assert choose_backend(str(gguf), "torch").backend == "torch"
    monkeypatch.setattr(choice, "llamacpp_available", lambda: True)
    assert choose_backend(str(gguf)) == choice.BackendChoice("llamacpp")
    monkeypatch.setattr(choice, "llamacpp_available", lambda: False)
    fallback = choose_backend(str(gguf))
    assert fallback.backend == "torch"
    assert "pip install llama-cpp-python==0.3.36" in fallback.note and "\n" not in fallback.note


def test_requests_that_cannot_be_met(gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendError, match="runs GGUF files"):
        choose_backend(str(shipped_test_model()), "llamacpp")
    with pytest.raises(BackendError, match="unknown backend"):
        choose_backend(str(gguf), "onnx")
    monkeypatch.setattr(choice, "llamacpp_available", lambda: False)
    with pytest.raises(BackendError, match="pip install llama-cpp-python"):
        choose_backend(str(gguf), "llamacpp")


def test_the_command_line_says_it_in_one_line() -> None:
    cmd = [sys.executable, "-m", "midword", "complete", "--backend", "llamacpp"]
    run = subprocess.run(
        [*cmd, "--model", str(shipped_test_model()), "x = 1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr
    assert "runs GGUF files" in run.stderr and "Traceback" not in run.stderr


def test_context_cells_follow_the_request_and_the_training_length(gguf: Path) -> None:
    """llama.cpp allocates a context's KV cells up front: the server asks for what its
    window needs (2,048 at 4 KB), never more than the model was trained for."""
    pytest.importorskip("llama_cpp")
    from midword.engine import load_scoring_model
    from midword.server.loading import context_tokens

    trained = TINY_SHIPPED["max_position_embeddings"]
    asked = context_tokens(4096)
    loaded = load_scoring_model(str(gguf), backend="llamacpp", context_tokens=asked)
    assert asked == 2048 and loaded.model.context_length == min(asked, trained)
    assert loaded.model.new_context().ctx  # a context of that size is made
    short = load_scoring_model(str(gguf), backend="llamacpp", context_tokens=trained * 4)
    assert short.model.context_length == trained
    default = load_scoring_model(str(gguf), backend="llamacpp")
    assert default.model.context_length == min(4096, trained)
