"""Stage 2, the Valid Covering Tree (paper, section 3): pair validity, UTF-8 probes,
canonical checks of partial leaves, the leaf tables and their disk cache, the branching
tail, the per-tokenizer :class:`~midword.engine.tree.tables.Engine` and the streaming
:class:`~midword.engine.tree.vct.VCT`, plus the covering-tree half of SentencePiece.

Builds on :mod:`midword.engine.tokenize` only; no model is involved.
"""
