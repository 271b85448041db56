"""HTTP transport to one vLLM server: requests, streams, errors and byte counts.

The lowest layer of the team-server backend (`midword.engine.remote.backend` is the
overview). `VLLMClient` sends JSON to a vLLM OpenAI-compatible server and turns every way
a request can fail into one of the `EngineError` classes, with a message that names the
engine and the cause; `WireStats` counts what went over the wire. Nothing here knows
about log-probs or trees: the request bodies and their answers are `vllm_wire`'s.

The API key comes only from the environment (``MIDWORD_ENGINE_API_KEY``) unless one is
passed; TLS certificates are verified unless ``verify=False``. httpx is imported lazily
(when a client is made).

Example:
    >>> stats = WireStats(requests=3, bytes_sent=100)
    >>> stats.minus(WireStats(requests=1)).requests
    2
    >>> client = VLLMClient("http://gpu-box:8000")  # doctest: +SKIP
    >>> client.healthy()                             # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import EngineError, EngineMismatch, EngineRefused, EngineUnavailable

if TYPE_CHECKING:
    import httpx

__all__ = [
    "API_KEY_ENV",
    "TIMEOUT_ENV",
    "EngineError",
    "EngineMismatch",
    "EngineRefused",
    "EngineUnavailable",
    "VLLMClient",
    "WireStats",
    "error_message",
]

API_KEY_ENV = "MIDWORD_ENGINE_API_KEY"
TIMEOUT_ENV = "MIDWORD_ENGINE_TIMEOUT"  # seconds a request may take (default 10)


@dataclass
class WireStats:
    """What a client sent and received: requests, bytes (bodies), rows by kind."""

    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    full_rows: int = 0
    chosen_rows: int = 0
    top_rows: int = 0
    retries: int = 0  # rows asked again (see VLLMModel.checked_entries)
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
                raise EngineRefused(
                    f"engine at {self.url} failed mid-stream: {error_message(chunk)}"
                )
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
            detail = error_message(response.json())
        except ValueError:
            detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
        hint = ""
        if response.status_code in (401, 403):
            hint = f" (set {API_KEY_ENV} to the engine's API key)"
        raise EngineRefused(
            f"engine at {self.url} refused {path}: HTTP {response.status_code}"
            f"{': ' + detail if detail else ''}{hint}"
        )


def error_message(body: Any) -> str:
    """The error message of a vLLM/OpenAI error body, else a short dump.

    Example:
        >>> error_message({"error": {"message": "model x does not exist", "code": 404}})
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
