"""Progress lines on stderr, and durations as people read them.

Example:
    >>> fmt_duration(3725), fmt_duration(65)
    ('1h02m05s', '1m05s')
"""

from __future__ import annotations

import sys
import time

__all__ = ["fmt_duration", "log"]


def log(msg: str) -> None:
    """Progress line to stderr, prefixed with the wall-clock time."""
    print(f"[train_default {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fmt_duration(seconds: float) -> str:
    """``3725`` -> ``'1h02m05s'``; ``65`` -> ``'1m05s'``."""
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
