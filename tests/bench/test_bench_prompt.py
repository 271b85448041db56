"""`midword bench prompt` (issue 38): the prompts of each arm are the server's, the
score of the first character is charlm's, and a tiny run on the shipped model prints
its tables and resumes."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from midword.server.context_files import ContextFiles
from midword.server.document import Document

from midword import cli
from midword.bench import charlm, common, data, prompt
from midword.models import shipped_test_model

MODEL_ARGS = ["--model", str(shipped_test_model()), "--device", "cpu", "--threads", "1"]
HELPERS = '"""Helpers."""\n\n\ndef parse_args(argv):\n    return list(argv)\n'
MAIN = (
    "import beta\nfrom . import zeta\n\n\n"
    + "".join(f"def step_{i}(x):\n    '''Step {i}.'''\n    return x + {i}\n\n\n" for i in range(30))
    + "@decorated\nclass Main:\n    pass\n"
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, text in {"main.py": MAIN, "alpha.py": HELPERS, "beta.py": HELPERS,
                       "zeta.py": HELPERS.replace("parse_args", "zeta_args")}.items():  # fmt: skip
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def options(**kw: object) -> argparse.Namespace:
    base = {"window_bytes": 4096, "context_bytes": 1024, "related": 2, "study": "context"}
    return argparse.Namespace(**{**base, **kw})


def test_related_files_take_the_imported_ones_first(folder: Path) -> None:
    main = folder / "main.py"
    assert [p.name for p in prompt.related_files(main, 2)] == ["beta.py", "zeta.py"]
    assert [p.name for p in prompt.related_files(main, 5)] == ["beta.py", "zeta.py", "alpha.py"]
    assert prompt.related_files(main, 0) == []


def test_context_arms_are_the_servers_block_before_the_window(folder: Path) -> None:
    path = folder / "main.py"
    cut = MAIN.index("step_3")
    prompts = prompt.build_prompts(options(), prompt.STUDIES["context"], data.TextFile(
        str(path), MAIN), cut)  # fmt: skip
    doc = Document(path.as_uri(), MAIN, 1, "python")
    window = doc.prefix_window(prompt.cursor_at(MAIN, cut), 4096).decode()
    assert window == MAIN[:cut] and prompts["none"] == window
    # the server's chooser, opened in the same order: the first related file most recent
    chooser, documents = ContextFiles(), {doc.uri: doc}
    for name in ("zeta.py", "beta.py"):
        other = Document((folder / name).as_uri(), (folder / name).read_text(), 1, "python")
        documents[other.uri] = other
        chooser.touched(other.uri)
    assert prompts["comment"] == chooser.block(doc, documents, 1024).decode() + window
    assert prompts["comment"].startswith('# Path: beta.py\n# """Helpers."""\n')
    assert prompts["compare"].startswith("# Compare this snippet from beta.py:\n#")
    assert prompts["code"].startswith('# Path: beta.py\n"""Helpers."""\n')
    assert "# Path: zeta.py\n" in prompts["code"] and "def zeta_args" in prompts["code"]


def test_window_arms_start_where_they_say() -> None:
    cut = MAIN.index("class Main")
    before = MAIN[:cut]
    arms = prompt.build_prompts(options(study="window", window_bytes=300), prompt.STUDIES[
        "window"], data.TextFile("main.py", MAIN), cut)  # fmt: skip
    doc = Document("file:///main.py", MAIN, 1, "python")
    assert arms["line"] == doc.prefix_window(prompt.cursor_at(MAIN, cut), 300).decode()
    assert arms["byte"] == before[-300:]
    for arm in ("blank", "def"):
        assert before.endswith(arms[arm]) and len(arms[arm]) < len(arms["line"])
    assert before[: -len(arms["blank"])].endswith("\n\n") and arms["blank"].strip()
    assert arms["def"].startswith("def step_")
    assert prompt.window_start("def", before, 10_000) == before  # the whole file fits


def test_the_first_character_scores_as_charlm_scores_it() -> None:
    args = argparse.Namespace(model=str(shipped_test_model()), tokenizer=None, device="cpu",
                              dtype="auto", backend="auto", threads=1, engine="local")  # fmt: skip
    model, engine = common.load_model(args)
    scorer = charlm.Scorer(model, engine)
    sampler = prompt.make_sampler(model, engine)
    assert sampler.start_id == scorer.start_id
    for cut in (MAIN.index("x + 7") + 2, MAIN.index("Step 2") + 3, 40):
        sample = {"prefix": MAIN[:cut], "target": MAIN[cut]}
        expected = scorer.bytesampler(sample)
        scored = prompt.score_continuation(sampler, MAIN[:cut], MAIN[cut : cut + 5])
        assert math.isclose(scored["first_bits"] * math.log(2), -expected["logprob"], abs_tol=1e-6)
        assert scored["first_correct"] == int(expected["predicted"] == MAIN[cut])
        # the continuation's bits: the chain of exact next-byte log-probabilities
        chain = 0.0
        for i, byte in enumerate(MAIN[cut : cut + 5].encode()):
            sampler.reset(MAIN[: cut + i].encode())  # ASCII: a byte is a character
            chain += float(sampler.next_bytes().next[byte])
        assert scored["chars"] == 5
        assert math.isclose(scored["bits"] * math.log(2), -chain, abs_tol=1e-4)


@pytest.mark.parametrize("study", ["context", "window"])
def test_a_tiny_run_prints_its_tables_and_resumes(folder: Path, tmp_path: Path, study: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "out"
    argv = ["bench", "prompt", *MODEL_ARGS, "--text", str(folder), "--glob", "*.py",
            "--study", study, "--limit", "2", "--chars", "3", "--window-bytes", "512",
            "--out", str(out)]  # fmt: skip
    two = prompt.STUDIES[study][:2]
    assert cli.main([*argv, "--arms", ",".join(two)]) == 0
    first = _records(out)
    assert all(set(r["arms"]) == set(two) for r in first.values())
    capsys.readouterr()
    assert cli.main(argv) == 0  # every arm: the two scored before are kept, the rest added
    printed = capsys.readouterr().out
    assert "Paired, cut by cut" in printed and "bits per char" in printed
    summary = json.loads((out / "results.json").read_text())
    assert summary["cuts"] == 2 and set(summary["arms"]) == set(prompt.STUDIES[study])
    for key, record in _records(out).items():
        assert all(record["arms"][a] == first[key]["arms"][a] for a in two)
        assert all(arm["chars"] == 3 for arm in record["arms"].values())
        if study == "window":
            assert record["cut"] > 512
    lines = (out / "samples.jsonl").read_text()
    assert cli.main([*argv, "--arms", prompt.STUDIES[study][-1]]) == 0
    assert (out / "samples.jsonl").read_text() == lines  # every cut was done: nothing rerun


def _records(out: Path) -> dict[str, dict]:
    """The latest record of each cut."""
    lines = (out / "samples.jsonl").read_text().splitlines()
    return {r["key"]: r for r in map(json.loads, lines)}


def test_unknown_arms_are_refused() -> None:
    with pytest.raises(cli.CommandError, match="the window study has"):
        prompt.arms_of(argparse.Namespace(study="window", arms="comment"))
