r"""The class machine: a Split pattern (or a chain of Isolated splits) as a lazily
determinized automaton over character *classes*, so that where a pre-token ends can be
decided from a state instead of the text (the leaf tables and the covering tree's tail
read it). The patterns are parsed by `_Parser` into a small AST, compiled to a Pike VM
program (`_emit`), and run by :class:`ClassMachine`; a chain of splits becomes one
pattern first (`_chain_tree`).

Example:
    >>> m = ClassMachine(r"\p{L}+|\s+|\p{N}{1,3}")
    >>> m.match_end(m.classes("ab 1"))  # the first pre-token, "ab", ends at 2
    2
"""

from __future__ import annotations

import itertools

import numpy as np
import regex

from .char_atoms import (
    Atom,
    _Both,
    _ClassIn,
    _Outside,
    atom_mask,
    signature_groups,
    unicode_text,
)
from .unicode_versions import compile_as_tokenizers

END = -1  # pseudo class: the end of the text


class UnsupportedPattern(ValueError):
    """The Split regex uses syntax the class machine does not model (the caller falls back)."""


_QUANT = regex.compile(r"\{(\d+)(?:(,)(\d*))?\}")


class _Parser:
    """Recursive descent over the regex subset the Split patterns use.

    AST nodes: ("atom", k) one character test, ("cat", [..]), ("alt", [..]),
    ("rep", node, lo, hi|None) greedy repetition, ("look", negative, [atom ks]).
    """

    def __init__(self, pattern: str, atoms: list[Atom]) -> None:
        self.p, self.i, self.atoms = pattern, 0, atoms
        self.ignore_case = [False]

    def parse(self) -> tuple:
        node = self._alt()
        if self.i != len(self.p):
            raise UnsupportedPattern(f"unexpected {self.p[self.i]!r} at {self.i}")
        return node

    def _alt(self) -> tuple:
        branches = [self._cat()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self._cat())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def _cat(self) -> tuple:
        items = []
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            items.append(self._quantified(self._primary()))
        return ("cat", items)

    def _quantified(self, node: tuple) -> tuple:
        p = self.p
        if self.i >= len(p):
            return node
        c = p[self.i]
        if c in "?*+":
            self.i += 1
            lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
        elif (m := _QUANT.match(p, self.i)) is not None:
            self.i = m.end()
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        else:
            return node
        if self.i < len(p) and p[self.i] in "?+":
            raise UnsupportedPattern("lazy or possessive quantifier")
        return ("rep", node, lo, hi)

    def _primary(self) -> tuple:
        p, c = self.p, self.p[self.i]
        if c == "(":
            return self._group()
        if c == "[":
            end = self._class_end(self.i)
            return self._atom(p[self.i : end], end)
        if c == "\\":
            m = regex.compile(r"\\[pP]\{[^}]+\}|\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\.").match(
                p, self.i
            )
            if (
                m is None
                or m.group() in ("\\b", "\\B", "\\A", "\\Z", "\\G")
                or m.group()[1].isdigit()
            ):
                raise UnsupportedPattern(f"escape at {self.i}")
            return self._atom(m.group(), m.end())
        if c in "^$":
            raise UnsupportedPattern("anchors")
        return self._atom(c, self.i + 1)

    def _group(self) -> tuple:
        p = self.p
        heads = {"(?:": "plain", "(?i:": "icase", "(?!": "neg", "(?=": "pos"}
        head = next((h for h in heads if p.startswith(h, self.i)), None)
        if head is None and p.startswith("(?", self.i):
            raise UnsupportedPattern(f"group kind at {self.i}")
        kind = heads[head] if head is not None else "plain"
        self.i += len(head) if head is not None else 1
        self.ignore_case.append(kind == "icase" or self.ignore_case[-1])
        body = self._alt()
        self.ignore_case.pop()
        if self.i >= len(p) or p[self.i] != ")":
            raise UnsupportedPattern("unbalanced group")
        self.i += 1
        if kind in ("neg", "pos"):
            return ("look", kind == "neg", _single_chars(body))
        return body

    def _class_end(self, start: int) -> int:
        j = start + 1
        if j < len(self.p) and self.p[j] == "^":
            j += 1
        if j < len(self.p) and self.p[j] == "]":
            j += 1
        while j < len(self.p) and self.p[j] != "]":
            if self.p[j] == "[":
                raise UnsupportedPattern("nested character set")
            j += 2 if self.p[j] == "\\" else 1
        if j >= len(self.p):
            raise UnsupportedPattern("unterminated character set")
        return j + 1

    def _atom(self, src: str, end: int) -> tuple:
        self.i = end
        if src == ".":
            src = "[^\\n]"
        self.atoms.append(compile_as_tokenizers(f"(?i:{src})" if self.ignore_case[-1] else src))
        return ("atom", len(self.atoms) - 1)


