r"""Character tests of the class machine (:mod:`~midword.engine.tokenize.class_machine`):
the `Atom` protocol (compiled single-character regexes and the tests derived from them
for chains of splits), which characters of a long text each one accepts, in one
vectorized pass (`atom_mask`), and the grouping of characters by their answers to every
atom (`signature_groups`): the character classes.

Example:
    >>> import regex
    >>> letter, digit = regex.compile(r"\p{L}"), regex.compile(r"\p{N}")
    >>> group, first, sigs = signature_groups([letter, digit], "ab1-2")
    >>> group.tolist() == [group[0]] * 2 + [group[2], group[3], group[2]]
    True
    >>> sigs.tolist()[:3]
    [[True, False], [True, False], [False, True]]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import numpy as np
import regex

from .unicode_versions import late_mask, own_tables_twin


class Classifier(Protocol):
    """What an atom asks of the class machine (:class:`~.class_machine.ClassMachine`, which
    imports this module): a character's class, and the classes of a text at once."""

    def char_class(self, ch: str) -> int: ...

    def bulk_classes(self, text: str, memo: dict | None = None) -> np.ndarray: ...


class Atom(Protocol):
    """A test of one character: compiled regex atoms and the derived ones below."""

    def fullmatch(self, ch: str) -> object | None: ...


class _Both:
    """Characters both atoms accept (an atom of a pattern restricted to one cell)."""

    def __init__(self, a: Atom, b: Atom) -> None:
        self.a, self.b = a, b

    def fullmatch(self, ch: str) -> bool | None:
        return True if self.a.fullmatch(ch) is not None and self.b.fullmatch(ch) else None


class _Outside:
    """Characters none of the atoms accept."""

    def __init__(self, atoms: list[Atom]) -> None:
        self.atoms = atoms

    def fullmatch(self, ch: str) -> bool | None:
        return None if any(a.fullmatch(ch) is not None for a in self.atoms) else True


class _ClassIn:
    """Characters of ``cell`` whose class under ``machine`` is one of ``ids``."""

    def __init__(self, machine: Classifier, ids: set[int], cell: Atom) -> None:
        self.machine, self.ids, self.cell = machine, frozenset(ids), cell

    def fullmatch(self, ch: str) -> bool | None:
        inside = self.cell.fullmatch(ch) is not None
        return True if inside and self.machine.char_class(ch) in self.ids else None


def atom_mask(atom: Atom, text: str, memo: dict) -> np.ndarray:
    """Which characters of ``text`` the atom accepts (memoized per atom in ``memo``)."""
    key = (id(atom), len(text))
    hit = memo.get(key)
    if hit is not None:
        return hit
    if isinstance(atom, _Both):
        out = atom_mask(atom.a, text, memo) & atom_mask(atom.b, text, memo)
    elif isinstance(atom, _Outside):
        out = ~np.logical_or.reduce([atom_mask(a, text, memo) for a in atom.atoms])
    elif isinstance(atom, _ClassIn):
        ids = atom.machine.bulk_classes(text, memo)
        out = atom_mask(atom.cell, text, memo) & np.isin(ids, list(atom.ids))
    else:  # a compiled single-character regex: mark its matches in one C-level pass
        twin = own_tables_twin(atom)  # (faster; the characters it reads otherwise redone)
        out = _marked(atom if twin is None else twin, text)
        if twin is not None:
            where, late_text = _late_characters_of(text, memo)
            out[where] = _marked(atom, late_text)
    memo[key] = out
    return out


def _marked(atom: regex.Pattern[str], text: str) -> np.ndarray:
    """Which characters of ``text`` the single-character regex accepts (one C-level pass)."""
    codes = np.frombuffer(atom.sub("\x00", text).encode("utf-32-le"), dtype=np.uint32)
    out = codes == 0
    out[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) == 0] = (
        atom.fullmatch("\x00") is not None
    )
    return out


def _late_characters_of(text: str, memo: dict) -> tuple[np.ndarray, str]:
    """Where ``text`` holds characters the two Unicode versions tell apart, and those
    characters (memoized per text in ``memo``)."""
    key = ("late", len(text))
    if key not in memo:
        where = np.flatnonzero(late_mask(np.frombuffer(text.encode("utf-32-le"), np.uint32)))
        memo[key] = where, "".join(text[i] for i in where)
    return memo[key]


def signature_groups(
    atoms: list[Atom], text: str, memo: dict | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group the characters of ``text`` by their answers to every atom: (group of each
    character, index of each group's first character, the answers [chars, atoms])."""
    memo = {} if memo is None else memo
    sigs = np.stack([atom_mask(a, text, memo) for a in atoms], axis=1)
    packed = np.ascontiguousarray(np.packbits(sigs, axis=1))
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first, sigs


@lru_cache(maxsize=1)
def unicode_text() -> str:
    """Every Unicode scalar value once, in order (surrogates cannot occur in UTF-8)."""
    return "".join(map(chr, [*range(0xD800), *range(0xE000, 0x110000)]))
