"""What ``--model`` may name (engine/model/files.py): a folder, a GGUF file, or a hub id
already in the local Hugging Face cache; anything else is one clear error, never a
download and never a message about a missing tokenizer.json.

The cache here is built by hand in huggingface_hub's layout
(``models--ORG--NAME/refs/main`` holding a commit, ``snapshots/<commit>/`` the files) and
read by the real huggingface_hub, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from midword.engine.errors import ModelNotFoundError
from midword.engine.model.files import local_model, prepare_model

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "default"
REPO_ID = "midword-test/tiny-default"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache holding the shipped test model as ``REPO_ID``."""
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / f"models--{REPO_ID.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(SHIPPED, repo / "snapshots" / COMMIT)
    return cache


def test_a_cached_hub_id_is_its_snapshot_folder(hub_cache: Path) -> None:
    folder = Path(local_model(REPO_ID, hub_cache=hub_cache))
    assert folder == hub_cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / COMMIT
    assert (folder / "tokenizer.json").is_file() and (folder / "config.json").is_file()


def test_folders_and_files_are_used_as_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert prepare_model(str(SHIPPED)) == str(SHIPPED)
    two_parts = tmp_path / "org" / "model"  # an existing folder shaped like a hub id
    two_parts.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert local_model("org/model", hub_cache=tmp_path / "empty") == "org/model"


def test_a_hub_id_missing_from_the_cache_says_midword_never_downloads(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        local_model("someone/some-model", hub_cache=tmp_path)
    message = str(caught.value)
    assert "someone/some-model" in message and str(tmp_path) in message
    assert "never downloads" in message and "huggingface-cli download" in message


@pytest.mark.parametrize("name", ["/no/such/model", "./nope", "~/nope", "a/b/c", "nope.gguf"])
def test_a_missing_path_is_not_looked_up_as_a_hub_id(name: str, tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="no file or folder") as caught:
        local_model(name, hub_cache=tmp_path)
    assert "Hugging Face cache" not in str(caught.value)


def _complete(model: str, hub_cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"}
    argv = ["--device", "cpu", "--dtype", "float32", "--max-tokens", "6", "--json"]
    return subprocess.run(
        [sys.executable, "-m", "midword", "complete", "--model", model, *argv, "def mai"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


def test_complete_runs_on_a_cached_hub_id_as_on_its_folder(hub_cache: Path) -> None:
    """Greedy, so the hub id and the folder it names give the same completion."""
    by_id, by_folder = _complete(REPO_ID, hub_cache), _complete(str(SHIPPED), hub_cache)
    assert by_id.returncode == 0, by_id.stderr[-2000:]
    assert by_folder.returncode == 0, by_folder.stderr[-2000:]
    first, second = json.loads(by_id.stdout), json.loads(by_folder.stdout)
    assert first["completion_hex"] == second["completion_hex"]
    assert first["tokens"] > 0


@pytest.mark.parametrize("name", ["/no/such/model", "someone/some-model"])
def test_complete_with_a_missing_model_is_one_line(name: str, tmp_path: Path) -> None:
    run = _complete(name, tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("midword complete: error: model not found: "), last
    assert "Traceback" not in run.stderr and "tokenizer.json" not in run.stderr
