"""llama.cpp backend: a GGUF file scored in process by llama.cpp, without conversion.

`load_llamacpp_model` opens a GGUF file with llama-cpp-python's low-level C API
(``llama_cpp.llama_cpp``, ctypes bindings of ``llama.h``) and returns a
`LlamaCppModel`; ``model.session()`` opens a `LlamaCppSession`
(engine/model/llamacpp_session.py), the `ScoringSession` that scores a whole covering
tree in one ``llama_decode``: a llama.cpp batch lets one token belong to several
sequences, so each root-to-leaf branch of the tree is a sequence and a shared node is
one KV cell. The quantized weights run as they are: no float32 copy in torch.

Example:
    >>> model = load_llamacpp_model("smollm2.gguf", n_ctx=2048)   # doctest: +SKIP
    >>> session = model.session(bos_id=model.bos_token_id)       # doctest: +SKIP
    >>> session.logprobs([15, 16], [(), (17,), (17, 18)]).shape  # doctest: +SKIP
    (3, 49152)

llama-cpp-python is imported lazily (inside functions); its C library logs nothing to
stdout: its lines go nowhere, or to stderr when ``MIDWORD_LLAMA_LOG=1``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BackendError, ForwardStopped

if TYPE_CHECKING:
    from .llamacpp_session import LlamaCppSession

__all__ = ["DEFAULT_N_CTX", "LlamaCppModel", "LlamaContext", "load_llamacpp_model"]

INSTALL_HINT = (
    "the llama.cpp backend needs llama-cpp-python: pip install llama-cpp-python==0.3.36 "
    "(compiled from source; see `make install`)"
)
DEFAULT_N_CTX = 4096  # cap on the context taken from the model's training length
# sequence ids a context may use (llama.cpp allows 256): a tree takes one per branch, and
# a wider one is scored a group of branches at a time. llama.cpp keeps a logits row per
# sequence id however few are used, and touches them all: 256 rows of a 151,936-token
# vocabulary are 148 MiB, 16 are 9.3 MiB (covering trees of code have at most a handful of
# branches: 1 to 6 nodes over 400 cuts of a Python file, SmolLM2's and Qwen2's tokenizers;
# one id holds the scratch row, one the trunk, 14 are left for branches)
N_SEQ_MAX = 16
# physical batch: llama.cpp's compute buffer holds its activations. 63 rows at most (62
# and a float file's scratch row): flash attention's tiled kernel takes 64 query rows or
# more, and rounds differently (see the K type below); 64 rows rather than 128 took 9 MiB
# less at Qwen2.5-Coder-1.5B's shape and prefilled as fast on a CPU
N_UBATCH = 63
# ggml types of the KV cache. Flash attention's vector kernel gives a query row the same
# values in any batch; its tiled kernel (64 query rows or more: never, by N_UBATCH) and
# its split-KV kernel (a lone query row over 512 cells or more, summed in one chunk per
# thread) round differently, and ggml takes them only when K and V share an F16 or F32
# type. On one thread the split-KV kernel sums a single chunk, bitwise what the vector
# kernel sums, so K and V are F16, llama.cpp's default. On more threads K is BF16, which
# keeps every row on the vector kernel (an F32 K would be cast to F16 first, so it would
# not do); it costs a generated token 10-15% at 940 cells of context, and little in
# accuracy: an F32 file stays within 2.6e-4 of torch (F16 keys: 2.4e-4; BF16 values
# instead: 9.3e-4).
GGML_TYPE_F16, GGML_TYPE_BF16 = 1, 30
# general.file_type values whose matrices are floats (F32, F16, BF16): llamafile's sgemm
# takes their products for two rows or more and not for a lone row, which then rounds
# differently, so decodes of such files never hold a lone row or ask one row's logits
FLOAT_FILE_TYPES = frozenset({0, 1, 32})
FLASH_ATTN_ENABLED = 1  # llama.cpp's LLAMA_FLASH_ATTN_TYPE_ENABLED
LOG_ENV = "MIDWORD_LLAMA_LOG"  # "1": llama.cpp's log lines go to stderr
_GGML_LOG_LEVEL_ERROR = 4


class _Runtime:
    """The bindings, imported and set up once per process (backend, log callback)."""

    lock = threading.Lock()
    ll: Any = None
    log_callback: Any = None  # the ctypes callback must outlive every llama.cpp call
    last_error: list[str] = []  # llama.cpp's last error lines (for a load failure's message)


def bindings() -> Any:
    """The ``llama_cpp.llama_cpp`` module, set up: backend initialized, logging silenced.

    Raises BackendError (one line saying how to install it) when llama-cpp-python is
    missing or its shared library does not load.
    """
    with _Runtime.lock:
        if _Runtime.ll is None:
            try:
                from llama_cpp import llama_cpp as ll
            except (ImportError, OSError) as exc:  # OSError: the library itself
                raise BackendError(f"{INSTALL_HINT} ({type(exc).__name__}: {exc})") from exc
            _Runtime.log_callback = ll.llama_log_callback(_log_line)
            ll.llama_log_set(_Runtime.log_callback, ctypes.c_void_p(0))
            ll.llama_backend_init()
            _Runtime.ll = ll
    return _Runtime.ll


def _log_line(level: int, text: bytes | None, user_data: Any) -> None:
    """llama.cpp's log callback: errors are remembered for our messages; every line goes
    to stderr when ``MIDWORD_LLAMA_LOG=1``, else nowhere (never to stdout: an LSP server
    speaks on stdout)."""
    line = (text or b"").decode("utf-8", "replace")
    if level == _GGML_LOG_LEVEL_ERROR and line.strip():
        _Runtime.last_error[:] = [*_Runtime.last_error[-3:], line.strip()]
    if os.environ.get(LOG_ENV) == "1":
        sys.stderr.write(line)


def _take_error() -> str:
    """llama.cpp's reason for its last failure since the previous call ('' if none): the
    line that says why a model did not load (its last line only says that it did not),
    without the C function's name in front.

    >>> _Runtime.last_error[:] = ["llama_model_load: error loading model: unknown model "
    ...     "architecture: 'qwenZ'", "llama_model_load_from_file_impl: failed to load model"]
    >>> _take_error()
    "unknown model architecture: 'qwenZ'"
    """
    lines, _Runtime.last_error[:] = list(_Runtime.last_error), []
    for line in reversed(lines):
        if "error loading model: " in line:
            return line.split("error loading model: ", 1)[1]
    if not lines:
        return ""
    head, sep, rest = lines[-1].partition(": ")
    return rest if sep and " " not in head else lines[-1]


@dataclass(frozen=True)
class ContextParams:
    """What every context of one model is made with (sessions and the oracle alike)."""

    n_ctx: int
    n_threads: int
    n_seq_max: int = N_SEQ_MAX
    n_ubatch: int = N_UBATCH
    type_k: int | None = None  # ggml type of the cached keys; None: `key_type` decides

    @property
    def key_type(self) -> int:
        """The keys' ggml type: F16 on one thread, else BF16 (see GGML_TYPE_F16).

        Example:
            >>> ContextParams(n_ctx=64, n_threads=1).key_type, ContextParams(64, 4).key_type
            (1, 30)
        """
        if self.type_k is not None:
            return self.type_k
        return GGML_TYPE_F16 if self.n_threads == 1 else GGML_TYPE_BF16


class LlamaContext:
    """One llama.cpp context over a model: a unified KV cache of ``n_ctx`` cells that
    ``n_seq_max`` sequences share, and a reusable batch. Freed with `close` (or when
    garbage collected).

    `decode` evaluates tokens (each with a position and its sequence ids) and returns
    the float64 log-softmax of the rows asked for.
    """

    def __init__(self, model: LlamaCppModel) -> None:
        ll = bindings()
        self.ll, self.model, self.params = ll, model, model.params
        cparams = ll.llama_context_default_params()
        # at least a cell per sequence id: llama.cpp raises a smaller n_ctx to n_seq_max
        # itself, and a batch size left below it fails an assertion that aborts the process;
        # one more for a float file's scratch row (`decode`), and only for one: llama.cpp
        # rounds the cells up to 256, so that cell costs 255 more at 4,096
        cells = max(self.params.n_ctx + int(model.float_matrices), self.params.n_seq_max)
        cparams.n_ctx = cells
        self.rows_per_decode = max(1, min(self.params.n_ubatch, cells) - 1)
        cparams.n_ubatch = self.rows_per_decode + 1  # + the scratch row
        # llama.cpp keeps logits for at least n_seq_max rows and asserts that n_batch
        # allows that many outputs
        cparams.n_batch = max(cparams.n_ubatch, self.params.n_seq_max)
        cparams.type_k, cparams.type_v = self.params.key_type, GGML_TYPE_F16  # see the types
        self.pad_lone_rows = model.float_matrices
        cparams.n_seq_max = self.params.n_seq_max
        cparams.n_threads = cparams.n_threads_batch = self.params.n_threads
        cparams.kv_unified = True  # one cell may belong to many sequences (tree nodes)
        # Flash attention on: it sums a query's visible cells one by one in cell order,
        # skipping masked cells, and the session keeps each context's cells in position
        # order (a stack), so a tree row is bitwise the plain sequence's row. The other
        # path sums in SIMD lanes by cell index: a sibling's cell between two of a
        # context's shifts the lanes, and quantized activations amplify the rounding.
        cparams.flash_attn_type = FLASH_ATTN_ENABLED
        cparams.no_perf = True
        self.ctx = ll.llama_init_from_model(model.handle, cparams)
        if not self.ctx:
            raise BackendError(
                f"llama.cpp could not create a context of {self.params.n_ctx} tokens for "
                f"{model.name}: {_take_error() or 'out of memory?'}"
            )
        self.memory = ll.llama_get_memory(self.ctx)
        # the last sequence id holds the scratch row alone; callers use the others
        self.scratch_seq = int(ll.llama_n_seq_max(self.ctx)) - 1
        self.n_seq_max = self.scratch_seq
        self._batch_size = 0
        self._batch: Any = None
        self._abort: Any = None  # the installed ctypes abort callback (kept alive)

    # -- cells ----------------------------------------------------------------------------

    def clear(self) -> None:
        """Empty the KV cache."""
        self.ll.llama_memory_clear(self.memory, True)

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        """Remove sequence `seq` from the cells at positions [p0, p1) (-1: open end);
        a cell left with no sequence is freed."""
        self.ll.llama_memory_seq_rm(self.memory, seq, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        """Add sequence `dst` to the cells of `src` at positions [p0, p1) (no copy of K/V:
        the cache is unified)."""
        self.ll.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def seq_pos_range(self, seq: int) -> tuple[int, int]:
        """(smallest, largest) position of `seq` in the cache; (-1, -1) if it holds none."""
        lo = int(self.ll.llama_memory_seq_pos_min(self.memory, seq))
        return lo, int(self.ll.llama_memory_seq_pos_max(self.memory, seq))

    # -- evaluation -----------------------------------------------------------------------

    def set_abort(self, callback: Any) -> None:
        """Install a ctypes ``ggml_abort_callback`` (None: remove it)."""
        self._abort = callback
        # ctypes takes no None for a function pointer: an empty prototype is a NULL one
        pointer = callback if callback is not None else self.ll.ggml_abort_callback()
        self.ll.llama_set_abort_callback(self.ctx, pointer, None)

    def decode(
        self,
        tokens: Sequence[int],
        positions: Sequence[int],
        seqs: Sequence[Sequence[int]],
        outputs: Sequence[int],
    ) -> np.ndarray:
        """Evaluate `tokens` at `positions`, token i in the sequences ``seqs[i]`` (the first
        one says what it attends to: the cells of that sequence up to its position);
        returns float64 [len(outputs), vocab] log-softmax after the tokens `outputs` lists
        (indices into `tokens`, ascending).

        Raises ForwardStopped when the abort callback stopped it (the cache may then hold
        part of the batch: the caller cuts it), BackendError for any other failure.

        A row's values must not depend on what else is in its batch: the session
        evaluates a text in other batches than a fresh context does, and must give the
        same log-probs. llama.cpp's CPU kernels keep a row's values only on some paths:
        flash attention's vector kernel (the KV types keep it there: `GGML_TYPE_F16`)
        and, for a file of float matrices, llamafile's sgemm, which skips a lone row. So
        the batch goes in slices of `rows_per_decode` rows, and for such a file a slice
        that would hold one row or ask one row's logits gets a scratch row beside it
        (the last token again, at position 0 of the scratch sequence, with its logits),
        removed after the decode: one more row of compute.
        """
        n = len(tokens)
        if n == 0:
            return np.zeros((0, self.model.vocab_size), dtype=np.float64)
        if n > self.params.n_ctx:
            raise BackendError(f"{n} tokens in one call exceed the context ({self.params.n_ctx})")
        want = np.zeros(n, dtype=np.int8)
        want[np.asarray(outputs, dtype=np.int64)] = 1
        tokens, positions = np.asarray(tokens, np.int64), np.asarray(positions, np.int64)
        parts = []
        for start in range(0, n, self.rows_per_decode):
            end = min(n, start + self.rows_per_decode)
            part = slice(start, end)
            parts.append(self._decode_slice(tokens[part], positions[part], seqs[part], want[part]))
        # a prefill chunk asks rows of its last slice only: no [L, V] copy then
        parts = [p for p in parts if len(p)] or parts[:1]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _decode_slice(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        seqs: Sequence[Sequence[int]],
        want: np.ndarray,
    ) -> np.ndarray:
        """One llama_decode of at most `rows_per_decode` rows (plus the scratch row where
        `decode` says); the log-softmax of its wanted rows."""
        outputs = np.flatnonzero(want)
        pad = self.pad_lone_rows and (len(tokens) == 1 or len(outputs) == 1)
        if pad:
            tokens = np.append(tokens, tokens[-1])
            positions = np.append(positions, 0)
            seqs = [*seqs, (self.scratch_seq,)]
            want = np.append(want, np.int8(1))
        batch = self._batch_for(len(tokens))
        _fill_batch(batch, tokens, positions, seqs, want)
        try:
            code = int(self.ll.llama_decode(self.ctx, batch))
            if code == 2:
                raise ForwardStopped("llama.cpp stopped inside a decode")
            if code != 0:
                why = "no room in the KV cache" if code == 1 else _take_error() or "failed"
                raise BackendError(f"llama.cpp decode returned {code}: {why}")
            return self._logprobs(outputs)
        finally:
            if pad:
                self.seq_rm(self.scratch_seq)

    def _logprobs(self, outputs: Sequence[int]) -> np.ndarray:
        vocab = self.model.vocab_size
        rows = np.empty((len(outputs), vocab), dtype=np.float64)  # [L, V]
        scratch = np.empty(vocab, dtype=np.float32)  # [V], reused row by row
        for j, i in enumerate(outputs):
            ptr = self.ll.llama_get_logits_ith(self.ctx, int(i))
            if not ptr:
                raise BackendError(f"llama.cpp has no logits for batch row {i}")
            # row by row, read in place: a wide tree's rows at once would add three more
            # [L, V] temporaries (90 MiB for 30 rows of a 151,936-token vocabulary)
            logits = np.ctypeslib.as_array(ptr, shape=(vocab,))  # float32 [V], llama.cpp's
            log_softmax_into(logits, rows[j], scratch)
        return rows

    def _batch_for(self, n: int) -> Any:
        """The reusable batch, grown to hold `n` tokens."""
        if n > self._batch_size:
            if self._batch is not None:
                self.ll.llama_batch_free(self._batch)
            size = max(n, min(64, self.params.n_ctx))
            self._batch = self.ll.llama_batch_init(size, 0, self.n_seq_max)
            self._batch_size = size
        return self._batch

    def close(self) -> None:
        """Free the batch and the context (idempotent)."""
        ll = self.ll
        if getattr(self, "_batch", None) is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            ll.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the bindings may be gone
            self.close()


def _fill_batch(
    batch: Any,
    tokens: Sequence[int],
    positions: Sequence[int],
    seqs: Sequence[Sequence[int]],
    want: np.ndarray,
) -> None:
    """Write the tokens into a llama_batch (its arrays are C arrays of the right size)."""
    n = len(tokens)
    batch.n_tokens = n
    # named arrays: `.ctypes.data` is a bare address, and a temporary array could be freed
    # (and its memory reused) before memmove reads it
    token_ids = np.ascontiguousarray(tokens, dtype=np.int32)
    token_pos = np.ascontiguousarray(positions, dtype=np.int32)
    wanted = np.ascontiguousarray(want, dtype=np.int8)
    ctypes.memmove(batch.token, token_ids.ctypes.data, 4 * n)
    ctypes.memmove(batch.pos, token_pos.ctypes.data, 4 * n)
    ctypes.memmove(batch.logits, wanted.ctypes.data, n)
    for i, ids in enumerate(seqs):
        batch.n_seq_id[i] = len(ids)
        row = batch.seq_id[i]
        for k, s in enumerate(ids):
            row[k] = s


def log_softmax_into(logits: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """Write the float64 log-softmax of one float32 row of logits into `out`; `scratch` is
    a float32 row of the same size (overwritten).

    Three passes over the float32 row and one that writes `out`: a generated token pays
    this once per step, and with a 49k-152k vocabulary it was the largest Python cost of
    the step when the row went to float64 first.

    Example:
        >>> out, scratch = np.empty(4), np.empty(4, dtype=np.float32)
        >>> log_softmax_into(np.zeros(4, dtype=np.float32), out, scratch)
        >>> out.round(4).tolist()
        [-1.3863, -1.3863, -1.3863, -1.3863]
    """
    top = logits.max()
    np.subtract(logits, top, out=scratch)
    # the exponentials in float32 (SIMD, twice as fast), summed in float64: a term's
    # rounding moves the total by under 1e-7 of itself, a log-probability by under 1e-8
    total = np.exp(scratch, out=scratch).sum(dtype=np.float64)
    np.subtract(logits, float(top) + np.log(total), out=out, dtype=np.float64)


def _meta_int(ll: Any, handle: Any, key: str) -> int | None:
    """An integer metadata value of the loaded model (None when absent or not a number)."""
    buf = ctypes.create_string_buffer(64)
    if ll.llama_model_meta_val_str(handle, key.encode(), buf, len(buf)) < 0:
        return None
    try:
        return int(buf.value.decode())
    except ValueError:
        return None


def _token_or_none(value: int) -> int | None:
    return int(value) if value >= 0 else None


class LlamaCppModel:
    """A GGUF model loaded by llama.cpp, ready to open scoring sessions.

    Attributes the upper layers read, as on `HFModel`: ``name``, ``vocab_size``,
    ``input_vocab_size``, ``context_length`` (the context's cells: positions a prompt
    plus its tree may take), ``bos_token_id``, ``eos_token_id``; and ``params``
    (threads, context size). Each session owns one llama.cpp context; the model owns
    one more for `sequence_logprobs`.
    """

    backend = "llamacpp"  # what computes it (the server's status names it)

    def __init__(self, handle: Any, name: str, params: ContextParams) -> None:
        ll = bindings()
        self.ll, self.handle, self.name, self.params = ll, handle, name, params
        self.vocab = ll.llama_model_get_vocab(handle)
        self.vocab_size = int(ll.llama_vocab_n_tokens(self.vocab))
        self.input_vocab_size = self.vocab_size
        self.context_length = params.n_ctx
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(handle))
        self.bos_token_id = _token_or_none(int(ll.llama_vocab_bos(self.vocab)))
        self.eos_token_id = _token_or_none(int(ll.llama_vocab_eos(self.vocab)))
        self.device = "cpu"
        file_type = _meta_int(ll, handle, "general.file_type")
        self.float_matrices = file_type is None or file_type in FLOAT_FILE_TYPES
        self._oracle: LlamaContext | None = None
        self._oracle_lock = threading.Lock()

    def session(self, bos_id: int | None = None, trunk_logits_window: int = 8) -> LlamaCppSession:
        """A new `LlamaCppSession` (its own llama.cpp context) with an empty cache."""
        from .llamacpp_session import LlamaCppSession

        return LlamaCppSession(self, bos_id=bos_id, trunk_logits_window=trunk_logits_window)

    def new_context(self) -> LlamaContext:
        """A fresh llama.cpp context with this model's parameters."""
        return LlamaContext(self)

    def sequence_logprobs(self, tokens: Sequence[int]) -> np.ndarray:
        """float64 [len(tokens), vocab]: row i is the distribution after tokens[: i + 1],
        from one plain decode of the sequence in an emptied context (the reference the
        sessions are tested against)."""
        ids = [int(t) for t in tokens]
        if any(t < 0 or t >= self.vocab_size for t in ids):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        with self._oracle_lock:
            if self._oracle is None:
                self._oracle = self.new_context()
            ctx = self._oracle
            ctx.clear()
            try:
                return ctx.decode(ids, range(len(ids)), [(0,)] * len(ids), range(len(ids)))
            finally:
                ctx.clear()

    def close(self) -> None:
        """Free the oracle context and the model (sessions must be closed first)."""
        if self._oracle is not None:
            self._oracle.close()
            self._oracle = None
        if getattr(self, "handle", None):
            self.ll.llama_model_free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()


