"""Stage 1, text to tokens: byte vocabularies, pre-tokenization (regex splits, Unicode
tables as the tokenizers library reads them), BPE with merges in normal form, and the
tokenizer half of SentencePiece. Loads tokenizer.json and tokenizer.model files
(:func:`~midword.engine.tokenize.tokenizer.load_hf_tokenizer`; a GGUF file's through
:mod:`midword.engine.gguf.tokenizer`).

Nothing here knows about covering trees or models; everything above builds on it.
"""
