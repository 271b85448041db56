"""Remote scoring backend: the covering tree scored by a vLLM server over HTTP.

A team runs one vLLM (its OpenAI-compatible server) on a GPU box; every editor keeps its
tokenizer, its covering trees and its sampling locally and asks the server only for
next-token log-probabilities. This module and the ``vllm_*`` ones under it (listed
below) are the client side, behind the same `ScoringModel` / `ScoringSession` interface
as the in-process backend (engine/model/backend.py), so the sampler and the language server
use them unchanged.

How each question goes over the wire (``POST /v1/completions``, prompts as token ids):

* a full row (every token's log-prob after a context): ``"max_tokens": 1,
  "logprobs": -1, "return_tokens_as_token_ids": true``; several contexts go in one
  request as a list of prompts. The server's prefix cache holds the shared trunk, so a
  tree node costs the server one new token, and the wire one row of JSON (about 36
  bytes per vocabulary entry);
* chosen ids (``"logprob_token_ids"``, up to 128 per request): when the caller only
  reads a few entries of a row (a tree node's leaves and children, with an identity
  transform) the row comes back with those entries and ``-inf`` elsewhere. Which is
  used is decided per node: the ids a node needs, if there are at most 128 of them;
* ordinary generation after the chosen leaf (`RemoteCompleter`): one streamed request
  from the token-id prompt; closing the stream (cancel, stop string, scope cut) makes
  vLLM abort the request;
* sampling at temperature 1 asks no row of a node that needs more than 128 ids (the
  node that ends at the cursor has most of the vocabulary as leaves): the leaf search
  (`LazyTree`'s drawn nodes) lets the server draw the token after such a node, in the
  streamed request that goes on as the completion; a token that is neither a leaf nor
  a child there rejects the search's round, the stream is closed and the search starts
  again (`RemoteCompleter._drawn_leaf`).

Exactness holds as far as the server's float32 log-probs equal the in-process ones (to
about 1e-5: different kernels and batch compositions; docs/team-server.md). The prompt
is kept within the server's context (`VLLMModel.window`): a longer trunk loses its
oldest tokens, in steps of half the window so that the server's prefix cache keeps
hitting between keystrokes.

The API key comes only from the environment (``MIDWORD_ENGINE_API_KEY``); TLS
certificates are verified unless ``verify=False`` is asked for. Nothing here logs buffer
text or token ids at the default level.

The backend's modules, lowest first (each imports only those above it):

* ``vllm_client``: HTTP transport, the `EngineError` classes, `WireStats`;
* ``vllm_wire``: request bodies and the parsing of answers and streams;
* ``vllm_session``: `VLLMSession` (row cache, chosen ids, the prompt window), `tree_reads`;
* ``vllm_sampling``: `RemoteByteSampler`, `RemoteCompleter` (server draws, streams);
* ``vllm_model``: `VLLMModel` (row requests, sessions, samplers);
* this module: `connect_vllm` and its checks, and the public names of all of them.

Example:
    >>> model = connect_vllm("http://gpu-box:8000", load_engine("models/default"))  # doctest: +SKIP
    >>> session = model.session(bos_id=0)                                            # doctest: +SKIP
    >>> session.logprobs([15, 16], [(), (17,)]).shape                                # doctest: +SKIP
    (2, 4096)

httpx is imported lazily (on connect).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EngineError, EngineMismatch, EngineRefused, EngineUnavailable
from .client import API_KEY_ENV, VLLMClient, WireStats
from .model import VLLMModel
from .sampling import RemoteByteSampler, RemoteCompleter
from .session import VLLMSession
from .wire import MAX_CHOSEN_IDS, row_entries, scoring_body

if TYPE_CHECKING:
    from ..tree.tables import Engine

__all__ = [
    "API_KEY_ENV",
    "MAX_CHOSEN_IDS",
    "EngineError",
    "EngineMismatch",
    "EngineRefused",
    "EngineUnavailable",
    "RemoteByteSampler",
    "RemoteCompleter",
    "VLLMClient",
    "VLLMModel",
    "VLLMSession",
    "WireStats",
    "connect_vllm",
]

log = logging.getLogger("midword.engine")

# Text whose encoding exercises the tokenizer's pre-tokenizer, merges and byte alphabet.
TOKENIZER_PROBE = (
    'def main(argv):\n    total = 12345 + 0.5  # sum\n    print(f"héllo, wörld {total!r}")\n'
    "\tif x != y:\n\t\treturn None\n// ✓ 漢字 🙂 it's don't  \r\n"
)


def served_model(client: VLLMClient, wanted: str | None) -> tuple[str, int]:
    """(served model name, its max context) from ``/v1/models``; `EngineMismatch` when
    ``wanted`` is not served, or nothing is named and the server serves several."""
    listing = client.get_json("/v1/models")
    models = {m.get("id"): m for m in listing.get("data", []) if isinstance(m, dict)}
    if not models:
        raise EngineMismatch(f"engine at {client.url} serves no model")
    if wanted is None:
        if len(models) > 1:
            raise EngineMismatch(
                f"engine at {client.url} serves {', '.join(sorted(models))}: name one "
                "(engineModel, --engine-model)"
            )
        wanted = next(iter(models))
    if wanted not in models:
        raise EngineMismatch(
            f"engine at {client.url} does not serve model {wanted!r}; it serves "
            f"{', '.join(sorted(models))}"
        )
    context = models[wanted].get("max_model_len")
    if not isinstance(context, int) or context <= 0:
        raise EngineMismatch(f"engine at {client.url} does not say model {wanted!r}'s context")
    return wanted, context


def check_tokenizer(client: VLLMClient, name: str, engine: Engine) -> None:
    """`EngineMismatch` unless the server encodes `TOKENIZER_PROBE` as the local one does."""
    answer = client.post_json(
        "/tokenize", {"model": name, "prompt": TOKENIZER_PROBE, "add_special_tokens": False}
    )
    remote = [int(t) for t in answer.get("tokens", [])]
    local = [int(t) for t in engine.tok.encode(TOKENIZER_PROBE)]
    if remote != local:
        first = next(
            (i for i, (a, b) in enumerate(zip(remote, local, strict=False)) if a != b),
            min(len(remote), len(local)),
        )
        raise EngineMismatch(
            f"engine at {client.url} (model {name!r}) tokenizes differently from the local "
            f"tokenizer (probe text: {len(remote)} vs {len(local)} tokens, first difference at "
            f"token {first}): point --model/model at the served model's own folder"
        )


def _config_ids(folder: Path | None) -> tuple[int | None, int | None]:
    """(bos_token_id, eos_token_id) from a model folder's config.json, when it has them."""
    if folder is None or not (folder / "config.json").is_file():
        return None, None
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))

    def first(value: Any) -> int | None:
        if isinstance(value, list):
            value = value[0] if value else None
        return int(value) if isinstance(value, int) else None

    return first(config.get("bos_token_id")), first(config.get("eos_token_id"))


