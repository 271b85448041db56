"""pytest fixtures and hooks, built on :mod:`midword.testing` (the support shared with
the benchmarks: tokenizer fixtures, tiny models, the completeness harness)."""

from __future__ import annotations

import os
import sys
from collections.abc import Generator

import pytest

from midword.models import DEFAULT_MODEL_ENV, shipped_test_model
from midword.testing import TOKENIZERS
from midword.testing.deprecations import own_deprecations

# Tests run on the small shipped model, not the default SmolLM2 (converted and 135M
# parameters): wherever a test names no model, in this process and the servers and
# commands it starts. Tests of the default itself unset it.
os.environ[DEFAULT_MODEL_ENV] = str(shipped_test_model())


@pytest.fixture(scope="session", params=TOKENIZERS)
def tokenizer_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def session(client):  # noqa: ANN001, ANN201  (`client`: each server test module's pytest-lsp fixture)
    """The `lsp_support.Session` of the module's server (pytest-lsp yields only the client)."""
    return client.midword_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for xdist's ``--dist loadgroup`` (``make test``): one per test file, so a
    file's module-scoped server starts once, split by tokenizer where a file runs per
    tokenizer (and by ``chunk`` where a test takes one), so the slow exactness files
    spread over the workers; the slow ones first."""
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        split = [str(params[k]) for k in ("tokenizer_name", "chunk") if k in params]
        group = item.nodeid.split("::")[0] + (f"[{'-'.join(split)}]" if split else "")
        item.add_marker(pytest.mark.xdist_group(group))
    # xdist hands groups out in collection order: files with long brute-force tests go
    # first, so no worker starts one of them while the others run out of work (a shorter
    # tail); each file stays in one piece, so its module fixtures are built once
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Each process writes the brute-force oracle's new verdicts to its on-disk store."""
    oracle = sys.modules.get("tests.oracle")
    if oracle is not None:
        oracle.save_kept_verdicts()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A test fails when this checkout's own code causes a DeprecationWarning or
    FutureWarning (even one a library attributes to its own frames): such a call stops
    working when the library drops it. Mark a test ``allow_deprecations`` to let it
    exercise a deprecated path on purpose."""
    if item.get_closest_marker("allow_deprecations"):
        return (yield)
    with own_deprecations() as caught:
        result = yield
    if caught:
        listed = "\n  ".join(dict.fromkeys(map(str, caught)))
        pytest.fail(f"deprecated calls from midword's own code:\n  {listed}", pytrace=False)
    return result
