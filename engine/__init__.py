"""midword's engine: exact next-byte distributions and completions from a BPE language
model, by the Valid Covering Tree (every canonical token sequence that covers a byte
prefix) and the ByteSampler on top of it.

The engine is a house of stage folders, each importing only the floors below it:

- :mod:`.errors`: the public error types (ground floor);
- :mod:`.tokenize`: byte vocabularies, pre-tokenization, BPE, tokenizer files;
- :mod:`.tree`: the Valid Covering Tree and the per-tokenizer :class:`Engine` tables;
- :mod:`.gguf`: GGUF files: reader, tokenizer rebuild, conversion;
- :mod:`.model`: scoring backends and their protocols;
- :mod:`.sample`: the ByteSampler, generation, FIM, ensembles;
- :mod:`.remote`: scoring on a shared vLLM server.

This module is the engine's one face: the server, the command line, ``midword bench``
and the benchmarks import every engine name from here (tests may reach inside). Names
are imported on first use, so ``import midword.engine`` stays cheap (no torch, no
tables built). Example::

    from midword.engine import ByteSampler, build_tree, load_engine, load_hf_model

    engine = load_engine("models/default")  # per-tokenizer tables, once per process
    tree = build_tree(engine, b"parser = argparse.ArgumentPar")
    print(tree.trunk, tree.internal_count, tree.leaf_count)

    model = load_hf_model("models/default")  # torch and transformers load here
    sampler = ByteSampler(model, engine)
    sampler.push(b"def fib(n):\\n    ret")
    print(sampler.next_bytes().next[ord("u")])  # log P(next byte = "u" | prefix)
"""

from __future__ import annotations

import importlib
from typing import Any

# module (under midword.engine) -> the public names it defines; each name is written once
_FACE: dict[str, tuple[str, ...]] = {
    "errors": (
        "BackendError",
        "EngineError",
        "EngineMismatch",
        "EngineRefused",
        "EngineUnavailable",
        "FimError",
        "ForwardStopped",
        "GGUFError",
        "ModelNotFoundError",
        "PrefixError",
        "PretokenizerError",
        "TokenizerError",
        "UncoverableByteError",
        "UnsupportedCacheError",
        "UnsupportedSentencePiece",
    ),
    "tokenize.bytelevel": ("BYTE_TO_CHAR",),
    "tokenize.bpe": ("BPETokenizer", "cache_root"),
    "tokenize.tokenizer": ("load_hf_tokenizer",),
    "tree.completions": ("completion_points", "utf8_length"),
    "tree.utf8": ("split_utf8",),
    "tree.tail_types": ("TailNode",),
    "tree.tables": ("Engine", "engine_for", "load_engine"),
    "tree.vct": ("build_tree", "Tree", "VCT"),
    "gguf.tokenizer": ("gguf_tokenizer", "load_tokenizer", "rebuilt_tokenizer_json"),
    "model.backend": ("ForwardDone", "observe_forwards", "ScoringModel", "TreeScoringSession"),
    "model.forward_plan": ("ForwardStep",),
    "model.kvcache": ("KVCache",),
    "model.context_fit": ("ContextFit", "fitted", "suffix_lines"),
    "model.devices": ("resolve_device",),
    "model.hf_backend": ("HFModel", "HFSession"),
    "model.llamacpp": ("LlamaCppModel", "load_llamacpp_model"),
    "model.hf_loading": ("DTYPES", "load_hf_model"),
    "model.choice": (
        "BACKENDS",
        "BackendChoice",
        "choose_backend",
        "cpu_threads",
        "llamacpp_available",
        "load_scoring_model",
        "LoadedModel",
    ),
    "model.files": ("prepare_model", "stderr_progress"),
    "sample.sampling": ("ByteSampler",),
    "sample.transform": ("Transform",),
    "sample.confidence": ("AUTO_MIN_CONFIDENCE", "confidence_cut", "min_logprob"),
    "sample.generate": (
        "Completer",
        "Completion",
        "Interrupted",
        "METHODS",
        "MODES",
        "Settings",
        "SOLVES",
    ),
    "sample.candidates": (
        "CandidateScore",
        "END_CONDITIONS",
        "IDENTIFIER_BYTES",
        "Likeliest",
        "likeliest_continuation",
        "score_continuations",
        "typed_identifier",
    ),
    "sample.guided": (
        "complete_guided",
        "GUIDED_METHOD",
        "Guided",
        "MIN_MASS",
    ),
    "sample.candidate_draws": ("draw_continuation",),
    "sample.fim": (
        "FIM_CHOICES",
        "FimCompleter",
        "FimTemplate",
        "loaded_model_config",
        "move_sampler",
        "PromptedModel",
        "resolve_fim",
        "TEMPLATES",
    ),
    "sample.ensemble": (
        "check_weights",
        "combine_distributions",
        "COMBINES",
        "Ensemble",
        "PROXY_WEIGHTS",
    ),
    "remote.model": ("VLLMModel",),
    "remote.backend": ("connect_vllm",),
}

_HOMES: dict[str, str] = {name: module for module, names in _FACE.items() for name in names}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