def load_llamacpp_model(
    path: str | Path,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    max_ctx: int = DEFAULT_N_CTX,
) -> LlamaCppModel:
    """Load a GGUF file with llama.cpp (CPU); every failure is a one-line BackendError.

    n_ctx: KV cells of each context (default: the model's training context, at most
    ``max_ctx``; the cells are allocated up front: 4,096 of them take 112 MiB at
    Qwen2.5-Coder-1.5B's shape); n_threads: default ``os.cpu_count()``.

    Example:
        >>> try:
        ...     load_llamacpp_model("/no/such/file.gguf")
        ... except BackendError as exc:
        ...     print(str(exc)[:40])
        model file not found: /no/such/file.gguf
    """
    src = Path(path).expanduser()
    if not src.is_file():
        raise BackendError(f"model file not found: {path}")
    ll = bindings()
    mparams = ll.llama_model_default_params()
    _take_error()
    handle = ll.llama_model_load_from_file(str(src).encode(), mparams)
    if not handle:
        why = _take_error() or "not a GGUF model file it supports"
        raise BackendError(f"llama.cpp could not load {path}: {why}")
    train = int(ll.llama_model_n_ctx_train(handle))
    ctx_len = int(n_ctx) if n_ctx else min(train if train > 0 else max_ctx, max_ctx)
    threads = int(n_threads) if n_threads else (os.cpu_count() or 1)
    if ctx_len < 1 or threads < 1:
        ll.llama_model_free(handle)
        raise BackendError(f"n_ctx and n_threads must be positive (got {ctx_len}, {threads})")
    return LlamaCppModel(handle, str(path), ContextParams(n_ctx=ctx_len, n_threads=threads))
