"""GGUF model files: the reader (memory-mapped tensors, metadata), the tokenizer
rebuilt from the metadata, the architectures converted to transformers (with their
RoPE rules) and the float32 conversion with its cache.

Builds on :mod:`midword.engine.tokenize`; the model backends load what it converts.
"""