def connect_vllm(
    url: str,
    engine: Engine,
    *,
    model_name: str | None = None,
    model_dir: str | Path | None = None,
    api_key: str | None = None,
    verify: bool = True,
    timeout: float | None = None,
) -> VLLMModel:
    """Connect to a vLLM server and check it serves what the local tokenizer expects.

    Checks, in order: the URL answers; ``/v1/models`` lists ``model_name`` (or serves one
    model, when none is named), and says its context; ``/tokenize`` of a probe text
    equals the local encoding; a full row has one entry per vocabulary id, no fewer than
    the tokenizer's. Failures are `EngineUnavailable` (retry later), `EngineRefused` or
    `EngineMismatch`, with a message for the user.
    """
    if not url.startswith(("http://", "https://")):
        raise EngineMismatch(f"engine URL must start with http:// or https://, got {url!r}")
    client = VLLMClient(url, api_key=api_key, verify=verify, timeout=timeout)
    try:
        name, context = served_model(client, model_name)
        check_tokenizer(client, name, engine)
        bos, eos = _config_ids(Path(model_dir) if model_dir is not None else None)
        special = [i for i in engine.tok.special_ids]
        start = bos if bos is not None else eos if eos is not None else (special or [None])[0]
        probe = VLLMModel(client, name, engine.tok.size, context, bos, eos, special)
        vocab = _probe_vocab(probe, start, engine.tok.size)
    except BaseException:
        client.close()
        raise
    if vocab < engine.tok.size:
        client.close()
        raise EngineMismatch(
            f"engine at {url} has a {vocab}-token vocabulary, smaller than the local "
            f"tokenizer's ({engine.tok.size})"
        )
    log.info("engine %s: model %s, context %d, vocabulary %d", url, name, context, vocab)
    return VLLMModel(client, name, vocab, context, bos, eos, special)


def _probe_vocab(probe: VLLMModel, start: int | None, at_least: int) -> int:
    """The server's vocabulary size: the length of a full row after the start token (a
    row of consecutive ids from 0, at least as long as the tokenizer; a short one, as a
    batch shared with a chosen-ids request gives, is asked for again)."""
    body = scoring_body(probe.name, [[start if start is not None else 0]], logprobs=-1)

    def whole(entry: dict[str, float]) -> bool:
        ids, _ = row_entries(entry)
        return len(ids) >= at_least and int(ids.max()) + 1 == len(ids)

    entry = probe.checked_entries(body, whole)[0]
    return len(entry)
