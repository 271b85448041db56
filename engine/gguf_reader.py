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

import functools
import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

_MISSING = object()
# GGUF metadata value types (gguf.GGUFValueType): numeric ones by their numpy type
_NUMERIC = {
    0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
    6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64,
}  # fmt: skip
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """The GGUF file is not one midword can convert exactly; the message says why."""


class GGUFFile:
    """A GGUF file: its metadata and tensor names read at once (:class:`_HeaderReader`),
    its tensors through the ``gguf`` package's reader, opened on first use
    (memory-mapped: tensor data is read lazily)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with self.path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                self.metadata, self._tensor_names = _HeaderReader(m).read()
        except (ValueError, OSError, struct.error, UnicodeDecodeError) as exc:
            raise GGUFError(f"cannot read {self.path} as a GGUF file: {exc}") from exc
        self.arch = str(self.get("general.architecture", ""))

    @functools.cached_property
    def reader(self) -> Any:
        """The ``gguf`` package's reader (slow on large vocabularies: every string of the
        metadata becomes a numpy view; only the tensors are read through it)."""
        import gguf

        try:
            return gguf.GGUFReader(str(self.path))
        except (ValueError, OSError) as exc:
            raise GGUFError(f"cannot read {self.path} as a GGUF file: {exc}") from exc

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """A metadata value (lists for arrays); GGUFError when missing and no default."""
        if key not in self.metadata:
            if default is _MISSING:
                raise GGUFError(f"{self.path.name}: metadata key {key} is missing")
            return default
        return self.metadata[key]

    def arch_value(self, key: str, default: Any = _MISSING) -> Any:
        """``<general.architecture>.<key>``, as :meth:`get`."""
        return self.get(f"{self.arch}.{key}", default)

    def tensor_names(self) -> set[str]:
        return set(self._tensor_names)


class _HeaderReader:
    """The metadata and tensor names of a GGUF file (versions 2 and 3, either byte
    order), read straight from its bytes: what ``gguf.GGUFReader(path).fields[key]
    .contents()`` gives (Python values, lists for arrays), in a fraction of the time on a
    vocabulary of 200,000 tokens."""

    def __init__(self, data: Any) -> None:
        self.data, self.pos, self.order = data, 0, "<"

    def read(self) -> tuple[dict[str, Any], list[str]]:
        if bytes(self.data[:4]) != b"GGUF":
            raise ValueError("no GGUF magic number")
        self.pos = 4
        version = self._unpack("I")
        if version & 0xFFFF == 0:  # written big-endian (the gguf package's own test)
            self.order = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not supported")
        n_tensors, n_kv = self._unpack("Q"), self._unpack("Q")
        metadata = {}
        for _ in range(n_kv):
            key = self._string()
            metadata[key] = self._value(self._unpack("I"))
        names = []
        for _ in range(n_tensors):
            names.append(self._string())
            n_dims = self._unpack("I")
            self.pos += 8 * n_dims + 4 + 8  # dims, type, offset
        return metadata, names

    def _unpack(self, code: str) -> int:
        (value,) = struct.unpack_from(self.order + code, self.data, self.pos)
        self.pos += struct.calcsize(code)
        return value

    def _string(self) -> str:
        size = self._unpack("Q")
        text = bytes(self.data[self.pos : self.pos + size]).decode("utf-8")
        self.pos += size
        return text

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, count = self._unpack("I"), self._unpack("Q")
            if item in _NUMERIC:
                return self._numbers(item, count).tolist()
            return [self._value(item) for _ in range(count)]
        if kind in _NUMERIC:
            return self._numbers(kind, 1).tolist()[0]
        raise ValueError(f"unknown metadata value type {kind}")

    def _numbers(self, kind: int, count: int) -> np.ndarray:
        dtype = np.dtype(_NUMERIC[kind]).newbyteorder(self.order)
        out = np.frombuffer(self.data, dtype, count, self.pos)
        self.pos += out.nbytes
        return out


def shortest_float(value: float) -> float:
    """The shortest decimal of a float32 metadata value, as the model's config had it (a
    float32 computation sees the same number).

    >>> shortest_float(np.float32(1e-5)), float(np.float32(1e-5))
    (1e-05, 9.999999747378752e-06)
    """
    return float(str(np.float32(value)))
