"""Every docstring example runs: the modules of midword, midword.engine, midword.server,
midword.bench and midword.testing are found by walking the packages (not listed by hand),
the developers' benchmark scripts by their folder, and each one that holds an example is
a test of its own."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOTS = ("midword", "midword.engine", "midword.server")
SKIPPED = ("__main__",)  # running it is the command line, not an import


def _module_names() -> list[str]:
    """Every module under ROOTS (midword.engine and midword.server live in other folders,
    so they are walked from their own paths)."""
    names: set[str] = set()
    for root in ROOTS:
        package = importlib.import_module(root)
        names.add(root)
        for info in pkgutil.walk_packages(package.__path__, f"{root}."):
            if info.name.rsplit(".", 1)[-1] not in SKIPPED:
                names.add(info.name)
    return sorted(names)


def _has_examples(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    with open(spec.origin, encoding="utf-8") as source:
        return ">>>" in source.read()


MODULES = [name for name in _module_names() if _has_examples(name)]
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if ">>>" in p.read_text(encoding="utf-8"))


def test_the_walk_finds_the_three_layers() -> None:
    """The walk is what decides which examples run: it must reach every layer."""
    for expected in ("midword.cli", "midword.engine.model.backend", "midword.server.scope"):
        assert expected in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    _run_examples(importlib.import_module(name), name)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_examples(script: Path) -> None:
    """A script's examples, imported from its file (its main() runs only as a script)."""
    name = f"benchmarks_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
        _run_examples(module, name)
    finally:
        del sys.modules[name]


def _run_examples(module: ModuleType, name: str) -> None:
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    for test in finder.find(module, name):
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, out.getvalue()
    assert result.attempted > 0 or _only_skipped(module, name)


def _only_skipped(module: ModuleType, name: str) -> bool:
    """A module whose every example is marked ``+SKIP`` (it needs a model or a file)."""
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    examples = [ex for test in tests for ex in test.examples]
    return bool(examples) and all(ex.options.get(doctest.SKIP) for ex in examples)
