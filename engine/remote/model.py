"""The model a vLLM server serves, as a `ScoringModel`: row requests, sessions, samplers.

`VLLMModel` is what `connect_vllm` (engine/remote/backend.py, which also checks the server
against the local tokenizer) returns. It asks the server three kinds of log-prob rows,
full rows, chosen ids and top ids (bodies and answers: engine/remote/wire.py), over its
`VLLMClient`, and asks again for rows that come back short (vLLM batches requests); it
opens `VLLMSession` s (engine/remote/session.py) and makes the samplers that use what the
server offers (engine/remote/sampling.py).

Example:
    >>> model = connect_vllm("http://gpu-box:8000", load_engine("models/default"))  # doctest: +SKIP
    >>> model.full_rows([[0, 15, 16]])[0].shape                                   # doctest: +SKIP
    (4096,)
    >>> model.completer(engine).complete(b"def ma").text                          # doctest: +SKIP
    'def main():'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EngineRefused
from .client import VLLMClient
from .sampling import RemoteByteSampler, RemoteCompleter
from .session import VLLMSession
from .wire import MAX_CHOSEN_IDS, TOKEN_KEY, dense_row, first_logprobs, scoring_body

if TYPE_CHECKING:
    from ..tree.tables import Engine

__all__ = ["FULL_ROWS_PER_REQUEST", "SHORT_ROW_RETRIES", "VLLMModel"]

FULL_ROWS_PER_REQUEST = 16  # bounds one response's size (a 150k row is about 5 MB of JSON)
SHORT_ROW_RETRIES = 8


class VLLMModel:
    """A model served by vLLM: opens `VLLMSession` s; the local tokenizer was checked
    against the server's at connect (`connect_vllm`).

    ``window``: the longest prompt a scoring request sends (the server's context minus
    room for the tree's depth and the generated tokens).
    """

    backend = "vllm"  # what computes it (the server's status names it)

    def __init__(
        self,
        client: VLLMClient,
        served_name: str,
        vocab_size: int,
        max_context: int,
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        special_ids: Sequence[int] = (),
    ) -> None:
        self.client = client
        self.name = served_name
        self.vocab_size = int(vocab_size)
        self.max_context = int(max_context)
        self.window = max(8, self.max_context - max(16, self.max_context // 8))
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.special_ids = tuple(int(i) for i in special_ids)

    def session(self, bos_id: int | None = None, trunk_logits_window: int = 8) -> VLLMSession:
        """A new session (its own row cache; the server's prefix cache is shared)."""
        del trunk_logits_window  # the server's prefix cache does what the window did
        return VLLMSession(self, bos_id)

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), vocab]: row i is the distribution after tokens[: i + 1]."""
        ids = [int(t) for t in tokens]
        rows = self.full_rows([ids[: i + 1] for i in range(len(ids))])
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size))

    def completer(self, engine: Engine) -> RemoteCompleter:
        """A `Completer` that streams ordinary generation from the server."""
        return RemoteCompleter(self, engine)

    def byte_sampler(self, engine: Engine, **kwargs: Any) -> RemoteByteSampler:
        """A `ByteSampler` that asks for chosen ids where a node needs few."""
        return RemoteByteSampler(self, engine, **kwargs)

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ requests
    def full_rows(self, prompts: list[list[int]]) -> list[np.ndarray]:
        """float64 [vocab] log-prob rows after each prompt (full distributions)."""
        rows: list[np.ndarray] = []
        for start in range(0, len(prompts), FULL_ROWS_PER_REQUEST):
            batch = prompts[start : start + FULL_ROWS_PER_REQUEST]
            body = scoring_body(self.name, batch, logprobs=-1)
            entries = self.checked_entries(body, lambda e: len(e) == self.vocab_size)
            rows.extend(dense_row(entry, self.vocab_size) for entry in entries)
        self.client.stats.full_rows += len(prompts)
        return rows

    def chosen_rows(self, prompts: list[list[int]], ids: Sequence[int]) -> list[np.ndarray]:
        """Rows after each prompt with exact log-probs at ``ids`` (at most 128), ``-inf``
        elsewhere: for callers that read only those entries."""
        wanted = sorted({int(i) for i in ids})
        if len(wanted) > MAX_CHOSEN_IDS:
            raise ValueError(f"at most {MAX_CHOSEN_IDS} chosen ids per request, got {len(wanted)}")
        keys = {f"{TOKEN_KEY}{i}" for i in wanted}
        body = {**scoring_body(self.name, prompts, logprobs=1), "logprob_token_ids": wanted}
        entries = self.checked_entries(body, lambda e: keys <= e.keys())
        self.client.stats.chosen_rows += len(prompts)
        return [dense_row(entry, self.vocab_size) for entry in entries]

    def top_rows(self, prompts: list[list[int]], k: int) -> list[np.ndarray]:
        """Rows with the server's ``k`` likeliest ids after each prompt, ``-inf`` elsewhere."""
        body = scoring_body(self.name, prompts, logprobs=k)
        entries = self.checked_entries(body, lambda e: len(e) >= min(k, self.vocab_size))
        self.client.stats.top_rows += len(prompts)
        return [dense_row(entry, self.vocab_size) for entry in entries]

    def checked_entries(
        self, body: dict[str, Any], ok: Callable[[dict[str, float]], bool]
    ) -> list[dict[str, float]]:
        """`_first_logprobs`, asking again for the prompts whose answer ``ok`` refuses.

        vLLM 0.32 applies ``logprob_token_ids`` to a whole batch: a request for full rows
        or top ids that the server batches with one for chosen ids gets only its sampled
        token back. Such a short answer is recognised (a full row has one entry per id,
        a top row ``k``) and asked for again; it comes right once the batches differ.
        """
        prompts = body["prompt"]
        entries = self._first_logprobs(body, len(prompts))
        for attempt in range(SHORT_ROW_RETRIES):
            bad = [i for i, entry in enumerate(entries) if not ok(entry)]
            if not bad:
                return entries
            self.client.stats.retries += len(bad)
            time.sleep(0.002 * (attempt + 1))
            again = self._first_logprobs({**body, "prompt": [prompts[i] for i in bad]}, len(bad))
            for i, entry in zip(bad, again, strict=True):
                entries[i] = entry
        raise EngineRefused(
            f"engine at {self.client.url} keeps answering with short log-prob rows (it must "
            "run with --max-logprobs -1 --logprobs-mode raw_logprobs, and serve a vocabulary "
            "no smaller than the tokenizer's)"
        )

    def _first_logprobs(self, body: dict[str, Any], n: int) -> list[dict[str, float]]:
        """The first position's ``top_logprobs`` dict of each prompt's choice, in order."""
        return first_logprobs(self.client.post_json("/v1/completions", body), n, self.client.url)
