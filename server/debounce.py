"""How long an automatic inline request waits for typing to pause before the model runs.

While the user types, each keystroke brings a request, and all but the last are
superseded by the next keystroke: running the model for them takes the worker
from the one that counts. So an automatic request waits; if another edit or
request for the buffer comes meanwhile it is dropped without reaching the model.
The wait follows the user's typing speed, as Tabby's debouncer does: an
exponential moving average of the intervals between keystrokes (an interval
longer than `PAUSE_S` is a pause, not typing speed, and is left out), times
`RATE`, clamped to [`MIN_MS`, `MAX_MS`]. A fast typist waits little; a slow one
waits longer, since their next key comes later. Invoked requests never wait.

>>> typing = TypingSpeed()
>>> typing.delay_s()  # nothing seen yet: the starting estimate
0.4
>>> for t in (0.0, 0.08, 0.16, 0.24, 0.32, 0.40, 0.48, 0.56, 0.64, 0.72):
...     typing.keystroke(t)
>>> round(typing.delay_s(), 3)  # 80 ms between keys
0.178
>>> typing.keystroke(60.0)  # a minute's pause says nothing about speed
>>> round(typing.delay_s(), 3)
0.178
>>> fixed_delay_s(250, typing), fixed_delay_s(0, typing)
(0.25, 0.0)
"""

from __future__ import annotations

__all__ = ["MAX_MS", "MIN_MS", "DocumentTyping", "TypingSpeed", "fixed_delay_s"]

MIN_MS = 100.0
MAX_MS = 1000.0
RATE = 2.0  # the wait is this many typical intervals: the next key would have come by then
START_INTERVAL_S = 0.2  # the estimate before any interval was seen
PAUSE_S = 1.0  # a longer interval is a pause in typing, not part of its speed
SMOOTHING = 0.25  # weight of the newest interval in the moving average


class TypingSpeed:
    """An exponential moving average of the intervals between keystrokes (seconds)."""

    def __init__(self, interval_s: float = START_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.last_s: float | None = None  # when the latest keystroke came

    def keystroke(self, now: float) -> None:
        """Record a keystroke (an edit) at time ``now`` (monotonic seconds)."""
        if self.last_s is not None:
            interval = now - self.last_s
            if 0.0 <= interval <= PAUSE_S:
                self.interval_s += SMOOTHING * (interval - self.interval_s)
        self.last_s = now

    def delay_s(self) -> float:
        """How long an automatic request waits after the latest keystroke."""
        return min(MAX_MS, max(MIN_MS, RATE * self.interval_s * 1000.0)) / 1000.0

    def wait_s(self, now: float, setting: str | int) -> float:
        """Seconds still to wait at ``now`` under the ``debounceMs`` setting: the delay
        counts from the latest keystroke, not from the request."""
        delay = fixed_delay_s(setting, self)
        if delay <= 0.0 or self.last_s is None:  # off, or no typing seen: nothing to wait for
            return 0.0
        return max(0.0, self.last_s + delay - now)


def fixed_delay_s(setting: str | int, typing: TypingSpeed) -> float:
    """The delay that ``debounceMs`` asks for: ``"auto"`` the adaptive one, N milliseconds."""
    if setting == "auto":
        return typing.delay_s()
    return max(0, int(setting)) / 1000.0


class DocumentTyping:
    """The latest keystroke of each document, and the user's typing speed.

    A request waits for typing to pause *in its own document*: edits to other buffers
    (a formatter, a code generator, a file reloaded from disk, a second editor
    window) are not the user typing at this cursor, and counted globally they would
    hold back every request as long as anything anywhere is being edited. The speed
    belongs to the user: a buffer typed in for the first time starts from the
    estimate of the one typed in last.

    >>> typing = DocumentTyping()
    >>> typing.keystroke("a.py", 10.0)
    >>> round(typing.wait_s("a.py", 10.1, "auto"), 3)  # 0.4 s after a.py's keystroke
    0.3
    >>> typing.keystroke("b.py", 10.1)  # a tool edits another buffer
    >>> round(typing.wait_s("a.py", 10.1, "auto"), 3)  # a.py's wait is unchanged
    0.3
    >>> typing.wait_s("c.py", 10.1, "auto")  # never typed in: nothing to wait for
    0.0
    """

    def __init__(self) -> None:
        self._documents: dict[str, TypingSpeed] = {}
        self._latest: TypingSpeed | None = None  # the document typed in last

    def keystroke(self, uri: str, now: float) -> None:
        """Record an edit of ``uri`` at ``now`` (monotonic seconds)."""
        typing = self._documents.get(uri)
        if typing is None:
            start = self._latest.interval_s if self._latest is not None else START_INTERVAL_S
            typing = self._documents[uri] = TypingSpeed(start)
        typing.keystroke(now)
        self._latest = typing

    def wait_s(self, uri: str, now: float, setting: str | int) -> float:
        """Seconds a request for ``uri`` still waits at ``now`` (see `TypingSpeed.wait_s`)."""
        typing = self._documents.get(uri)
        return 0.0 if typing is None else typing.wait_s(now, setting)

    def forget(self, uri: str) -> None:
        """The document was closed."""
        typing = self._documents.pop(uri, None)
        if typing is self._latest:
            self._latest = None
