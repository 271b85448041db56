"""The slow reference for ``Engine.whole_words``, shared by the tests that check it."""

from __future__ import annotations

from midword.engine.tree.tables import Engine
from midword.engine.tree.utf8 import PROBE_ENDINGS


def plain_whole_words(engine: Engine, head: bytes) -> dict[int, set[bytes]]:
    """Tokens T with endings e such that ``head + T + e`` is a token: every token of the
    vocabulary that starts with ``head``, every probe ending, one by one."""
    out: dict[int, set[bytes]] = {}
    for word in [w for w in engine.tok.bytes_to_id if w.startswith(head)]:
        rest = word[len(head) :]
        for ext in PROBE_ENDINGS:
            if len(rest) > len(ext) and rest.endswith(ext):
                t = engine.tok.bytes_to_id.get(rest[: len(rest) - len(ext)])
                if t is not None:
                    out.setdefault(t, set()).add(ext)
    return out
