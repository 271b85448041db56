"""Where midword finds its models (midword/models.py): the shipped model in a checkout and
in an installed wheel, the default model's candidates in order, the message when none is
there, and the wheel's package data covering every file of the shipped model."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from midword import models
from midword.models import ModelNotFoundError, default_model, shipped_test_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _only_the_shipped_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the shipped model's places: the suite's pin of the default
    and SmolLM2 (tests/cli/test_default_model.py) stay out of them."""
    monkeypatch.setattr(models, "DEFAULT_CANDIDATES", [models.find_shipped_test_model])


def _fake_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_the_checkout_holds_the_shipped_model() -> None:
    found = shipped_test_model()
    assert found == ROOT / "models" / "default"
    assert (found / "model.safetensors").is_file()


def test_an_installed_copy_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed = _fake_model(tmp_path / "shipped_model")
    monkeypatch.setattr(models, "INSTALLED_TEST_MODEL", installed)
    assert shipped_test_model() == installed
    assert default_model() == installed


def test_a_folder_without_a_tokenizer_is_not_a_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    half = tmp_path / "shipped_model"
    half.mkdir()
    (half / "config.json").write_text("{}")
    monkeypatch.setattr(models, "INSTALLED_TEST_MODEL", half)
    assert shipped_test_model() == ROOT / "models" / "default"


def test_missing_everywhere_names_both_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "INSTALLED_TEST_MODEL", tmp_path / "a")
    monkeypatch.setattr(models, "CHECKOUT_TEST_MODEL", tmp_path / "b")
    with pytest.raises(ModelNotFoundError) as err:
        default_model()
    assert str(tmp_path / "a") in str(err.value) and str(tmp_path / "b") in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


def test_default_candidates_are_tried_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _fake_model(tmp_path / "first")
    tried: list[str] = []

    def absent() -> Path | None:
        tried.append("absent")
        return None

    def present() -> Path | None:
        tried.append("present")
        return first

    monkeypatch.setattr(
        models, "DEFAULT_CANDIDATES", [absent, present, models.find_shipped_test_model]
    )
    assert default_model() == first
    assert tried == ["absent", "present"]


def test_the_cli_default_is_the_finders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from midword.modelargs import default_model_arg

    assert default_model_arg() == str(default_model())
    monkeypatch.setattr(models, "DEFAULT_CANDIDATES", [])
    monkeypatch.setattr(models, "INSTALLED_TEST_MODEL", tmp_path / "a")
    monkeypatch.setattr(models, "CHECKOUT_TEST_MODEL", tmp_path / "b")
    assert default_model_arg() is None


def test_the_wheel_ships_every_file_of_the_shipped_model() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package = "midword.shipped_model"
    assert package in config["packages"]
    assert config["package-dir"][package] == "models/default"
    patterns = config["package-data"][package]
    files = [p.name for p in (ROOT / "models" / "default").iterdir() if p.is_file()]
    left_out = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert "model.safetensors" in files and left_out == []
