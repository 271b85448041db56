"""Reading a GGUF file: the one error type, the file wrapper (metadata, tensor table and
memory-mapped tensors, read here: the ``gguf`` package's own reader spends seconds on a
large vocabulary) and the shortest decimal of a float32 value (:func:`shortest_float`)
that :mod:`midword.engine.gguf.convert` (the conversion, the tokenizer) and
:mod:`midword.engine.gguf.architectures` (the weights, config.json) share.

Example::

    gf = GGUFFile("starcoder2-3b.Q8_0.gguf")
    gf.arch                                 # 'starcoder2'
    gf.arch_value("attention.head_count")   # 24
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GGUFError

_MISSING = object()
# GGUF metadata value types (gguf.GGUFValueType): numeric ones by their numpy type
_NUMERIC = {
    0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32,
    6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64,
}  # fmt: skip
_STRING, _ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32  # of the tensor data, unless general.alignment says otherwise
# ggml tensor types stored as plain arrays (gguf.GGMLQuantizationType values); the others
# are blocks of bytes that gguf.quants.dequantize reads
_PLAIN_TENSORS = {
    0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32, 27: np.int64,
    28: np.float64,
}  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lies in the file: its name, ggml type, dims (GGUF order: the
    fastest-varying first) and byte offset from the file's start."""

    name: str
    kind: int
    dims: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class Tensor:
    """A tensor as ``gguf.GGUFReader`` gives it (the fields midword reads): ``data`` a
    read-only view of the mapped file, shaped as ``gguf.quants.dequantize`` takes it."""

    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    data: np.ndarray
    n_bytes: int


# (elements, bytes) of a block of each ggml tensor type up to BF16, as the gguf package's
# GGML_QUANT_SIZES gives them (tests/gguf hold the two equal): the tensor table is checked
# when a file is opened, and importing the package to size it (46 modules and PyYAML) kept
# 7 MiB resident in a llama.cpp server that reads nothing else with it
BLOCK_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1),
    25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
}  # fmt: skip


class GGUFFile:
    """A GGUF file: its metadata and tensor table read at once (:class:`_HeaderReader`;
    the ``gguf`` package's reader takes seconds on a large vocabulary, making a numpy
    view of every string), its tensors memory-mapped (read lazily)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with self.path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                header = _HeaderReader(m)
                self.metadata, self._infos = header.read()
                self._byte_order = header.order
                for info in self._infos:
                    if info.offset + self._n_bytes(info) > len(m):
                        raise ValueError(f"tensor {info.name} runs past the file's end")
        except struct.error as exc:  # (a read past the end: the header is cut short)
            raise GGUFError(
                f"cannot read {self.path} as a GGUF file: it ends inside its header "
                "(truncated or corrupt)"
            ) from exc
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise GGUFError(f"cannot read {self.path} as a GGUF file: {exc}") from exc
        self.arch = str(self.get("general.architecture", ""))

    @functools.cached_property
    def tensors(self) -> list[Tensor]:
        """Every tensor, in file order, as the ``gguf`` package's reader gives them."""
        from gguf import GGMLQuantizationType
        from gguf.quants import quant_shape_to_byte_shape

        mapped = np.memmap(self.path, mode="r")
        out = []
        for info in self._infos:
            kind, n_bytes = GGMLQuantizationType(info.kind), self._n_bytes(info)
            shape = tuple(reversed(info.dims))
            raw = mapped[info.offset : info.offset + n_bytes]
            if info.kind in _PLAIN_TENSORS:
                dtype = np.dtype(_PLAIN_TENSORS[info.kind]).newbyteorder(self._byte_order)
                data = raw.view(dtype).reshape(shape)
                if not dtype.isnative:  # (gguf.quants.dequantize assumes native order)
                    data = data.astype(dtype.newbyteorder("="))
            else:
                data = raw.reshape(quant_shape_to_byte_shape(shape, kind))
            out.append(Tensor(info.name, kind, data, n_bytes))
        return out

    @staticmethod
    def _n_bytes(info: TensorInfo) -> int:
        sizes = BLOCK_SIZES.get(info.kind)
        if sizes is None:  # a newer type: the gguf package knows it (or refuses it)
            from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

            sizes = GGML_QUANT_SIZES[GGMLQuantizationType(info.kind)]
        block, size = sizes
        return int(np.prod(info.dims, dtype=np.int64)) * size // block

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
        return {info.name for info in self._infos}


class _HeaderReader:
    """The metadata and tensor table of a GGUF file (versions 2 and 3, either byte
    order), read straight from its bytes: the values ``gguf.GGUFReader(path).fields[key]
    .contents()`` gives (Python values, lists for arrays) and where each tensor lies, in
    a fraction of the time on a vocabulary of 200,000 tokens."""

    def __init__(self, data: Any) -> None:
        self.data, self.pos, self.order = data, 0, "<"

    def read(self) -> tuple[dict[str, Any], list[TensorInfo]]:
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
        table = []
        for _ in range(n_tensors):
            name = self._string()
            dims = tuple(self._unpack("Q") for _ in range(self._unpack("I")))
            kind, offset = self._unpack("I"), self._unpack("Q")
            table.append((name, dims, kind, offset))
        align = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if align <= 0 or align & (align - 1):
            raise ValueError(f"general.alignment {align} is not a power of two")
        start = -(-self.pos // align) * align  # the tensor data, aligned
        return metadata, [TensorInfo(n, k, d, start + o) for n, d, k, o in table]

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
