"""What goes over the wire to vLLM and what comes back: request bodies, answer parsing.

Pure functions, no I/O (`vllm_client` sends them), so the wire format is in one place:

* scoring (``POST /v1/completions``, prompts as token ids, one generated token):
  `scoring_body` asks each prompt's next-token log-probs, ``"logprobs": -1`` for a full
  row, ``k`` for the server's top ``k``, plus ``"logprob_token_ids"`` (at most
  `MAX_CHOSEN_IDS`) for chosen ids; `first_logprobs` reads the answer back, one
  ``{"token_id:N": logprob}`` dict per prompt, `row_entries` and `dense_row` turn one
  into arrays;
* streamed generation: `stream_body` sets every sampling parameter (so the server uses
  none of the model's generation_config.json), `stream_tokens` reads the generated ids of
  a stream, the stop token included.

Example:
    >>> body = scoring_body("tiny", [[0, 5]], logprobs=-1)
    >>> body["max_tokens"], body["return_tokens_as_token_ids"]
    (1, True)
    >>> answer = {"choices": [{"index": 0, "logprobs": {"top_logprobs": [{"token_id:1": -0.1}]}}]}
    >>> first_logprobs(answer, 1, "http://gpu-box:8000")
    [{'token_id:1': -0.1}]
    >>> dense_row({"token_id:1": -0.1}, 3)
    array([-inf, -0.1, -inf])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EngineRefused
from ..sample.transform import NEG_INF

if TYPE_CHECKING:
    from ..sample.generate import Settings

__all__ = [
    "MAX_CHOSEN_IDS",
    "TOKEN_KEY",
    "dense_row",
    "first_logprobs",
    "row_entries",
    "scoring_body",
    "stream_body",
    "stream_tokens",
]

MAX_CHOSEN_IDS = 128  # vLLM's limit on logprob_token_ids per request
TOKEN_KEY = "token_id:"  # how vLLM keys log-probs with return_tokens_as_token_ids


def scoring_body(name: str, prompts: list[list[int]], logprobs: int) -> dict[str, Any]:
    """A request for the log-probs of the token after each prompt (``-1``: every id)."""
    return {
        "model": name,
        "prompt": prompts,
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": logprobs,
        "return_tokens_as_token_ids": True,
        "add_special_tokens": False,
    }


def first_logprobs(answer: Any, n: int, url: str) -> list[dict[str, float]]:
    """The first position's ``top_logprobs`` dict of each of ``n`` prompts' choices, in
    prompt order; `EngineRefused` (naming the engine at ``url``) when it has none."""
    try:
        choices = sorted(answer["choices"], key=lambda c: c["index"])
        entries = [c["logprobs"]["top_logprobs"][0] for c in choices]
    except (KeyError, IndexError, TypeError) as exc:
        raise EngineRefused(f"engine at {url} answered without log-probs ({exc!r})") from exc
    if len(entries) != n:
        raise EngineRefused(f"engine at {url} answered {len(entries)} of {n}")
    return entries


def row_entries(entry: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, log-probs) of a ``top_logprobs`` entry keyed ``"token_id:N"``.

    Example:
        >>> row_entries({"token_id:3": -0.5, "token_id:0": -1.0})
        (array([3, 0]), array([-0.5, -1. ]))
    """
    ids = np.fromiter((int(k[len(TOKEN_KEY) :]) for k in entry), dtype=np.int64, count=len(entry))
    values = np.fromiter(entry.values(), dtype=np.float64, count=len(entry))
    return ids, values


def dense_row(entry: dict[str, float], vocab_size: int) -> np.ndarray:
    """float64 [vocab_size]: the entry's log-probs at its ids, ``-inf`` elsewhere."""
    ids, values = row_entries(entry)
    row = np.full(vocab_size, NEG_INF)
    row[ids] = values
    return row


def stream_body(
    name: str, prompt: list[int], max_tokens: int, s: Settings, stop_ids: Sequence[int]
) -> dict[str, Any]:
    """The request of a streamed generation. Every sampling parameter is set (the
    neutral value where midword has none): the server would otherwise fill them
    from the model's generation_config.json (a repetition penalty, say), and sample
    from another distribution than the model's."""
    body: dict[str, Any] = {
        "model": name,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "top_k": int(s.top_k),
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "return_token_ids": True,
        "add_special_tokens": False,
        "skip_special_tokens": False,
        "stop_token_ids": sorted(int(i) for i in stop_ids),
    }
    if s.seed is not None and s.temperature > 0:
        body["seed"] = int(s.seed)
    return body


def stream_tokens(
    chunks: Iterator[dict[str, Any]], eos_token_id: int | None, stop_ids: Sequence[int]
) -> Iterator[int]:
    """The generated token ids of a stream, in order. A stop the server reports
    without its token is the ``stop_reason`` token, or the model's end-of-text token
    when it names none (vLLM's ``stop_reason`` is None only for that one), else the
    first of ``stop_ids`` (sorted).

    Example:
        >>> chunks = [{"choices": [{"token_ids": [7]}]},
        ...           {"choices": [{"token_ids": [], "finish_reason": "stop"}]}]
        >>> list(stream_tokens(iter(chunks), eos_token_id=0, stop_ids=[0, 1]))
        [7, 0]
    """
    for chunk in chunks:
        choice = (chunk.get("choices") or [{}])[0]
        ids = choice.get("token_ids") or []
        yield from (int(t) for t in ids)
        if choice.get("finish_reason") == "stop" and not ids:
            stop = choice.get("stop_reason")
            stop = stop if isinstance(stop, int) else eos_token_id
            if stop is None:
                stop = int(stop_ids[0]) if len(stop_ids) else -1
            yield int(stop)
        if choice.get("finish_reason"):
            return