def _single_chars(node: tuple) -> list[int]:
    """Atom indices of a lookahead body that tests exactly one character."""
    if node[0] == "atom":
        return [node[1]]
    if node[0] == "cat" and len(node[1]) == 1:
        return _single_chars(node[1][0])
    if node[0] == "alt":
        return [k for b in node[1] for k in _single_chars(b)]
    raise UnsupportedPattern("lookahead longer than one character")


def _emit(node: tuple, prog: list[list]) -> None:
    """Thompson construction; ``split`` lists its preferred target first."""
    kind = node[0]
    if kind == "atom":
        prog.append(["char", node[1]])
    elif kind == "look":
        prog.append(["look", node[1], tuple(node[2])])
    elif kind == "cat":
        for item in node[1]:
            _emit(item, prog)
    elif kind == "alt":
        jumps = []
        for n, branch in enumerate(node[1]):
            if n < len(node[1]) - 1:
                split = len(prog)
                prog.append(["split", split + 1, None])
                _emit(branch, prog)
                jumps.append(len(prog))
                prog.append(["jmp", None])
                prog[split][2] = len(prog)
            else:
                _emit(branch, prog)
        for j in jumps:
            prog[j][1] = len(prog)
    else:
        _emit_rep(node, prog)


def _emit_rep(node: tuple, prog: list[list]) -> None:
    _, body, lo, hi = node
    for _ in range(lo):
        _emit(body, prog)
    if hi is None:
        loop = len(prog)
        prog.append(["split", loop + 1, None])
        _emit(body, prog)
        prog.append(["jmp", loop])
        prog[loop][2] = len(prog)
        return
    exits = []
    for _ in range(hi - lo):
        exits.append(len(prog))
        prog.append(["split", len(prog) + 1, None])
        _emit(body, prog)
    for e in exits:
        prog[e][2] = len(prog)


