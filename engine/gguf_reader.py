"""Reading a GGUF file's metadata: the one error type, the file wrapper and the
shortest decimal of a float32 value (:func:`shortest_float`) that
:mod:`midword.engine.gguf` (the conversion, the tokenizer) and
:mod:`midword.engine.gguf_architectures` (the weights, config.json) share.

Example::

    gf = GGUFFile("starcoder2-3b.Q8_0.gguf")
    gf.arch                                 # 'starcoder2'
    gf.arch_value("attention.head_count")   # 24
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

_MISSING = object()


class GGUFError(ValueError):
    """The GGUF file is not one midword can convert exactly; the message says why."""


class GGUFFile:
    """A GGUF file opened with the ``gguf`` package (memory-mapped: tensors are read lazily)."""

    def __init__(self, path: str | Path) -> None:
        import gguf

        self.path = Path(path)
        try:
            self.reader = gguf.GGUFReader(str(self.path))
        except (ValueError, OSError) as exc:
            raise GGUFError(f"cannot read {self.path} as a GGUF file: {exc}") from exc
        self.arch = str(self.get("general.architecture", ""))

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """A metadata value (lists for arrays); GGUFError when missing and no default."""
        f = self.reader.fields.get(key)
        if f is None:
            if default is _MISSING:
                raise GGUFError(f"{self.path.name}: metadata key {key} is missing")
            return default
        return f.contents()

    def arch_value(self, key: str, default: Any = _MISSING) -> Any:
        """``<general.architecture>.<key>``, as :meth:`get`."""
        return self.get(f"{self.arch}.{key}", default)

    def tensor_names(self) -> set[str]:
        return {t.name for t in self.reader.tensors}


def shortest_float(value: float) -> float:
    """The shortest decimal of a float32 metadata value, as the model's config had it (a
    float32 computation sees the same number).

    >>> shortest_float(np.float32(1e-5)), float(np.float32(1e-5))
    (1e-05, 9.999999747378752e-06)
    """
    return float(str(np.float32(value)))
