"""`midword bench acceptance` on the shipped tiny model: a run's folder and tables,
resuming, and that cutting the one long completion is what generating with each policy
gives (the bench generates once per cut and method, then applies every policy)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("torch")

from midword.engine import Completer, Settings, confidence_cut  # noqa: E402

from midword import cli  # noqa: E402
from midword.bench import acceptance, acceptance_tuning, common, data  # noqa: E402
from midword.bench.acceptance_policies import (  # noqa: E402
    KINDS,
    SPLITS,
    Cursor,
    Generated,
    confident_end,
    first_steps,
    scope_cut,
)
from midword.models import shipped_test_model  # noqa: E402

from ..synthetic_problems import PROBLEMS  # noqa: E402

MODEL_ARGS = ["--model", str(shipped_test_model()), "--device", "cpu", "--threads", "1"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a folder of this repository's sources, a random-span file of three problems)."""
    root = tmp_path_factory.mktemp("acceptance")
    text = root / "text"
    text.mkdir()
    for name in ("cli.py", "modelargs.py"):
        (text / name).write_text((Path(cli.__file__).parent / name).read_text())
    he = root / data.RANDOM_SPAN
    with gzip.open(he, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in PROBLEMS)
    return text, he


def test_tiny_run_resume_and_extend(inputs, tmp_path: Path, capsys, monkeypatch) -> None:
    text, he = inputs
    out = tmp_path / "acc"
    argv = ["bench", "acceptance", *MODEL_ARGS, "--text", str(text), "--data", str(he)]
    argv += ["--max-tokens", "12", "--max-context", "300", "--out", str(out)]
    assert cli.main([*argv, "--limit", "4"]) == 0
    records = _lines(out / "samples.jsonl")
    assert [r["key"] for r in records] == ["0", "1", "2", "3"]
    assert [r["source"] for r in records] == ["stdlib", "humaneval"] * 2
    for r in records:
        assert set(r["methods"]) == set(acceptance.METHODS)
        assert r["cut_kind"] in KINDS and r["split"] in SPLITS
        for m in r["methods"].values():
            size = len(m["text"].encode())
            assert m["tokens"] <= 12 and all(end <= size for end, _ in m["spans"])
            assert all(lp is not None and lp <= 0 for _, lp in m["spans"])  # known: tree solve
        longest = max(len(m["text"]) for m in r["methods"].values())
        assert len(r["truth"]) <= longest + acceptance.TRUTH_MARGIN
    summary = json.loads((out / "results.json").read_text())
    assert summary["cuts"]["all"] == 4
    names = set(summary["policies"]["bytesampler"])
    assert {"multiline auto (today)", "one line (maxLines 1)", "fixed, maxTokens 16"} <= names
    for stats in summary["policies"]["naive"].values():
        assert stats["all"]["n"] == 4
    markdown = (out / "results.md").read_text()
    assert "Held-out split" in markdown and "Goal" in markdown and "Sweep" in markdown
    assert markdown in capsys.readouterr().out
    assert (out / "tradeoff.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "wasted.png").read_bytes()[:8] == PNG_MAGIC
    assert summary["tuned"]["cut"] in acceptance_tuning.THRESHOLDS

    # A rerun resumes: nothing is generated again, the model is not even loaded.
    before = (out / "samples.jsonl").read_bytes()

    def no_model(*_args: object) -> None:
        raise AssertionError("the model was loaded for a finished run")

    monkeypatch.setattr(common, "load_model", no_model)
    assert cli.main([*argv, "--limit", "4"]) == 0
    assert (out / "samples.jsonl").read_bytes() == before
    monkeypatch.undo()

    # A larger --limit extends it: the first cuts stay as they were.
    assert cli.main([*argv, "--limit", "6"]) == 0
    records = _lines(out / "samples.jsonl")
    assert [r["key"] for r in records] == [str(i) for i in range(6)]
    assert (out / "samples.jsonl").read_bytes().startswith(before)

    # Other settings into the same folder are refused (samples never mix).
    assert cli.main([*argv[:-2], "--max-tokens", "13", "--out", str(out), "--limit", "4"]) == 2
    assert "other settings" in capsys.readouterr().err


PREFIXES = (
    "def f(x):\n    ret",
    "import os\n\ndef main():\n    ",
    "class A:\n    def __init__(self, x",
    "for i in range(10):\n    print(",
)


@pytest.mark.parametrize("method", acceptance.METHODS)
def test_policy_cuts_equal_generating_with_the_policy(method: str) -> None:
    """maxTokens N, the server's scope hook and the confidence stop, each applied while
    generating, give what the bench cuts out of one long completion."""
    model, engine = common.load_model(
        cli.build_parser().parse_args(["bench", "acceptance", *MODEL_ARGS])
    )
    completer = Completer(model, engine)
    for prefix in PREFIXES:
        data_ = prefix.encode()
        long = acceptance.generate(completer, data_, method, 24)
        gen = Generated.from_record(long)
        assert long["stop"] in ("max_tokens", "eos")
        for n in (1, 4, 9):
            short = completer.complete(data_, Settings(method=method, max_tokens=n, solve="tree"))
            assert first_steps(gen, n) == short.text, (prefix, n)
        line = prefix[prefix.rfind("\n") + 1 :]
        for policy in ("auto", "always", "never"):
            scope = Cursor(line).scope(policy)
            settings = Settings(method=method, max_tokens=24, solve="tree")
            cut = completer.complete(data_, settings, cut=scope.cut)
            assert scope_cut(gen, scope).data == cut.data, (prefix, policy)
        for t in (0.05, 0.3, 0.7):
            settings = Settings(method=method, max_tokens=24, solve="tree", min_logprob=math.log(t))
            stopped = completer.complete(data_, settings)
            end = confidence_cut(stopped.data, stopped.spans, math.log(t))
            kept = stopped.data[:end] if stopped.data[:end].strip() else b""
            assert gen.data[: confident_end(gen.data, gen.spans, t, t)] == kept, (prefix, t)