class ClassMachine:
    """Leftmost-first (backtracking-equivalent) matcher of one Split pattern, run over
    character *classes* and determinized lazily: a Pike VM whose thread lists are states.

    Two characters with the same class (answers to every character test of the pattern)
    behave the same, so a state summarizes everything a match attempt remembers of the
    characters it read. ``step(state, cls)`` first closes the state at the current
    position (``cls`` is the next character, which lookaheads see; :data:`END` at the end
    of the text) and reports whether a match ends here, then consumes the character.
    The last position where a match was reported when the state dies is the match end.
    """

    DEAD, INIT = 0, 1

    def __init__(self, pattern: str) -> None:
        atoms: list[Atom] = []
        self._build(_Parser(pattern, atoms).parse(), atoms)

    @classmethod
    def for_chain(cls, patterns: list[str]) -> ClassMachine:
        """One machine for a chain of Isolated splits (see :func:`_chain_tree`)."""
        machine = cls.__new__(cls)
        machine._build(*_chain_tree(patterns))
        return machine

    @classmethod
    def _from_tree(cls, tree: tuple, atoms: list[Atom]) -> ClassMachine:
        machine = cls.__new__(cls)
        machine._build(tree, atoms)
        return machine

    def _build(self, tree: tuple, atoms: list[Atom]) -> None:
        self.atoms = atoms
        prog: list[list] = []
        _emit(tree, prog)
        prog.append(["match"])
        self.prog = [tuple(op) for op in prog]
        self.class_ids: dict[tuple[bool, ...], int] = {}
        self.class_sigs: list[tuple[bool, ...]] = []
        self._char_cls: dict[str, int] = {}
        self.state_pcs: list[tuple[int, ...]] = [(), (0,)]
        self._state_ids: dict[tuple[int, ...], int] = {(): 0, (0,): 1}
        self._delta: dict[tuple[int, int], tuple[bool, int]] = {}

    def char_class(self, ch: str) -> int:
        cid = self._char_cls.get(ch)
        if cid is None:
            cid = self._class_id(tuple(a.fullmatch(ch) is not None for a in self.atoms))
            self._char_cls[ch] = cid
        return cid

    def classes(self, text: str) -> list[int]:
        return [self.char_class(ch) for ch in text]

    def bulk_classes(self, text: str, memo: dict | None = None) -> np.ndarray:
        """The class of every character of a long text at once (all completions of a
        4-byte lead, all of Unicode): one vectorized pass per atom, nothing cached per
        character."""
        if not text:
            return np.zeros(0, dtype=np.int64)
        group, first, sigs = signature_groups(self.atoms, text, memo)
        ids = np.array([self._class_id(tuple(sigs[i].tolist())) for i in first])
        return ids[group]

    def _class_id(self, sig: tuple[bool, ...]) -> int:
        cid = self.class_ids.setdefault(sig, len(self.class_sigs))
        if cid == len(self.class_sigs):
            self.class_sigs.append(sig)
        return cid

    def step(self, state: int, cls: int) -> tuple[bool, int]:
        key = (state, cls)
        hit = self._delta.get(key)
        if hit is None:
            hit = self._delta[key] = self._step(state, cls)
        return hit

    def _step(self, state: int, cls: int) -> tuple[bool, int]:
        chars, matched = self._closure(self.state_pcs[state], cls)
        if cls == END:
            return matched, self.DEAD
        sig = self.class_sigs[cls]
        nxt = tuple(pc + 1 for pc in chars if sig[self.prog[pc][1]])
        sid = self._state_ids.get(nxt)
        if sid is None:
            sid = self._state_ids[nxt] = len(self.state_pcs)
            self.state_pcs.append(nxt)
        return matched, sid

    def _closure(self, pcs: tuple[int, ...], cls: int) -> tuple[list[int], bool]:
        """Threads waiting for a character, in priority order; a reached ``match`` cuts
        every lower-priority thread (leftmost-first semantics)."""
        out: list[int] = []
        seen: set[int] = set()
        stack = list(reversed(pcs))
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op = self.prog[pc]
            if op[0] == "char":
                out.append(pc)
            elif op[0] == "match":
                return out, True
            elif op[0] == "jmp":
                stack.append(op[1])
            elif op[0] == "split":
                stack.extend((op[2], op[1]))
            elif self._look_ok(op, cls):
                stack.append(pc + 1)
        return out, False

    def _look_ok(self, op: tuple, cls: int) -> bool:
        hit = cls != END and any(self.class_sigs[cls][k] for k in op[2])
        return hit != op[1]

    def match_end(self, classes: list[int], start: int = 0) -> int | None:
        """End of the anchored match at ``start`` of a whole text (None: no match)."""
        state, rec = self.INIT, None
        for i in range(start, len(classes) + 1):
            matched, state = self.step(state, classes[i] if i < len(classes) else END)
            if matched:
                rec = i
            if state == self.DEAD:
                break
        return rec


# ------------------------------------------------------------------ chains of splits
def _chain_tree(patterns: list[str]) -> tuple[tuple, list[Atom]]:
    """One leftmost-first pattern that splits text as a chain of Isolated splits does.

    Supported chains: every split but the last is a run of one character test
    (``A+`` or ``A{1,n}``), the tests are disjoint, and the last pattern never matches
    the empty string. The outer splits then cut the text into *cells*: maximal runs of
    each unbounded test, groups of each bounded one, and maximal runs of the characters
    no outer test accepts; the last pattern runs inside each cell, where a character
    outside the cell looks like the end of the text, and text it does not match (a gap)
    becomes a pre-token of its own. Raises :class:`UnsupportedPattern` otherwise.
    """
    atoms: list[Atom] = []
    trees = [_Parser(p, atoms).parse() for p in patterns]
    outer = [_run_of_one_atom(t) for t in trees[:-1]]
    memo: dict = {}
    universe = unicode_text()
    masks = [atom_mask(atoms[k], universe, memo) for k, _, _ in outer]
    if any((a & b).any() for a, b in itertools.combinations(masks, 2)):
        raise UnsupportedPattern("outer splits overlap")
    cells = [(atoms[k], lo, hi) for k, lo, hi in outer]
    cells.append((_Outside([atoms[k] for k, _, _ in outer]), 1, None))
    alts, gaps = [], []
    for cell, lo, hi in cells:
        atoms.append(cell)
        cell_k = len(atoms) - 1
        inner = _restrict(trees[-1], cell_k, atoms)
        probe = ClassMachine._from_tree(inner, list(atoms))
        starts = _match_starts(probe, cell, universe, memo)
        if hi is not None:  # a bounded group stays whole if the last pattern cannot split it
            if hi > 1 and any(starts.values()):  # (one character can never be split)
                raise UnsupportedPattern("the last split may cut a bounded outer group")
            alts.append(("rep", ("atom", cell_k), lo, hi))
            continue
        alts.append(inner)
        gap = _gap_tree(probe, cell, starts, atoms)
        if gap is not None:
            gaps.append(gap)
    return ("alt", alts + gaps), atoms


