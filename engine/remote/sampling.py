"""Samplers over a vLLM server: a tree's leaf from chosen ids or server draws, then streamed generation.

The in-process `ByteSampler` and `Completer` (engine/sample/sampling.py, engine/sample/generate.py),
adapted to what the server offers, for the team-server backend (overview in
`midword.engine.remote.backend`):

* `RemoteByteSampler` reads a node as chosen ids when it needs at most 128 entries
  (`VLLMSession.expect`), not as a whole row;
* `RemoteCompleter` chooses the leaf the same way, then streams ordinary generation
  from the server in one request; closing the stream (cancel, stop string, scope cut)
  makes vLLM abort it. At temperature 1 a node that would go as a whole row is not
  asked at all: the server draws the token after it (`LazyTree`'s drawn nodes), in the
  streamed request that goes on as the completion when the draw is taken
  (`RemoteCompleter._drawn_leaf`).

The samplers read their model through `StreamingModel`, so this module does not import
the model's (engine/remote/model.py makes them).

Example:
    >>> completer = connect_vllm(url, engine).completer(engine)          # doctest: +SKIP
    >>> completer.complete(b"def ma", Settings(temperature=1.0, seed=7))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import EngineRefused
from ..sample.generate import Completer, Completion, Cut, Interrupted, Settings, StopCheck, _Output
from ..sample.lazy_pbp import Draws, LazyTree
from ..sample.sampling import ByteSampler, session_rows
from ..sample.transform import Transform
from .client import VLLMClient
from .session import NodeReads, VLLMSession, tree_reads
from .wire import MAX_CHOSEN_IDS, stream_body, stream_tokens

if TYPE_CHECKING:
    from ..tree.tables import Engine
    from ..tree.vct import Tree

__all__ = [
    "DRAW_TRIES",
    "SEED_STEP",
    "RemoteByteSampler",
    "RemoteCompleter",
    "StreamingModel",
]

DRAW_TRIES = 8  # rejected draws at a node before its row is asked (see RemoteCompleter)
SEED_STEP = 0x9E3779B1  # a draw asked again with a user's seed uses seed + k * SEED_STEP


class StreamingModel(Protocol):
    """What the samplers read of their model (`VLLMModel`): its sessions, its client
    (streams, counts) and what a streamed request needs."""

    vocab_size: int
    client: VLLMClient
    name: str  # the served model's name
    max_context: int
    eos_token_id: int | None

    def session(self, bos_id: int | None = None) -> VLLMSession: ...

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray: ...


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

    model: StreamingModel
    draw_leaves = True

    def __init__(self, model: StreamingModel, engine: Engine, start_id: int | None = None) -> None:
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
        """The generated token ids of a stream, the stop token included (`stream_tokens`)."""
        return stream_tokens(chunks, self.model.eos_token_id, self._special_ids)

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
        """The request of a streamed generation, stopping at every special token."""
        return stream_body(self.model.name, prompt, max_tokens, s, self._special_ids)
