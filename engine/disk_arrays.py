"""The engine's disk cache files: named numpy arrays in one ``.npz`` file, written
atomically, read back as a plain dict, never trusted blindly.

Every table the engine derives from a tokenizer (leaf tables, saved whole words, the
NFC composing characters) goes through these helpers. Readers check what they load and
rebuild a file that is damaged or of another layout instead of failing.

>>> import tempfile
>>> from pathlib import Path
>>> path = Path(tempfile.mkdtemp()) / "demo.npz"
>>> save_arrays(path, {"ids": np.arange(3)})
>>> load_intact(path)["ids"].tolist(), load_intact(path.with_name("none.npz"))
([0, 1, 2], None)
>>> _ = path.write_bytes(b"torn")
>>> load_intact(path) is None
True
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["load_arrays", "load_intact", "save_arrays", "within"]


def load_arrays(path: Path | None) -> dict[str, np.ndarray] | None:
    """The arrays saved at ``path`` (None when there is no such file)."""
    if path is None or not path.is_file():
        return None
    with np.load(path) as arrays:
        return {k: arrays[k] for k in arrays.files}


def load_intact(path: Path | None) -> dict[str, np.ndarray] | None:
    """`load_arrays`, with None also for a file that cannot be read back (a bad CRC, a
    torn write, not a zip at all): the caller rebuilds it."""
    try:
        return load_arrays(path)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None


def save_arrays(path: Path | None, arrays: dict[str, np.ndarray]) -> None:
    """Save ``arrays`` at ``path`` (nothing when None), atomically."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique name: servers and test workers may write the same cache at once.
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def within(values: np.ndarray, lo: int, hi: int) -> bool:
    """Every value in ``[lo, hi)`` (an empty array is).

    >>> within(np.array([1, 2]), 0, 3), within(np.array([3]), 0, 3), within(np.array([]), 0, 1)
    (True, False, True)
    """
    return not len(values) or (int(values.min()) >= lo and int(values.max()) < hi)
