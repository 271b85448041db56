"""Where to cut held-out code to test a model mid-word (benchmarks/bench_default_model.py
and models/eval_fim.py score the character after each cut)."""

from __future__ import annotations

import io
import tokenize

__all__ = ["identifier_cuts"]


def identifier_cuts(text: str) -> list[int]:
    """Character offsets strictly inside a NAME token of ``text`` (Python's tokenizer).

    >>> identifier_cuts("x = abc  # dd\\n")
    [5, 6]
    """
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    cuts: list[int] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NAME and len(tok.string) > 1:
                begin = starts[tok.start[0] - 1] + tok.start[1]
                cuts.extend(range(begin + 1, begin + len(tok.string)))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []  # a file Python cannot tokenize has no well-defined identifiers
    return cuts
