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

__all__ = ["MAX_MS", "MIN_MS", "TypingSpeed", "fixed_delay_s"]

MIN_MS = 100.0
MAX_MS = 1000.0
RATE = 2.0  # the wait is this many typical intervals: the next key would have come by then
START_INTERVAL_S = 0.2  # the estimate before any interval was seen
PAUSE_S = 1.0  # a longer interval is a pause in typing, not part of its speed
SMOOTHING = 0.25  # weight of the newest interval in the moving average


class TypingSpeed:
    """An exponential moving average of the intervals between keystrokes (seconds)."""

    def __init__(self) -> None:
        self.interval_s = START_INTERVAL_S
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
