"""Support shared by the tests (``tests/``) and the developers' benchmarks
(``benchmarks/``): one home for test data and stand-in models. Importing it imports
neither pytest nor torch.

- :mod:`.fixtures`: the real tokenizer files of six model families (npm fixtures,
  :data:`TOKENIZERS`, :func:`tokenizer_path`) and the real encoder (:func:`real_encoder`);
  the shipped small model is :func:`midword.models.shipped_test_model`.
- :mod:`.tiny_models`: random-weight Llama/Qwen2/Qwen3 models of any vocabulary size
  (torch is imported when one is built).
- :mod:`.bigram`: a token bigram model counted from text, a real stand-in model for
  any vocabulary (the inference-token benchmark).
- :mod:`.completeness`: the completeness fuzz of the streamed covering tree.
- :mod:`.corpus`: :data:`CORPUS`, short texts covering the cases the engine must get right.
- :mod:`.chars`: the characters a brute-force check tries inside a UTF-8 character.
- :mod:`.deprecations`: catches the deprecation warnings midword's own calls cause (the
  test suite fails on them).

Example:
    >>> from midword.testing import TOKENIZERS, tokenizer_path
    >>> [tokenizer_path(name).is_file() for name in TOKENIZERS[:2]]
    [True, True]
"""

from midword.models import shipped_test_model

from .corpus import CORPUS
from .fixtures import CHECKOUT_ROOT, TOKENIZERS, real_encoder, tokenizer_path

__all__ = [
    "CHECKOUT_ROOT",
    "CORPUS",
    "TOKENIZERS",
    "real_encoder",
    "shipped_test_model",
    "tokenizer_path",
]
