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

Example:
    >>> (shipped_test_model() / "config.json").is_file()
    True
    >>> default_model() == shipped_test_model()
    True
"""

from __future__ import annotations

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


# Tried in order by default_model(); each returns a model path or None.
DEFAULT_CANDIDATES: list[Callable[[], Path | None]] = [find_shipped_test_model]


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
