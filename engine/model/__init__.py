"""Stage 3, scoring: the backend protocols (:class:`~midword.engine.model.backend.ScoringModel`,
tree-scoring sessions), the KV cache, the transformers backend with its tree mask, the
CPU head, fitting a context into the model's window, and finding a model file.

A new in-process backend goes here, beside the transformers one, and implements the
protocols of :mod:`~midword.engine.model.backend`.
"""
