"""``midword complete --max-lines N --min-confidence P`` (issue 38) on the shipped model:
the lines kept, and the confidence cut equal to the engine's rule applied to the same
completion made in process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from midword.engine import Completer, Settings, confidence_cut, load_engine, load_hf_model

from midword.cli import main

DEFAULT = str(Path(__file__).resolve().parents[2] / "models" / "default")
COMMON = ["complete", "--model", DEFAULT, "--device", "cpu", "--dtype", "float32", "--json"]
BLOCK = "def total(values):\n    result = 0\n    for v in values:\n        "
LINE = "import os\n\n\ndef main(argv):\n    path = os.path.join("


def run(capsys: pytest.CaptureFixture, *argv: str) -> list[bytes]:
    assert main([*COMMON, "--max-tokens", "24", *argv, BLOCK, LINE]) == 0
    out = capsys.readouterr().out.splitlines()
    return [bytes.fromhex(json.loads(line)["completion_hex"]) for line in out]


def test_max_lines_and_min_confidence(capsys: pytest.CaptureFixture) -> None:
    whole = run(capsys)
    if b"\n" not in whole[0]:
        pytest.fail(f"the block completion has one line, nothing to limit: {whole[0]!r}")
    assert run(capsys, "--max-lines", "1") == [data.split(b"\n")[0] for data in whole]
    assert run(capsys, "--max-lines", "2") == [b"\n".join(d.split(b"\n")[:2]) for d in whole]
    model, engine = load_hf_model(DEFAULT, device="cpu", dtype="float32"), load_engine(DEFAULT)
    completer = Completer(model, engine)
    made = [
        completer.complete(p.encode(), Settings(max_tokens=24, solve="tree")) for p in (BLOCK, LINE)
    ]
    assert [m.data for m in made] == whole
    moved = False
    for p in (0.5, 0.05):
        got = run(capsys, "--min-confidence", str(p))
        want = [m.data[: confidence_cut(m.data, m.spans, math.log(p))] for m in made]
        assert got == want, p
        moved |= got != whole
    assert moved  # a threshold cut something


@pytest.mark.parametrize("bad", [["--min-confidence", "1"], ["--min-confidence", "x"],
                                 ["--max-lines", "-1"]])  # fmt: skip
def test_bad_values_are_refused(capsys: pytest.CaptureFixture, bad: list[str]) -> None:
    """Exit status 2 (argparse's for a malformed value, the command's own for the rest)."""
    try:
        status = main([*COMMON, *bad, "x"])
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2