def _run_of_one_atom(tree: tuple) -> tuple[int, int, int | None]:
    """(atom, lo, hi) of a pattern ``A{lo,hi}`` with lo == 1, or of a bare ``A`` (one
    character: ``Digits(individual_digits)``); else unsupported."""
    while tree[0] == "cat" and len(tree[1]) == 1:
        tree = tree[1][0]
    if tree[0] == "atom":
        return tree[1], 1, 1
    if tree[0] != "rep" or tree[1][0] != "atom" or tree[2] != 1:
        raise UnsupportedPattern("an outer split that is not a run of one character test")
    return tree[1][1], tree[2], tree[3]


def _restrict(tree: tuple, cell: int, atoms: list[Atom]) -> tuple:
    """The pattern with every character test (lookaheads too) limited to the cell."""
    kind = tree[0]
    if kind == "atom":
        atoms.append(_Both(atoms[tree[1]], atoms[cell]))
        return ("atom", len(atoms) - 1)
    if kind == "look":
        ks = []
        for k in tree[2]:
            atoms.append(_Both(atoms[k], atoms[cell]))
            ks.append(len(atoms) - 1)
        return ("look", tree[1], ks)
    if kind in ("cat", "alt"):
        return (kind, [_restrict(t, cell, atoms) for t in tree[1]])
    return ("rep", _restrict(tree[1], cell, atoms), tree[2], tree[3])


def _match_starts(
    probe: ClassMachine, cell: Atom, universe: str, memo: dict
) -> dict[int, set[int]]:
    """For each class of the cell's characters: the classes of the next character (END
    included) after which a non-empty match starts at it. Raises when that needs more
    than one character of lookahead."""
    inside = atom_mask(cell, universe, memo)
    ids = probe.bulk_classes(universe, memo)
    realized = sorted({int(c) for c in np.unique(ids[inside])})
    nexts = [*realized, END]
    out: dict[int, set[int]] = {}
    for c in realized:
        empty, s1 = probe.step(ClassMachine.INIT, c)
        if empty:
            raise UnsupportedPattern("the last split matches the empty string")
        out[c] = {c2 for c2 in nexts if _starts_after(probe, s1, c2, realized)}
    return out


def _starts_after(probe: ClassMachine, s1: int, c2: int, realized: list[int]) -> bool:
    matched, s2 = probe.step(s1, c2)
    if matched or s2 == ClassMachine.DEAD:
        return matched
    if all(probe.step(s2, c3)[0] for c3 in [*realized, END]):
        return True
    if not _can_match(probe, s2, realized):
        return False
    raise UnsupportedPattern("whether a match starts needs two characters of lookahead")


def _can_match(probe: ClassMachine, state: int, realized: list[int]) -> bool:
    seen, todo = {state}, [state]
    while todo:
        st = todo.pop()
        for c in [*realized, END]:
            matched, nxt = probe.step(st, c)
            if matched:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def _gap_tree(
    probe: ClassMachine, cell: Atom, starts: dict[int, set[int]], atoms: list[Atom]
) -> tuple | None:
    """A run of the cell's characters at which no match starts: each one either never
    starts a match, or does only before certain next characters (a negative lookahead)."""
    never = {c for c, nxt in starts.items() if not nxt}
    branches: list[tuple] = []
    if never:
        atoms.append(_ClassIn(probe, never, cell))
        branches.append(("atom", len(atoms) - 1))
    realized = set(starts)
    for c, nxt in sorted(starts.items()):
        if not nxt or nxt >= realized | {END}:
            continue  # never starts, or always does
        if END in nxt:
            raise UnsupportedPattern("a gap character that starts a match at the end")
        atoms.append(_ClassIn(probe, {c}, cell))
        atoms.append(_ClassIn(probe, nxt, cell))
        branches.append(("cat", [("atom", len(atoms) - 2), ("look", True, [len(atoms) - 1])]))
    if not branches:
        return None
    return ("rep", ("alt", branches) if len(branches) > 1 else branches[0], 1, None)
