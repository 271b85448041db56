"""The engine's public error types, on the ground floor: every stage raises these,
and callers catch them without importing the stage that raised.

Each is a ``ValueError`` (bad input: a prefix, a file, a template) or a
``RuntimeError`` (a model that cannot load or run), so callers may catch broadly.

>>> issubclass(UncoverableByteError, PrefixError)
True
"""

from __future__ import annotations


class PrefixError(ValueError):
    """The prefix cannot be conditioned on (invalid UTF-8, too long ...)."""


class UncoverableByteError(PrefixError):
    """The prefix holds a byte that the vocabulary has no token for: no canonical token
    sequence spells it (the real encoder drops it), so no covering tree exists.

    >>> str(UncoverableByteError(0x04, 12))
    'byte 0x04 at offset 12 has no token in the vocabulary: no token sequence covers it'
    """

    def __init__(self, byte: int, offset: int) -> None:
        super().__init__(
            f"byte 0x{byte:02x} at offset {offset} has no token in the vocabulary: "
            "no token sequence covers it"
        )
        self.byte = byte
        self.offset = offset

    def __reduce__(self) -> tuple[type, tuple[int, int]]:  # (args differ from the message)
        return type(self), (self.byte, self.offset)


class TokenizerError(ValueError):
    """The tokenizer file is missing, malformed or of an unsupported kind."""


class UnsupportedSentencePiece(TokenizerError):
    """A SentencePiece feature midword does not model exactly (named in the message)."""


class PretokenizerError(ValueError):
    """The pre-tokenizer configuration is not one midword supports."""


class BackendError(RuntimeError):
    """A model could not be loaded or run; the message is one readable line.

    Example:
        >>> str(BackendError("model directory not found: /nope"))
        'model directory not found: /nope'
    """


class ForwardStopped(Exception):
    """A forward pass stopped between two layers when its caller asked (see
    `TreeScoringSession.stop_inside_forward`); the session holds what it held before.

    Not a RuntimeError: backends turn those into `BackendError`.
    """


class UnsupportedCacheError(RuntimeError):
    """The model built a cache layer we cannot select rows of (sliding window, linear, ...)."""


class GGUFError(ValueError):
    """The GGUF file is not one midword can convert exactly; the message says why."""


class ModelNotFoundError(ValueError):
    """``--model`` names no file or folder here, nor a hub id in the local cache."""


class FimError(ValueError):
    """A FIM setting that cannot apply: unknown template, or tokens the tokenizer lacks."""


class EngineError(BackendError):
    """The remote engine failed a request; the message says which engine and how."""


class EngineUnavailable(EngineError):
    """The engine could not be reached, or did not answer in time (worth retrying)."""


class EngineRefused(EngineError):
    """The engine answered with an HTTP error (its message is in ours)."""


class EngineMismatch(EngineError):
    """The engine serves another model or tokenizer than the local one (not retried)."""
