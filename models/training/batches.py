"""Training batches: random chunks of the concatenated documents, reshuffled every epoch.

`BatchStream` is seeded, so runs repeat exactly; with FIM, each epoch's documents are drawn
afresh (in a background thread while the previous epoch trains).

Example:
    >>> stream = BatchStream([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]] * 4, seq_len=4, batch=2, seed=0)
    >>> tuple(stream.next().shape)
    (2, 5)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from .fim import EpochDocs

__all__ = ["BatchStream"]


class BatchStream:
    """Endless training batches of ``seq_len + 1`` tokens from the concatenated documents.

    Each epoch cuts the stream into non-overlapping chunks at a random offset and visits them
    in a random order; everything comes from one seeded generator, so runs repeat exactly.
    `docs` is either fixed, or a function of the epoch number (FIM examples drawn afresh each
    epoch), which runs for epoch k + 1 in a background thread while epoch k trains.
    The stream lives on `device`, and batches are gathered there.
    """

    def __init__(
        self,
        docs: Sequence[Sequence[int]] | EpochDocs,
        seq_len: int,
        batch: int,
        seed: int,
        device: str | torch.device = "cpu",
    ):
        self.seq_len, self.batch, self.device = seq_len, batch, torch.device(device)
        self._docs_for = docs if callable(docs) else None
        self._pool = ThreadPoolExecutor(1, "fim-epochs") if self._docs_for else None
        self.stream = self._flat(docs(0) if callable(docs) else docs).to(self.device)
        self.fresh_epochs = 1  # epochs (so far) whose documents were built afresh
        # Waiting keeps runs repeatable; on a CPU the next epoch is always ready in time.
        self._wait_for_docs = self.device.type == "cpu"
        self._next_docs: Future | None = self._pool.submit(self._build, 1) if self._pool else None
        self.tokens_per_epoch = len(self.stream)
        if len(self.stream) < 2 * (seq_len + 1):
            raise ValueError(f"{len(self.stream)} training tokens: too few for seq_len {seq_len}")
        self.gen = torch.Generator().manual_seed(seed)
        self.epoch = 0
        self._span = torch.arange(seq_len + 1, device=self.device)
        self._starts = torch.empty(0, dtype=torch.long, device=self.device)
        self._pos = 0

    @staticmethod
    def _flat(docs: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.tensor(list(itertools.chain.from_iterable(docs)), dtype=torch.long)

    def _build(self, epoch: int) -> torch.Tensor:
        """The documents of `epoch` as one CPU tensor (runs in the background thread)."""
        assert self._docs_for is not None
        return self._flat(self._docs_for(epoch))

    def _new_epoch(self) -> None:
        if self.epoch > 0 and self._next_docs is not None:
            self._swap_in_next_docs()
        span = self.seq_len + 1
        offset = int(torch.randint(0, self.seq_len, (1,), generator=self.gen))
        n = (len(self.stream) - offset) // span
        order = torch.randperm(n, generator=self.gen)
        self._starts, self._pos = (offset + order * span).to(self.device), 0
        self.epoch += 1

    def _swap_in_next_docs(self) -> None:
        """Use the documents built in the background, and start building the next ones.

        When they are not ready yet (a fast GPU can finish an epoch before the CPU has
        tokenized the next one), the current documents are visited again in a new order
        rather than waiting; `fresh_epochs` counts the epochs that had new documents.
        """
        assert self._next_docs is not None and self._pool is not None
        if self._wait_for_docs or self._next_docs.done():
            self.stream = self._next_docs.result().to(self.device)
            self.fresh_epochs += 1
            self._next_docs = self._pool.submit(self._build, self.fresh_epochs)

    def next(self) -> torch.Tensor:
        """A (batch, seq_len + 1) LongTensor on the stream's device."""
        parts, need = [], self.batch
        while need:
            if self._pos >= len(self._starts):
                self._new_epoch()
            take = self._starts[self._pos : self._pos + need]
            self._pos += len(take)
            parts.append(self.stream[take[:, None] + self._span])
            need -= len(take)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def close(self) -> None:
        """Stop the background thread (a running epoch build finishes first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
