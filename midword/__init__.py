"""midword: exact byte-level code completion (ByteSampler) for BPE language models.

The engine lives in :mod:`midword.engine`; the language server in
:mod:`midword.server`; the command line in :mod:`midword.cli`.
"""

__version__ = "0.1.0"
