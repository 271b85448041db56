"""The model worker's one thread and the order in which it takes work.

Every model call runs on one thread (one model serves every document, and a
forward pass already uses the cores torch is given). What it runs next is
chosen, not first-come first-served, because under a busy editor the queue is
the latency:

1. **Calls** (`submit`): switching models, closing a document, reading state.
   They are short and come first, in the order they were made.
2. **Requests** (`request`): completions, at most one per key (a document).
   A newer request for the same key *supersedes* the waiting one, which is
   answered with `Superseded` at once and never reaches the model. Between
   keys the newest request runs first: it is for the cursor being typed at.
3. **Background work** (`background`): one job per key, coalesced (the latest
   replaces the one waiting) and debounced (due ``delay`` seconds after the
   latest post). It runs only when no call or request waits, and it is meant to
   check `busy` between its steps and give way.

>>> scheduler = Scheduler()
>>> scheduler.submit(sum, [1, 2]).result()
3
>>> scheduler.shutdown()
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
import traceback
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Scheduler", "Superseded"]

log = logging.getLogger("midword.server")
EXIT_WAIT_S = 5.0  # at interpreter exit, how long a running job gets to stop


class Superseded(Exception):
    """A newer request for the same document took this one's place before it ran."""


@dataclass
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future[Any] = field(default_factory=Future)

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # cancelled while it waited
        try:
            result = self.fn(*self.args)
        except BaseException as exc:  # handed to whoever waits on the future
            # The finished frames' locals go now (a stopped request's covering tree, score
            # rows, the document itself if it was evicted meanwhile): kept, they would live
            # as long as the exception, which sits in the future and in a cycle through
            # the awaiting coroutine's frame until a full collection. Line numbers stay.
            traceback.clear_frames(exc.__traceback__)
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


@dataclass
class _Background:
    fn: Callable[..., None]
    args: tuple[Any, ...]
    due: float  # time.monotonic() from which it may run


class Scheduler:
    """One worker thread taking calls, then the newest request, then due background work."""

    def __init__(self, name: str = "midword-model") -> None:
        self._cond = threading.Condition()
        self._calls: deque[_Job] = deque()
        self._requests: OrderedDict[str, _Job] = OrderedDict()  # key -> waiting request
        self._background: dict[str, _Background] = {}
        self._closed = False
        # when the idle worker wakes by itself (inf: never; -inf: it is working): a post
        # due later needs no wake-up, so typing does not wake it on every keystroke
        self._wake_at = -math.inf
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _RUNNING.add(self)

    # ------------------------------------------------------------------ posting work
    @property
    def thread(self) -> threading.Thread:
        """The one thread that runs every job."""
        return self._thread

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` ahead of requests and background work."""
        job = _Job(fn, args)
        with self._cond:
            self._check_open()
            self._calls.append(job)
            self._cond.notify()
        return job.future

    def request(self, key: str, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` as ``key``'s request; a waiting one for ``key`` is superseded."""
        job = _Job(fn, args)
        with self._cond:
            self._check_open()
            old = self._requests.pop(key, None)
            self._requests[key] = job  # at the end: the newest, taken first
            self._cond.notify()
        if old is not None and old.future.set_running_or_notify_cancel():
            old.future.set_exception(Superseded(f"a newer request for {key} came"))
        return job.future

    def background(self, key: str, fn: Callable[..., None], *args: Any, delay: float = 0) -> None:
        """Run ``fn(*args)`` once nothing else waits, ``delay`` s after the latest post for
        ``key`` (a waiting job for ``key`` is replaced). Errors are logged."""
        with self._cond:
            self._check_open()
            self._background.pop(key, None)  # re-posted: it moves to the end (newest)
            due = time.monotonic() + delay
            self._background[key] = _Background(fn, args, due)
            if due < self._wake_at:  # else the worker wakes in time (or is working)
                self._cond.notify()

    def take_background(self, key: str) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
        """Remove ``key``'s waiting background job and return it (to run it now, or never)."""
        with self._cond:
            job = self._background.pop(key, None)
        return (job.fn, job.args) if job is not None else None

    def has_request(self, key: str) -> bool:
        """A request for ``key`` waits to run."""
        with self._cond:
            return key in self._requests

    def has_background(self, key: str) -> bool:
        """Background work for ``key`` waits (posted after the one running, if any)."""
        with self._cond:
            return key in self._background

    def busy(self) -> bool:
        """A call or a request waits: background work should stop at its next step."""
        return bool(self._calls or self._requests)  # read without the lock: a hint

    def background_keys(self) -> list[str]:
        with self._cond:
            return list(self._background)

    @property
    def closed(self) -> bool:
        """Shut down: a running job should stop at its next check."""
        return self._closed

    def join(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the job running now to end (after `shutdown`)."""
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def shutdown(self) -> None:
        """Stop after the job running now; waiting jobs are cancelled."""
        with self._cond:
            self._closed = True
            waiting = [*self._calls, *self._requests.values()]
            self._calls.clear()
            self._requests.clear()
            self._background.clear()
            self._cond.notify()
        for job in waiting:
            job.future.cancel()

    # ------------------------------------------------------------------ the thread
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the model worker has shut down")

    def _run(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            if isinstance(job, _Job):
                job.run()
                continue
            try:
                job.fn(*job.args)
            except Exception as exc:  # background work must not end the worker
                log.warning("background work failed: %s", exc)

    def _next(self) -> _Job | _Background | None:
        with self._cond:
            while not self._closed:
                if self._calls:
                    return self._calls.popleft()
                if self._requests:
                    return self._requests.popitem(last=True)[1]
                wait = self._due_background()
                if isinstance(wait, _Background):
                    return wait
                self._wake_at = math.inf if wait is None else time.monotonic() + wait
                self._cond.wait(wait)
                self._wake_at = -math.inf
            return None

    def _due_background(self) -> _Background | float | None:
        """The background job that is due (the one posted last), else seconds to wait."""
        if not self._background:
            return None
        now = time.monotonic()
        due = [key for key, job in self._background.items() if job.due <= now]
        if due:
            return self._background.pop(due[-1])
        return min(job.due for job in self._background.values()) - now


_RUNNING: weakref.WeakSet[Scheduler] = weakref.WeakSet()


@atexit.register
def _stop_at_exit() -> None:
    """The worker is a daemon thread (a hung model call must not keep the process alive),
    and a daemon thread still inside Python when the interpreter finalizes can abort it
    (a client that dies mid-request ends the server that way). So at exit every worker is
    shut down, and its running job, which checks `closed`, gets a moment to stop."""
    for scheduler in list(_RUNNING):
        scheduler.shutdown()
        scheduler.join(EXIT_WAIT_S)
