"""The open match attempts of every prefix of a region's character classes
(:class:`ConfigScan`), one character at a time, for the tail builder's table verdicts.
"""

from __future__ import annotations

from ..tokenize.class_machine import ClassMachine
from .leaf_tables import Config


class ConfigScan:
    r""":func:`~midword.engine.tree.leaf_tables.scan_configs` of every prefix of one class
    sequence, one character at a time: O(1) a character instead of a scan of the whole
    prefix for each (the tail asks it at every offset near the region's end, and the next
    key's builder goes on from where this one stopped).

    ``_raw[k]``: the attempts still open after ``k`` characters (`scan_configs`'s answer
    before its empty-match check, which a later character may still pass), or None once
    some attempt died without a match (no later character revives it).

    Example (llama3's pattern: letters run on, a space starts a new pre-token):
        >>> from midword.engine.tree.leaf_tables import scan_configs
        >>> from midword.engine.tokenize.class_machine import ClassMachine
        >>> m = ClassMachine(r" ?\p{L}+| ?\p{N}+|\s+")
        >>> classes = m.classes("ab cd")
        >>> scan = ConfigScan(m)
        >>> all(scan.at(k, classes) == scan_configs(m, classes[:k]) for k in range(6))
        True
    """

    def __init__(self, machine: ClassMachine, raw: list[tuple[Config, ...] | None] | None = None):
        self.machine = machine
        self._raw = raw or [(Config((), 0, ClassMachine.INIT, None),)]

    def head(self, k: int) -> ConfigScan:
        """A scan that shares this one's first ``k`` characters (another region that
        starts with them)."""
        return ConfigScan(self.machine, self._raw[: k + 1])

    def at(self, k: int, classes: list[int]) -> list[Config] | None:
        """`scan_configs` of ``classes[:k]`` (``classes`` extends what was scanned)."""
        raw = self._raw
        while len(raw) <= k:
            before = raw[-1]
            i = len(raw) - 1
            raw.append(None if before is None else self._step(before, classes[i], i))
        got = raw[k]
        if got is None or (got[-1].pending is not None and got[-1].pending <= got[-1].start):
            return None  # some attempt died unmatched, or the last one matched empty
        return list(got)

    def _step(self, before: tuple[Config, ...], cls: int, i: int) -> tuple[Config, ...] | None:
        """The attempts open after character ``i`` (class ``cls``), from those before it:
        `scan_configs`'s loop, resumed where each attempt stood."""
        out: list[Config] = []
        index, att = 0, before[0]
        while True:
            matched, state = self.machine.step(att.state, cls)
            rec = i if matched else att.pending
            if state == ClassMachine.DEAD:
                if rec is None or rec <= att.start:
                    return None
            else:
                out.append(Config(att.splits, att.start, state, rec))
                if rec is None or rec <= att.start:
                    return tuple(out)  # the end (or an empty match, refused by `at`)
            if matched:  # the attempt ends here: a new one starts with this character
                att = Config((*att.splits, i), i, ClassMachine.INIT, None)
            else:  # it ends at its pending match: the next attempt was already running
                index += 1
                att = before[index]
