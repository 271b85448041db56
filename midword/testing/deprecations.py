"""Catch the deprecation warnings that midword's own calls cause.

A library that deprecates an argument warns inside itself, and its ``stacklevel`` often
names one of its own frames (transformers' ``past_key_values`` warning names torch's
module-call wrapper), so a filter on the warning's module misses it. Here the stack is
read when the warning is shown: the warning is ours when the innermost frame from this
checkout (``engine/``, ``server/``, ``midword/``, ``tests/``, ``benchmarks/``) called the
code that warned, other than by importing a module (a library's import-time warnings
are its own business).

Example:
    >>> is_own_file(__file__), is_own_file(warnings.__file__)
    (True, False)
    >>> with own_deprecations() as caught:  # as tests/conftest.py wraps every test
    ...     pass
    >>> caught
    []
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO

from .fixtures import CHECKOUT_ROOT

CATEGORIES = (DeprecationWarning, FutureWarning, PendingDeprecationWarning)
_OWN = str(CHECKOUT_ROOT) + os.sep
_NOT_OURS = ("site-packages", "node_modules", ".venv")


@dataclass(frozen=True)
class OwnDeprecation:
    """A deprecation warning and the line of this checkout that caused it."""

    message: str
    caller: str

    def __str__(self) -> str:
        return f"{self.message} (caused by {self.caller})"


def is_own_file(filename: str) -> bool:
    """Is ``filename`` code of this checkout (not an installed library)?"""
    return filename.startswith(_OWN) and not any(part in filename for part in _NOT_OURS)


def own_caller(frame: FrameType | None) -> str | None:
    """``path:line`` of the innermost frame of this checkout on the stack of ``frame``;
    None when there is none, or when a module import lies between it and the warning."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<frozen importlib"):
            return None  # warned while a module was being imported
        if is_own_file(filename):
            return f"{os.path.relpath(filename, CHECKOUT_ROOT)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


@contextlib.contextmanager
def own_deprecations() -> Iterator[list[OwnDeprecation]]:
    """Collect, inside the block, the deprecation warnings caused by this checkout's code.

    Warnings are still shown (or recorded) as before: the collector only reads the stack
    at the moment each one is shown, so filters that ignore a warning hide it here too.
    """
    caught: list[OwnDeprecation] = []
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, CATEGORIES):
            caller = own_caller(sys._getframe(1))
            if caller is not None:
                caught.append(OwnDeprecation(f"{category.__name__}: {message}", caller))
        _pass_on(previous, message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield caught
    finally:
        warnings.showwarning = previous


def _pass_on(previous: Any, *args: Any) -> None:
    """Show the warning as it would have been shown without the collector: through the
    replaced ``showwarning`` if someone had replaced it, else through the current sink
    (``warnings.catch_warnings(record=True)``, as pytest uses, appends to its list)."""
    if previous is not warnings._showwarning_orig:  # type: ignore[attr-defined]
        previous(*args)
        return
    warnings._showwarnmsg_impl(warnings.WarningMessage(*args))  # type: ignore[attr-defined]
