"""Keeping a prompt within the positions a model was built for.

A model takes at most ``max_context`` positions (``max_position_embeddings``,
``n_positions``, ... in its config). Past them a model with learned absolute positions
(GPT-2, StarCoder 1) fails with an index error, and a rotary one reads positions it was
never trained at: the shipped test model has 512, while the language server's default
prompt window is 4,096 bytes, about 1,300 of its tokens. So the prompt is cut in bytes,
before the covering tree is built: `ContextFit` drops whole lines from its front until
the tree's settled tokens and the room to generate fit. The cut is then kept while the
user types (the kept text, and the KV cache holding it, stay the same), and moved on by
a quarter of the context more than needed, so that typing does not move it at every key.

Cutting the prompt in bytes keeps ByteSampler exact: the distribution sampled is the
exact one given the shorter prompt, the same as a smaller ``windowBytes`` would give.

>>> fit = ContextFit(max_context=64)
>>> fit.room
48
>>> prompt = b"".join(b"line %d\\n" % i for i in range(40))  # 310 bytes
>>> cut = fit.refit(prompt, used=80)  # 80 tokens do not fit in 48: lines go
>>> cut.startswith(b"line ") and prompt.endswith(cut) and len(cut) < len(prompt) * 48 // 80
True
>>> fit.apply(prompt + b"x") == cut + b"x"  # typing keeps the cut
True
>>> fit.refit(cut, used=30) is None  # fits
True
>>> ContextFit(None).refit(prompt, used=10_000) is None  # no limit known
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["SUFFIX_SHARE", "ContextFit", "context_length", "fitted", "suffix_lines"]

HEADROOM_SHARE = 8  # room to generate and for the tree's tail: max(16, context // 8) tokens
SUFFIX_SHARE = 3  # a fill-in-the-middle suffix takes at most this share of the room
TAIL_TOKENS = 8  # the chosen leaf's tokens after the settled ones (a tree is a few deep)
SLACK_SHARE = 4  # a new cut drops this share of the context more than it must
_CONFIG_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")


def context_length(config: Any) -> int | None:
    """The positions a model config declares (None when it declares none).

    >>> from types import SimpleNamespace
    >>> context_length(SimpleNamespace(max_position_embeddings=512))
    512
    >>> context_length(SimpleNamespace(n_positions=1024)), context_length(SimpleNamespace())
    (1024, None)
    """
    for key in _CONFIG_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class ContextFit:
    """The cut at the front of one document's prompt (see the module docstring)."""

    def __init__(self, max_context: int | None) -> None:
        self.max_context = max_context
        self.dropped = b""  # the bytes cut from the front of the prompt, kept while it starts so

    @property
    def room(self) -> int:
        """Tokens the prompt may take (the rest is left to generate)."""
        if self.max_context is None:
            return 1 << 62
        return max(1, self.max_context - max(16, self.max_context // HEADROOM_SHARE))

    def apply(self, prompt: bytes) -> bytes:
        """``prompt`` without the bytes cut last time, if it still starts with them; a prompt
        whose front changed (the window moved, another file's snippet changed) starts over
        uncut."""
        if self.dropped and prompt.startswith(self.dropped) and len(prompt) > len(self.dropped):
            return prompt[len(self.dropped) :]
        self.dropped = b""
        return prompt

    def refit(self, prompt: bytes, used: int) -> bytes | None:
        """None when ``prompt`` (as `apply` returned it), which takes ``used`` tokens, fits;
        else a shorter prompt: ``prompt`` after the first line end past the bytes its
        surplus tokens hold, plus a quarter of the context (estimated at the prompt's mean
        bytes per token). The cut is remembered for `apply`. The caller builds the tree
        again and calls this again until it fits."""
        if used <= self.room or len(prompt) < 2:
            return None
        surplus = used - self.room + (self.max_context or 0) // SLACK_SHARE
        at = min(len(prompt) - 1, max(1, surplus * len(prompt) // max(1, used)))
        line_end = prompt.find(b"\n", at - 1, len(prompt) - 1)
        at = line_end + 1 if line_end >= 0 else _char_start(prompt, at)
        if at == 0:  # one character: nothing left to cut
            return None
        self.dropped += prompt[:at]
        return prompt[at:]

    def new_tokens(self, used: int) -> int:
        """How many tokens may be generated after a prompt of ``used`` tokens."""
        if self.max_context is None:
            return 1 << 62
        return max(1, self.max_context - used - TAIL_TOKENS)


def fitted(fit: ContextFit, prompt: bytes, build: Callable[[bytes], int], tries: int = 4) -> bytes:
    """``prompt`` cut by ``fit`` until it fits; ``build(p)`` moves the covering tree to the
    prompt ``p`` and returns the positions it then takes. The tree is left at the prompt
    returned (after ``tries`` cuts it is used as it is).

    >>> fit = ContextFit(max_context=32)
    >>> prompt = b"".join(b"row %02d\\n" % i for i in range(30))  # 7 bytes, 2 tokens a line
    >>> cut = fitted(fit, prompt, lambda p: 1 + 2 * p.count(b"\\n"))
    >>> 1 + 2 * cut.count(b"\\n") <= fit.room, cut.startswith(b"row ")
    (True, True)
    """
    prompt = fit.apply(prompt)
    used = build(prompt)
    for _ in range(tries):
        shorter = fit.refit(prompt, used)
        if shorter is None:
            break
        prompt = shorter
        used = build(prompt)
    return prompt


def suffix_lines(fit: ContextFit, suffix: bytes, count: Callable[[bytes], int]) -> bytes:
    """The first whole lines of a fill-in-the-middle ``suffix`` that take at most
    1/`SUFFIX_SHARE` of ``fit.room`` tokens (``count(text)``: its tokens), so that a model
    with a short context does not give it all to the text after the cursor.

    >>> suffix = b"".join(b"line %d\\n" % i for i in range(10))  # 2 tokens a line here
    >>> suffix_lines(ContextFit(max_context=40), suffix, lambda t: 2 * t.count(b"\\n"))
    b'line 0\\nline 1\\nline 2\\nline 3\\n'
    >>> suffix_lines(ContextFit(None), suffix, len) == suffix
    True
    """
    if fit.max_context is None:
        return suffix
    limit = fit.room // SUFFIX_SHARE
    kept, tokens = suffix, count(suffix)
    while tokens > limit and kept:
        line_end = kept.rfind(b"\n", 0, max(1, len(kept) * limit // tokens))
        kept = kept[: line_end + 1] if line_end >= 0 else b""
        tokens = count(kept)
    return kept


def _char_start(data: bytes, at: int) -> int:
    """The first byte of the UTF-8 character that holds byte ``at`` (a line too long to cut
    at a line end is cut inside, never inside a character; moving back keeps the cut
    valid even in the last character, which may be partial).

    >>> _char_start("aé".encode(), 2), _char_start("aé".encode(), 1), _char_start(b"ab", 1)
    (1, 1, 1)
    """
    while at > 0 and data[at] & 0xC0 == 0x80:
        at -= 1
    return at
