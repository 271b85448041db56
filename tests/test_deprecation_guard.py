"""The guard of tests/conftest.py: deprecation warnings caused by this checkout's calls are
caught, even when the library attributes them to its own frames; warnings a library
raises while it is imported are not."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

from midword.testing.deprecations import is_own_file, own_caller, own_deprecations

LIBRARY = """
import warnings

def old_api():
    warnings.warn("old_api is deprecated", FutureWarning, stacklevel=3)  # names no caller

def fine():
    warnings.warn("a plain user warning", UserWarning)
"""


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A module outside the checkout, as an installed library is."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    (folder / "fake_library.py").write_text(LIBRARY)
    (folder / "warns_on_import.py").write_text(
        "import warnings\nwarnings.warn('imported', DeprecationWarning)\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    yield importlib.import_module("fake_library")
    for name in ("fake_library", "warns_on_import"):
        sys.modules.pop(name, None)


def test_a_library_deprecation_caused_here_is_caught(library) -> None:  # noqa: ANN001
    with warnings.catch_warnings(record=True) as shown, own_deprecations() as caught:
        warnings.simplefilter("always")
        library.old_api()
        library.fine()
    assert [w.message for w in caught] == ["FutureWarning: old_api is deprecated"]
    assert caught[0].caller.startswith("tests/test_deprecation_guard.py:")
    assert len(shown) == 2  # still recorded as before, the user warning too


def test_import_time_warnings_are_the_librarys(library) -> None:  # noqa: ANN001
    with warnings.catch_warnings(record=True) as shown, own_deprecations() as caught:
        warnings.simplefilter("always")
        importlib.import_module("warns_on_import")
    assert caught == [] and [str(w.message) for w in shown] == ["imported"]


def test_ignored_warnings_stay_ignored(library) -> None:  # noqa: ANN001
    with warnings.catch_warnings(), own_deprecations() as caught:
        warnings.simplefilter("ignore")
        library.old_api()
    assert caught == []


def test_own_files_are_the_checkouts() -> None:
    assert is_own_file(__file__) and not is_own_file(pytest.__file__)
    assert own_caller(sys._getframe()).startswith("tests/test_deprecation_guard.py:")
    assert own_caller(None) is None
