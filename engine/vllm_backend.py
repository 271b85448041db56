"""Remote scoring backend: the covering tree scored by a vLLM server over HTTP.

A team runs one vLLM (its OpenAI-compatible server) on a GPU box; every editor keeps its
tokenizer, its covering trees and its sampling locally and asks the server only for
next-token log-probabilities. This module is the client side, behind the same
`ScoringModel` / `ScoringSession` interface as the in-process backend
(engine/backend.py), so the sampler and the language server use it unchanged.

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

Example:
    >>> model = connect_vllm("http://gpu-box:8000", load_engine("models/default"))  # doctest: +SKIP
    >>> session = model.session(bos_id=0)                                            # doctest: +SKIP
    >>> session.logprobs([15, 16], [(), (17,)]).shape                                # doctest: +SKIP
    (2, 4096)

httpx is imported lazily (on connect).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .backend import BackendError, TokenPath
from .generate import Completer, Completion, Cut, Interrupted, Settings, StopCheck, _Output
from .lazy_pbp import Draws, LazyTree
from .sampling import NEG_INF, ByteSampler, Transform, session_rows

if TYPE_CHECKING:
    import httpx

    from .tables import Engine
    from .vct import Tree

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

API_KEY_ENV = "MIDWORD_ENGINE_API_KEY"
TIMEOUT_ENV = "MIDWORD_ENGINE_TIMEOUT"  # seconds a request may take (default 10)
MAX_CHOSEN_IDS = 128  # vLLM's limit on logprob_token_ids per request
FULL_ROWS_PER_REQUEST = 16  # bounds one response's size (a 150k row is about 5 MB of JSON)
ROW_CACHE_BYTES = 64 << 20  # full rows kept by a session for contexts asked again
CHOSEN_ROWS_KEPT = 256
SHORT_ROW_RETRIES = 8
GREEDY_TOP_K = 20  # ids a greedy search asks of a node with many leaves (see VLLMSession.expect)
DRAW_TRIES = 8  # rejected draws at a node before its row is asked (see RemoteCompleter)
SEED_STEP = 0x9E3779B1  # a draw asked again with a user's seed uses seed + k * SEED_STEP
NodeReads = dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]]  # context -> (leaves, exact)
# Text whose encoding exercises the tokenizer's pre-tokenizer, merges and byte alphabet.
TOKENIZER_PROBE = (
    'def main(argv):\n    total = 12345 + 0.5  # sum\n    print(f"héllo, wörld {total!r}")\n'
    "\tif x != y:\n\t\treturn None\n// ✓ 漢字 🙂 it's don't  \r\n"
)


class EngineError(BackendError):
    """The remote engine failed a request; the message says which engine and how."""


class EngineUnavailable(EngineError):
    """The engine could not be reached, or did not answer in time (worth retrying)."""


class EngineRefused(EngineError):
    """The engine answered with an HTTP error (its message is in ours)."""


class EngineMismatch(EngineError):
    """The engine serves another model or tokenizer than the local one (not retried)."""


@dataclass
class WireStats:
    """What a client sent and received: requests, bytes (bodies), rows by kind."""

    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    full_rows: int = 0
    chosen_rows: int = 0
    top_rows: int = 0
    retries: int = 0  # rows asked again (see VLLMModel._checked_entries)
    streamed_tokens: int = 0
    leaf_draws: int = 0  # streams opened to draw the token after a node (RemoteCompleter)
    rejected_draws: int = 0  # of those, the ones that did not go on as the completion

    def copy(self) -> WireStats:
        return WireStats(**self.__dict__)

    def minus(self, before: WireStats) -> WireStats:
        """The counts since ``before`` (a `copy` taken then)."""
        return WireStats(**{k: v - getattr(before, k) for k, v in self.__dict__.items()})


def _timeout_from_env() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else 10.0
    except ValueError:
        value = 10.0
    return value if value > 0 else 10.0


class VLLMClient:
    """HTTP client of one vLLM server (httpx): JSON requests, errors as `EngineError`.

    ``api_key`` defaults to the environment's ``MIDWORD_ENGINE_API_KEY``; ``verify``
    (TLS certificates) is on unless turned off; ``timeout`` bounds each request
    (connect, and each read of a stream), in seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        verify: bool = True,
        timeout: float | None = None,
    ) -> None:
        import httpx

        # httpx logs every request at INFO: one line per keystroke in the server's log
        logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
        self.url = url.rstrip("/")
        self.timeout = timeout if timeout is not None else _timeout_from_env()
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, verify=verify, timeout=self.timeout
        )
        self.stats = WireStats()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ plain requests
    def get_json(self, path: str) -> Any:
        return json.loads(self.get_text(path))

    def get_text(self, path: str) -> str:
        with self._errors(path):
            response = self._http.get(path)
        self._count(0, response)
        self._check(path, response)
        return response.text

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode()
        with self._errors(path):
            response = self._http.post(
                path, content=data, headers={"Content-Type": "application/json"}
            )
        self._count(len(data), response)
        self._check(path, response)
        try:
            return response.json()
        except ValueError as exc:
            raise EngineRefused(f"engine at {self.url}{path} sent a body that is not JSON") from exc

    def healthy(self) -> bool:
        """True when ``GET /health`` answers 200 (the engine is up and serving)."""
        try:
            self.get_text("/health")
        except EngineError:
            return False
        return True

    # ------------------------------------------------------------------ streaming
    @contextlib.contextmanager
    def stream_completion(self, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """The chunks of a streamed ``/v1/completions`` request, as JSON objects.

        Leaving the ``with`` block closes the connection: vLLM then aborts the request.
        """
        path = "/v1/completions"
        data = json.dumps({**body, "stream": True}, separators=(",", ":")).encode()
        with (
            self._errors(path),
            self._http.stream(
                "POST", path, content=data, headers={"Content-Type": "application/json"}
            ) as response,
        ):
            self.stats.requests += 1
            self.stats.bytes_sent += len(data)
            if response.status_code >= 400:
                response.read()
                self._count(0, response, request=False)
                self._check(path, response)
            yield self._chunks(response)

    def _chunks(self, response: httpx.Response) -> Iterator[dict[str, Any]]:
        for line in response.iter_lines():
            self.stats.bytes_received += len(line) + 1
            if not line.startswith("data:"):
                continue
            payload = line[len("data:") :].strip()
            if payload == "[DONE]":
                return
            chunk = json.loads(payload)
            if "error" in chunk:
                raise EngineRefused(f"engine at {self.url} failed mid-stream: {_message(chunk)}")
            yield chunk

    # ------------------------------------------------------------------ internals
    @contextlib.contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """httpx's transport errors as `EngineUnavailable`, with the URL and the cause."""
        import httpx

        try:
            yield
        except httpx.TimeoutException as exc:
            raise EngineUnavailable(
                f"engine at {self.url} did not answer {path} within {self.timeout:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise EngineUnavailable(
                f"engine at {self.url} is unreachable ({type(exc).__name__}: {exc})"
            ) from exc

    def _count(self, sent: int, response: httpx.Response, request: bool = True) -> None:
        self.stats.requests += int(request)
        self.stats.bytes_sent += sent
        self.stats.bytes_received += len(response.content)

    def _check(self, path: str, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        try:
            detail = _message(response.json())
        except ValueError:
            detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
        hint = ""
        if response.status_code in (401, 403):
            hint = f" (set {API_KEY_ENV} to the engine's API key)"
        raise EngineRefused(
            f"engine at {self.url} refused {path}: HTTP {response.status_code}"
            f"{': ' + detail if detail else ''}{hint}"
        )


def _message(body: Any) -> str:
    """The error message of a vLLM/OpenAI error body, else a short dump.

    Example:
        >>> _message({"error": {"message": "model x does not exist", "code": 404}})
        'model x does not exist'
    """
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"].splitlines()[0][:300]
        if isinstance(body.get("message"), str):
            return body["message"].splitlines()[0][:300]
        if isinstance(body.get("detail"), str):
            return body["detail"][:300]
    return json.dumps(body)[:200]


# --------------------------------------------------------------------------------------
# The model and its sessions
# --------------------------------------------------------------------------------------

_TOKEN_KEY = "token_id:"


def _row_entries(entry: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(ids, log-probs) of a ``top_logprobs`` entry keyed ``"token_id:N"``.

    Example:
        >>> _row_entries({"token_id:3": -0.5, "token_id:0": -1.0})
        (array([3, 0]), array([-0.5, -1. ]))
    """
    ids = np.fromiter((int(k[len(_TOKEN_KEY) :]) for k in entry), dtype=np.int64, count=len(entry))
    values = np.fromiter(entry.values(), dtype=np.float64, count=len(entry))
    return ids, values


class VLLMModel:
    """A model served by vLLM: opens `VLLMSession` s; the local tokenizer was checked
    against the server's at connect (`connect_vllm`).

    ``window``: the longest prompt a scoring request sends (the server's context minus
    room for the tree's depth and the generated tokens).
    """

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
            body = self._scoring_body(batch, logprobs=-1)
            entries = self._checked_entries(body, lambda e: len(e) == self.vocab_size)
            rows.extend(self._row(entry) for entry in entries)
        self.client.stats.full_rows += len(prompts)
        return rows

    def chosen_rows(self, prompts: list[list[int]], ids: Sequence[int]) -> list[np.ndarray]:
        """Rows after each prompt with exact log-probs at ``ids`` (at most 128), ``-inf``
        elsewhere: for callers that read only those entries."""
        wanted = sorted({int(i) for i in ids})
        if len(wanted) > MAX_CHOSEN_IDS:
            raise ValueError(f"at most {MAX_CHOSEN_IDS} chosen ids per request, got {len(wanted)}")
        keys = {f"{_TOKEN_KEY}{i}" for i in wanted}
        body = {**self._scoring_body(prompts, logprobs=1), "logprob_token_ids": wanted}
        entries = self._checked_entries(body, lambda e: keys <= e.keys())
        self.client.stats.chosen_rows += len(prompts)
        return [self._row(entry) for entry in entries]

    def top_rows(self, prompts: list[list[int]], k: int) -> list[np.ndarray]:
        """Rows with the server's ``k`` likeliest ids after each prompt, ``-inf`` elsewhere."""
        body = self._scoring_body(prompts, logprobs=k)
        entries = self._checked_entries(body, lambda e: len(e) >= min(k, self.vocab_size))
        self.client.stats.top_rows += len(prompts)
        return [self._row(entry) for entry in entries]

    def _row(self, entry: dict[str, float]) -> np.ndarray:
        ids, values = _row_entries(entry)
        row = np.full(self.vocab_size, NEG_INF)
        row[ids] = values
        return row

    def _checked_entries(
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

    def _scoring_body(self, prompts: list[list[int]], logprobs: int) -> dict[str, Any]:
        return {
            "model": self.name,
            "prompt": prompts,
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": logprobs,
            "return_tokens_as_token_ids": True,
            "add_special_tokens": False,
        }

    def _first_logprobs(self, body: dict[str, Any], n: int) -> list[dict[str, float]]:
        """The first position's ``top_logprobs`` dict of each prompt's choice, in order."""
        answer = self.client.post_json("/v1/completions", body)
        try:
            choices = sorted(answer["choices"], key=lambda c: c["index"])
            entries = [c["logprobs"]["top_logprobs"][0] for c in choices]
        except (KeyError, IndexError, TypeError) as exc:
            raise EngineRefused(
                f"engine at {self.client.url} answered without log-probs ({exc!r})"
            ) from exc
        if len(entries) != n:
            raise EngineRefused(f"engine at {self.client.url} answered {len(entries)} of {n}")
        return entries


class VLLMSession:
    """`ScoringSession` over a `VLLMModel`: ``bos? + trunk + path`` sent as token ids.

    Rows are kept (least recently used out, `ROW_CACHE_BYTES` in all) for contexts asked
    again: the leaf search asks every node it entered at each step, and the trunk may
    grow into a node. `expect` tells it which entries of which rows the caller reads,
    so those nodes go as chosen ids. ``inference_tokens`` counts the rows the server
    evaluated (a row is one new token for the server: its prefix cache holds the rest).
    """

    def __init__(self, model: VLLMModel, bos_id: int | None = None) -> None:
        self.model = model
        self.vocab_size = model.vocab_size
        self.bos_id = bos_id
        self.inference_tokens = 0
        # rows by the prompt sent (bos? + the context within the window)
        self._rows: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()  # full rows
        self._chosen: dict[tuple[int, ...], tuple[frozenset[int], np.ndarray]] = {}
        self._needs: dict[tuple[int, ...], np.ndarray] = {}  # by context (see expect)
        self._wide: NodeReads = {}  # by context: rows read for their likeliest leaf only
        self._top: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()  # by prompt
        self._cut = 0  # context tokens left out in front (see prompt)

    # ------------------------------------------------------------------ protocol
    def logprobs(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> np.ndarray:
        rows = self.logprob_rows(trunk, paths)
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size))

    def logprob_rows(self, trunk: Sequence[int], paths: Sequence[TokenPath]) -> list[np.ndarray]:
        """One float64 [vocab] row per path (read-only; sparse where `expect` allowed)."""
        base = tuple(int(t) for t in trunk)
        if not base and self.bos_id is None and () in paths:
            raise ValueError("path () needs a context: the trunk is empty and there is no bos_id")
        contexts = [base + tuple(int(t) for t in p) for p in paths]
        prompts = {ctx: tuple(self.prompt(ctx)) for ctx in dict.fromkeys(contexts)}
        found: dict[tuple[int, ...], np.ndarray] = {}
        full: list[tuple[int, ...]] = []
        chosen: list[tuple[int, ...]] = []
        wide: list[tuple[int, ...]] = []
        for ctx, prompt in prompts.items():
            row = self._cached(prompt, self._needs.get(ctx))
            if row is None and ctx in self._wide:
                row = self._top.get(prompt)
            if row is not None:
                found[ctx] = row
            else:
                (chosen if ctx in self._needs else wide if ctx in self._wide else full).append(ctx)
        found.update(self._fetch_top(wide, prompts))
        found.update(self._fetch_full(full, prompts))
        found.update(self._fetch_chosen(chosen, prompts))
        return [found[ctx] for ctx in contexts]

    def cache_len(self) -> int:
        """Rows held by this session (the server's KV cache is its own)."""
        return len(self._rows) + len(self._chosen)

    def reset(self) -> None:
        self._rows.clear()
        self._chosen.clear()
        self._top.clear()

    # ------------------------------------------------------------------ chosen ids
    @contextlib.contextmanager
    def expect(self, reads: NodeReads, greedy: bool = False) -> Iterator[None]:
        """Within the block, the row after context ``trunk + path`` (a key of ``reads``)
        is read only at the ids ``reads[key]`` names: it is fetched as chosen ids when
        that is at most 128 ids, else as a full row.

        ``greedy``: the caller only looks for the likeliest leaf of such a row (and reads
        its exact ids exactly): a row with more than 128 ids comes as the server's top
        `GREEDY_TOP_K` plus the exact ids, and as a full row only when no leaf is among
        the top ones (then some leaf outside them could be the likeliest).
        """
        for ctx, (leaves, exact) in reads.items():
            ids = np.union1d(leaves, exact)
            if len(ids) <= MAX_CHOSEN_IDS:
                self._needs[ctx] = ids
            elif greedy:
                self._wide[ctx] = (leaves, exact)
        try:
            yield
        finally:
            self._needs, self._wide = {}, {}

    # ------------------------------------------------------------------ the prompt
    def prompt(self, context: Sequence[int]) -> list[int]:
        """``bos? + context`` within the model's window: a longer context loses its oldest
        tokens, in steps of half the window, and the cut stays where it is while it is
        enough, so consecutive prompts share a prefix for the server's prefix cache.

        Example (a window of 8, BOS 0):
            >>> s = VLLMSession.__new__(VLLMSession)
            >>> s.model, s.bos_id, s._cut = type("M", (), {"window": 8})(), 0, 0
            >>> s.prompt([1, 2, 3]), s.prompt(list(range(1, 10))), s.prompt(list(range(1, 11)))
            ([0, 1, 2, 3], [0, 4, 5, 6, 7, 8, 9], [0, 4, 5, 6, 7, 8, 9, 10])
        """
        head = [] if self.bos_id is None else [int(self.bos_id)]
        room = self.model.window - len(head)
        excess = len(context) - room
        if excess <= 0:
            self._cut = 0
            return head + [int(t) for t in context]
        if self._cut < excess or self._cut >= len(context):
            step = max(1, room // 2)
            self._cut = min(-(-excess // step) * step, len(context) - 1)
        return head + [int(t) for t in context[self._cut :]]

    # ------------------------------------------------------------------ rows
    def _cached(self, prompt: tuple[int, ...], need: np.ndarray | None) -> np.ndarray | None:
        row = self._rows.get(prompt)
        if row is not None:
            self._rows.move_to_end(prompt)
            return row
        chosen = self._chosen.get(prompt)
        if chosen is not None and need is not None and chosen[0].issuperset(need.tolist()):
            return chosen[1]
        return None

    def _fetch_full(
        self, contexts: list[tuple[int, ...]], prompts: dict[tuple[int, ...], tuple[int, ...]]
    ) -> dict[tuple[int, ...], np.ndarray]:
        if not contexts:
            return {}
        rows = self.model.full_rows([list(prompts[c]) for c in contexts])
        self.inference_tokens += len(contexts)
        for ctx, row in zip(contexts, rows, strict=True):
            row.setflags(write=False)
            self._rows[prompts[ctx]] = row
        limit = max(4, ROW_CACHE_BYTES // (8 * self.vocab_size))
        while len(self._rows) > limit:
            self._rows.popitem(last=False)
        return dict(zip(contexts, rows, strict=True))

    def _fetch_top(
        self, contexts: list[tuple[int, ...]], prompts: dict[tuple[int, ...], tuple[int, ...]]
    ) -> dict[tuple[int, ...], np.ndarray]:
        """Rows for a greedy search: the top ids and the exact ids; a full row where no
        leaf made the top (see `expect`)."""
        if not contexts:
            return {}
        rows = self.model.top_rows([list(prompts[c]) for c in contexts], GREEDY_TOP_K)
        exact = {c: self._wide[c][1] for c in contexts if len(self._wide[c][1])}
        by_ctx = dict(zip(contexts, rows, strict=True))
        for group, ids in _group_by_ids(list(exact), exact):
            values = self.model.chosen_rows([list(prompts[c]) for c in group], ids)
            for ctx, row in zip(group, values, strict=True):
                by_ctx[ctx][ids] = row[ids]
        self.inference_tokens += len(contexts)
        missing = [c for c in contexts if not np.isfinite(by_ctx[c][self._wide[c][0]]).any()]
        out = {c: row for c, row in by_ctx.items() if c not in missing}
        for ctx, row in out.items():
            row.setflags(write=False)
            self._top[prompts[ctx]] = row
        while len(self._top) > CHOSEN_ROWS_KEPT:
            self._top.popitem(last=False)
        out.update(self._fetch_full(missing, prompts))
        return out

    def _fetch_chosen(
        self, contexts: list[tuple[int, ...]], prompts: dict[tuple[int, ...], tuple[int, ...]]
    ) -> dict[tuple[int, ...], np.ndarray]:
        """Rows by chosen ids: nodes grouped so that each request asks at most 128 ids."""
        out: dict[tuple[int, ...], np.ndarray] = {}
        for group, ids in _group_by_ids(contexts, self._needs):
            rows = self.model.chosen_rows([list(prompts[c]) for c in group], ids)
            self.inference_tokens += len(group)
            for ctx, row in zip(group, rows, strict=True):
                row.setflags(write=False)
                self._chosen[prompts[ctx]] = (frozenset(ids), row)
                out[ctx] = row
        while len(self._chosen) > CHOSEN_ROWS_KEPT:  # per keystroke: keep the latest only
            del self._chosen[next(iter(self._chosen))]
        return out


def _group_by_ids(
    keys: list[tuple[int, ...]], needs: dict[tuple[int, ...], np.ndarray]
) -> list[tuple[list[tuple[int, ...]], list[int]]]:
    """Keys in groups whose needed ids together are at most `MAX_CHOSEN_IDS`.

    Example:
        >>> needs = {(1,): np.arange(100), (2,): np.arange(50, 120), (3,): np.arange(200, 300)}
        >>> [(g, len(ids)) for g, ids in _group_by_ids([(1,), (2,), (3,)], needs)]
        [([(1,), (2,)], 120), ([(3,)], 100)]
    """
    groups: list[tuple[list[tuple[int, ...]], set[int]]] = []
    for key in keys:
        need = set(needs[key].tolist())
        for members, ids in groups:
            if len(ids | need) <= MAX_CHOSEN_IDS:
                members.append(key)
                ids |= need
                break
        else:
            groups.append(([key], need))
    return [(members, sorted(ids)) for members, ids in groups]


def tree_reads(tree: Tree, events: np.ndarray | None) -> NodeReads:
    """What a sampler reads of each node's row, keyed by ``trunk + path``: (the ids of its
    leaves, the ids it reads exactly: its children's tokens), with the end-of-text
    events at ``tree.complete`` in both (what `ByteSampler` and `LazyTree` read with an
    identity transform)."""
    trunk = tuple(int(t) for t in tree.trunk)
    children: dict[tuple[int, ...], list[int]] = {}
    for node in tree.nodes:
        if node.path:
            children.setdefault(tuple(node.path[:-1]), []).append(int(node.path[-1]))
    reads: NodeReads = {}
    no_events = np.zeros(0, dtype=np.int64)
    for node in tree.nodes:
        path = tuple(node.path)
        ends = events if events is not None and path == tree.complete else no_events
        leaves = np.concatenate([np.asarray(node.leaves, dtype=np.int64), ends])
        exact = np.concatenate([np.asarray(children.get(path, []), dtype=np.int64), ends])
        reads[trunk + path] = (np.unique(leaves), np.unique(exact))
    return reads


# --------------------------------------------------------------------------------------
# Samplers that use what the server offers: chosen ids, streamed generation
# --------------------------------------------------------------------------------------


class RemoteByteSampler(ByteSampler):
    """`ByteSampler` over a `VLLMModel`: with an identity transform a node that needs at
    most 128 entries (its leaves, children and events) goes as chosen ids."""

    session: VLLMSession

    def _score(self, transform: Transform | None = None) -> Any:
        transform = transform or Transform()
        if not transform.is_identity:
            return super()._score(transform)  # a transform reads whole rows
        tree = self.vct.tree()
        reads = tree_reads(tree, self.event_ids)
        if self.track_prefix:  # log P(trunk) reads one entry of each new trunk row
            start = _common_prefix(self._scored, tree.trunk)
            none = np.zeros(0, dtype=np.int64)
            for i in range(start, len(tree.trunk)):
                reads[tuple(tree.trunk[:i])] = (none, np.array([tree.trunk[i]], dtype=np.int64))
        with self.session.expect(reads):
            return super()._score(transform)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _Stream:
    """A streamed generation kept open: its tokens so far are ``context``; ``tokens``
    yields the next ones; closing it makes vLLM abort the request."""

    def __init__(self, context: list[int], stack: contextlib.ExitStack, tokens: Iterator[int]):
        self.context = context
        self.stack = stack
        self.tokens = tokens

    def close(self) -> None:
        self.stack.close()


class RemoteCompleter(Completer):
    """`Completer` over a `VLLMModel`: the leaf as in process (chosen ids where they are
    cheaper), then ordinary generation streamed from the server in one request.

    Sampling with the identity transform (temperature 1, no top-k/top-p) draws the
    token after each node that would be a full row from the server instead of reading
    that row (`LazyTree`'s drawn nodes): the stream that drew an accepted leaf goes on as
    the completion, one that drew a child's token goes on as the child's draw, one that
    drew another token is closed, and the draw is asked again (with a new seed:
    ``seed + k * SEED_STEP`` at the k-th stream, when the settings have one).
    ``draw_leaves = False`` asks those rows instead (whole rows, as before).
    """

    model: VLLMModel
    draw_leaves = True

    def __init__(self, model: VLLMModel, engine: Engine, start_id: int | None = None) -> None:
        super().__init__(model, engine, start_id)
        self.sampler = RemoteByteSampler(model, engine, track_prefix=False, start_id=self.start_id)
        self.session = self.sampler.session
        self._stream: _Stream | None = None  # the draw that won, until the completion ends
        self._draws = 0  # draws made for this completion (their seeds differ)

    def complete(
        self,
        prefix: bytes,
        settings: Settings | None = None,
        *,
        should_stop: StopCheck | None = None,
        cut: Cut | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """`Completer.complete`; a stream left open by a drawn leaf is closed at the end."""
        self._draws = 0
        try:
            return super().complete(
                prefix, settings or Settings(), should_stop=should_stop, cut=cut, deadline=deadline
            )
        finally:
            self._close_stream()

    def _lazy_leaf(
        self,
        tree: Tree,
        transform: Transform,
        s: Settings,
        greedy: bool,
        rng: Draws,
        out: _Output,
    ) -> tuple[int, ...]:
        if not transform.is_identity:
            return super()._lazy_leaf(tree, transform, s, greedy, rng, out)
        events = None if s.ignore_eos else self.sampler.event_ids
        reads = tree_reads(tree, events)
        with self.session.expect(reads, greedy=greedy):
            drawn = [] if greedy or s.ignore_eos else self._drawable(tree, reads)
            if not drawn:
                return super()._lazy_leaf(tree, transform, s, greedy, rng, out)
            return self._drawn_leaf(tree, drawn, s, rng, out, events)

    def _drawable(self, tree: Tree, reads: NodeReads) -> list[tuple[int, ...]]:
        """Paths of the nodes that are drawn: those that would be asked as whole rows
        (their leaves and children are more than 128 ids)."""
        if not self.draw_leaves:
            return []
        trunk = tuple(int(t) for t in tree.trunk)
        return [
            node.path
            for node in tree.nodes
            if len(np.union1d(*reads[trunk + tuple(node.path)])) > MAX_CHOSEN_IDS
        ]

    def _drawn_leaf(
        self,
        tree: Tree,
        drawn: list[tuple[int, ...]],
        s: Settings,
        rng: Draws,
        out: _Output,
        events: np.ndarray | None,
    ) -> tuple[int, ...]:
        """The leaf of a `LazyTree` whose nodes at ``drawn`` are sampled by the server."""

        def fetch(paths: list[tuple[int, ...]]) -> Sequence[np.ndarray]:
            self._interrupt(out)
            self._close_stream()  # a draw before a row was rejected: stop its generation
            return session_rows(self.session, tree.trunk, paths)

        depth = max(len(node.path) for node in tree.nodes)

        def draw(path: tuple[int, ...]) -> int:
            self._interrupt(out)
            # room for the tokens down to the deepest leaf, then the completion's
            return self._draw(list(tree.trunk) + list(path), s, depth - len(path))

        before = self._draws
        lazy = LazyTree(tree, fetch, None, events, draw=draw, drawn=drawn, draw_tries=DRAW_TRIES)
        leaf = lazy.sample(rng).sequence
        stream = self._stream
        taken = stream is not None and stream.context == list(tree.trunk) + list(leaf)
        if not taken:
            self._close_stream()  # a rejected draw's: the leaf came from a row
        self.model.client.stats.rejected_draws += self._draws - before - int(taken)
        return leaf

    @staticmethod
    def _interrupt(out: _Output) -> None:
        if out.should_stop is not None and out.should_stop():
            raise Interrupted("completion interrupted")

    def _draw(self, context: list[int], s: Settings, below: int) -> int:
        """One token from the server after ``context`` (temperature 1), its stream kept
        open (`_Stream`) to go on as the completion when the token is taken. A stream
        that drew a child's token is already at the child: its next token is the draw."""
        stream = self._stream
        if stream is not None and stream.context == context:
            token = next(stream.tokens, None)
            if token is not None:
                self.model.client.stats.streamed_tokens += 1
                stream.context = context + [token]
                return token
        self._close_stream()
        prompt = self.session.prompt(context)
        wanted = s.max_tokens + below
        max_tokens = max(1, min(wanted, self.model.max_context - len(prompt)))
        seed = None if s.seed is None else (s.seed + self._draws * SEED_STEP) % (1 << 63)
        self._draws += 1
        body = {**self._stream_body(prompt, max_tokens, s), "seed": seed}
        if seed is None:
            del body["seed"]
        stack = contextlib.ExitStack()
        try:
            chunks = stack.enter_context(self.model.client.stream_completion(body))
            tokens = self._stream_tokens(chunks)
            token = next(tokens, None)
        except BaseException:
            stack.close()
            raise
        stats = self.model.client.stats
        stats.leaf_draws += 1
        if token is None:
            stack.close()
            raise EngineRefused(f"engine at {self.model.client.url} generated no token")
        stats.streamed_tokens += 1
        self._stream = _Stream(context + [token], stack, tokens)
        return token

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def _stream_tokens(self, chunks: Iterator[dict[str, Any]]) -> Iterator[int]:
        """The generated token ids of a stream, in order. A stop the server reports
        without its token is the ``stop_reason`` token, or the model's end-of-text token
        when it names none (vLLM's ``stop_reason`` is None only for that one)."""
        for chunk in chunks:
            choice = (chunk.get("choices") or [{}])[0]
            ids = choice.get("token_ids") or []
            yield from (int(t) for t in ids)
            if choice.get("finish_reason") == "stop" and not ids:
                stop = choice.get("stop_reason")
                stop = stop if isinstance(stop, int) else self.model.eos_token_id
                if stop is None:
                    stop = int(self._special_ids[0]) if len(self._special_ids) else -1
                yield int(stop)
            if choice.get("finish_reason"):
                return

    def _generate(
        self, context: list[int], s: Settings, rng: Draws, out: _Output, budget: int
    ) -> int:
        """Ordinary generation after ``context``, streamed (going on with the stream that
        drew the leaf, when one did); the stream is closed (vLLM aborts the request) at a
        stop string, a scope cut, the deadline or a cancel.

        ``ignore_eos`` masks every special token, which vLLM cannot: row by row then."""
        if s.ignore_eos or budget <= 0:
            return super()._generate(context, s, rng, out, budget)
        stream = self._stream
        if stream is not None and stream.context == context:
            return self._consume(stream.tokens, context, out, budget)
        self._close_stream()
        if out.before_step():
            return 0
        prompt = self.session.prompt(context)
        max_tokens = min(budget, self.model.max_context - len(prompt))
        if max_tokens <= 0:
            out.reason = "max_tokens"
            return 0
        with self.model.client.stream_completion(
            self._stream_body(prompt, max_tokens, s)
        ) as chunks:
            return self._consume(self._stream_tokens(chunks), context, out, max_tokens)

    def _consume(self, tokens: Iterator[int], context: list[int], out: _Output, budget: int) -> int:
        """Read up to ``budget`` tokens of a stream into ``context`` and ``out``."""
        made = 0
        stats = self.model.client.stats
        if out.before_step():
            return 0
        for token in tokens:
            made += 1
            stats.streamed_tokens += 1
            if token in self._special:
                out.reason = "eos"
                return made
            context.append(token)
            if out.add(self.tok.token_bytes[token] or b""):
                return made
            if made >= budget or out.before_step():
                break
        out.reason = out.reason or "max_tokens"
        return made

    def _stream_body(self, prompt: list[int], max_tokens: int, s: Settings) -> dict[str, Any]:
        """The request of a streamed generation. Every sampling parameter is set (the
        neutral value where midword has none): the server would otherwise fill them
        from the model's generation_config.json (a repetition penalty, say), and sample
        from another distribution than the model's."""
        body: dict[str, Any] = {
            "model": self.model.name,
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
            "stop_token_ids": sorted(int(i) for i in self._special_ids),
        }
        if s.seed is not None and s.temperature > 0:
            body["seed"] = int(s.seed)
        return body


# --------------------------------------------------------------------------------------
# Connecting
# --------------------------------------------------------------------------------------


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
    body = probe._scoring_body([[start if start is not None else 0]], logprobs=-1)

    def whole(entry: dict[str, float]) -> bool:
        ids, _ = _row_entries(entry)
        return len(ids) >= at_least and int(ids.max()) + 1 == len(ids)

    entry = probe._checked_entries(body, whole)[0]
    return len(entry)
