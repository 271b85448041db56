"""Where to cut held-out code to test a model mid-word (benchmarks/bench_default_model.py
and models/eval_fim.py score the character after each cut)."""

from __future__ import annotations

import io
import math
import tokenize

__all__ = ["accuracy_table", "identifier_cuts"]


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


def accuracy_table(hits: dict[str, list[bool]], labels: dict[str, str]) -> str:
    """A markdown table of next-character accuracy (± one standard error) per method, in
    the order of ``labels`` (method -> row label).

    >>> print(accuracy_table({"a": [True, False]}, {"a": "method A"}), end="")
    | method | next-char accuracy | correct / cuts |
    | --- | --- | --- |
    | method A | 0.500 ± 0.354 | 1 / 2 |
    """
    rows = ["| method | next-char accuracy | correct / cuts |", "| --- | --- | --- |"]
    for name, label in labels.items():
        xs = hits[name]
        acc = sum(xs) / len(xs)
        se = math.sqrt(acc * (1 - acc) / len(xs))
        rows.append(f"| {label} | {acc:.3f} ± {se:.3f} | {sum(xs)} / {len(xs)} |")
    return "\n".join(rows) + "\n"
