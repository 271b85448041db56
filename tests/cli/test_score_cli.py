"""``midword score`` and ``midword complete --candidates`` (issue 39) on the shipped model:
the scores printed are the engine's (checked against brute force in
tests/engine/test_candidates.py), candidates come from --candidate and files in order,
whole names lose the typed part, and a guided completion takes the best-scored name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from midword.engine import ByteSampler, load_engine, load_hf_model, score_continuations

from midword.cli import main
from midword.models import shipped_test_model

MODEL = str(shipped_test_model())
COMMON = ("--model", MODEL, "--backend", "torch")
PREFIX = "    self.assertEq"
TOL = 1e-5  # the same float32 computations, in another process order at most


def _json_lines(capsys: pytest.CaptureFixture, *argv: str) -> list[dict]:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture(scope="module")
def names_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("names") / "names.txt"
    path.write_text("assertEqual\n\nassertEquals\nassertIn\r\n", encoding="utf-8")
    return path


def test_score_json_is_the_engines(capsys: pytest.CaptureFixture) -> None:
    conts = ["ual", "uals", "", "uil"]
    argv = ["score", *COMMON, "--json", "--end", "none", PREFIX, "x = Non"]
    [first, second] = _json_lines(capsys, *argv, *(f"--candidate={c}" for c in conts))
    assert first["end"] == "none" and first["inference_tokens"] > 0
    assert [row["candidate"] for row in first["candidates"]] == conts
    engine = load_engine(MODEL)
    sampler = ByteSampler(load_hf_model(MODEL), engine)
    for prefix, answer in ((PREFIX, first), ("x = Non", second)):
        want = score_continuations(sampler, prefix.encode(), [c.encode() for c in conts], "none")
        for row, score in zip(answer["candidates"], want, strict=True):
            assert math.isclose(row["logprob"], score.logprob, abs_tol=TOL), (prefix, row)
            assert row["reach_logprob"] == row["logprob"]  # no end condition
    assert first["candidates"][2]["logprob"] == 0.0  # the empty continuation is certain


def test_score_names_from_a_file(capsys: pytest.CaptureFixture, names_file: Path) -> None:
    argv = ["score", *COMMON, "--json", "--names", "--candidates", str(names_file)]
    [answer] = _json_lines(capsys, *argv, "--candidate", "assertTrue", PREFIX)
    rows = {row["candidate"]: row for row in answer["candidates"]}
    assert list(rows) == ["assertTrue", "assertEqual", "assertEquals", "assertIn"]
    assert rows["assertIn"]["logprob"] is None and rows["assertTrue"]["logprob"] is None
    for name in ("assertEqual", "assertEquals"):
        assert rows[name]["logprob"] <= rows[name]["reach_logprob"] <= 0
    # the name that ends after "ual" is not the one that goes on with "s"
    total = math.exp(rows["assertEqual"]["logprob"]) + math.exp(rows["assertEquals"]["logprob"])
    assert total <= 1


def test_score_text_lists_the_likeliest_first(capsys: pytest.CaptureFixture) -> None:
    assert main(["score", *COMMON, PREFIX, "--candidate", "uil", "--candidate", "ual"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "inference tokens" in lines[0]
    assert [line.split()[-1] for line in lines[1:]] == ["ual", "uil"]


def test_complete_guided_takes_the_best_name(
    capsys: pytest.CaptureFixture, names_file: Path
) -> None:
    scored = ["score", *COMMON, "--json", "--names", "--candidates", str(names_file), PREFIX]
    [answer] = _json_lines(capsys, *scored)
    ranked = [r for r in answer["candidates"] if r["logprob"] is not None]
    best = max(ranked, key=lambda r: r["logprob"])
    argv = ["complete", *COMMON, "--json", "--max-tokens", "3", "--candidates", str(names_file)]
    [guided, plain] = _json_lines(capsys, *argv, PREFIX, "x = 1")
    assert guided["method"] == "bytesampler+symbols" and guided["guided"]
    assert guided["chosen"] == best["candidate"]
    assert math.isclose(guided["logprob"], best["logprob"], abs_tol=TOL)
    assert guided["completion"].startswith(best["candidate"][len("assertEq") :])
    assert not plain["guided"] and plain["method"] == "bytesampler"
    assert plain["reason"] == "no candidate extends '1'" and plain["chosen"] is None
    [alone] = _json_lines(capsys, "complete", *COMMON, "--json", "--max-tokens", "3", "x = 1")
    assert plain["completion"] == alone["completion"]  # the fallback is the plain completion


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["score", PREFIX], "give candidates"),
        (["score", PREFIX, "--candidates", "/no/such/file"], "cannot read /no/such/file"),
        (["complete", PREFIX, "--candidate", "x", "--method", "naive"], "--candidates needs"),
    ],
)
def test_errors_are_one_line(capsys: pytest.CaptureFixture, argv: list[str], message: str) -> None:
    assert main([*argv, *COMMON]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
