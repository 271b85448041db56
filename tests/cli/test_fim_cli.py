"""Fill-in-the-middle on the command line (``midword complete`` / ``next-bytes`` with
``--suffix``, ``--suffix-file`` and ``--fim``) against the engine in process, and the
language server's FIM pieces: the suffix window and the stop before repeating the suffix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from midword.engine import load_engine
from midword.engine.sample.fim import TEMPLATES, FimCompleter, fim_sampler
from midword.engine.sample.generate import Settings

from midword.testing.vocab import with_special_tokens

torch = pytest.importorskip("torch")
from midword.testing.tiny_models import build_tiny_llama  # noqa: E402

TOL = 1e-9
SOURCE = Path(__file__).resolve().parents[2] / "models" / "default" / "tokenizer.json"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fim_model")
    with_special_tokens(SOURCE, TEMPLATES["qwen"].tokens, folder / "tokenizer.json")
    size = load_engine(str(folder / "tokenizer.json")).tok.size
    build_tiny_llama(size, folder, seed=5, hidden=16, layers=1, heads=2, dtype="float64")
    return folder


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> list[dict]:
    import json

    from midword.cli import main

    assert main(list(argv)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("name", ["qwen", "qwen-spm"])
def test_cli_complete_and_next_bytes_with_a_suffix(model_dir: Path, capsys, name: str) -> None:
    """``--suffix``/``--suffix-file`` and ``--fim``: the middle FimCompleter gives in process,
    and the middle's next-byte distribution; ``--fim off`` is the prefix-only completion."""
    from midword.engine import load_hf_model
    from midword.engine.sample.generate import Completer

    common = ["--model", str(model_dir), "--device", "cpu", "--dtype", "float64", "--json"]
    prefix, suffix = b"x = foo", b"bar()\n"
    model = load_hf_model(model_dir, device="cpu", dtype="float64")
    engine = load_engine(str(model_dir))
    settings = Settings(max_tokens=6)
    [done] = run_cli(capsys, "complete", *common, "--max-tokens", "6", "--fim", name,
                     "--suffix", suffix.decode(), prefix.decode())  # fmt: skip
    want = FimCompleter(model, engine, TEMPLATES[name]).complete(prefix, suffix, settings)
    assert bytes.fromhex(done["completion_hex"]) == want.data
    suffix_file = model_dir / "suffix.txt"
    suffix_file.write_bytes(suffix)
    [dist] = run_cli(capsys, "next-bytes", *common, "--fim", name,
                     "--suffix-file", str(suffix_file), prefix.decode())  # fmt: skip
    sampler = fim_sampler(model, engine, TEMPLATES[name], prefix, suffix)
    truth = sampler.next_bytes()
    assert abs(dist["prefix_logprob"] - truth.prefix_logprob) < TOL
    top = int(np.argmax(truth.next))
    assert abs(dist["next"][str(top)] - truth.next[top]) < TOL
    [off] = run_cli(capsys, "complete", *common, "--max-tokens", "6", "--fim", "off",
                    "--suffix", suffix.decode(), prefix.decode())  # fmt: skip
    plain = Completer(model, engine).complete(prefix, settings)
    assert bytes.fromhex(off["completion_hex"]) == plain.data


def test_cli_auto_needs_a_suffix_and_names_need_tokens(model_dir: Path, capsys) -> None:
    from midword.cli import main

    common = ["--model", str(model_dir), "--device", "cpu", "--dtype", "float64"]
    assert main(["complete", *common, "--fim", "deepseek", "--suffix", "x", "a"]) == 2
    assert "lacks" in capsys.readouterr().err
    # auto without a suffix: the plain completion (a FIM prompt needs the text after)
    [auto] = run_cli(capsys, "complete", *common, "--json", "--max-tokens", "4", "def f")
    [off] = run_cli(capsys, "complete", *common, "--json", "--max-tokens", "4", "--fim", "off",
                    "def f")  # fmt: skip
    assert auto["completion_hex"] == off["completion_hex"]


# ---------------------------------------------------------------------------- server pieces


def test_suffix_window_ends_on_a_line_and_ignores_typing() -> None:
    from midword.server.document import split_lines
    from midword.server.scope import suffix_window

    text = "def f(a, b):\n    return a\n\nprint(f(1, 2))\nprint('done')\n"
    lines = split_lines(text)
    window = suffix_window(lines, 1, len("    return a"), 20)
    assert window == b"\n\nprint(f(1, 2))\n"  # whole lines while they fit in 20 bytes
    typed = split_lines(text.replace("return a", "return a + b"))
    assert suffix_window(typed, 1, len("    return a + b"), 20) == window
    assert suffix_window(lines, 0, 0, 1000) == text.encode()
    assert suffix_window(lines, 0, 0, 0) == b""


def test_suffix_repeat_cut_stops_before_the_suffix_lines() -> None:
    from midword.server.cleanup import suffix_repeat_cut

    suffix = b"\n    y = x * 2\n    return y\n"
    stop = suffix_repeat_cut(lambda text: None, suffix)
    text = "x = a + 1\n    y = x * 2\n    return y\n"
    assert text[: stop(text)] == "x = a + 1"
    assert stop("x = a + 1\n    y = x * 2\n    ret") is None  # not complete yet
    assert stop("x = a + 1\n    y = x * 3\n    return y\n") is None  # differs
    scope_first = suffix_repeat_cut(lambda text: 3, suffix)  # the scope's cut comes first
    assert scope_first(text) == 3
    assert suffix_repeat_cut(len, b"only the rest of the line") is len  # nothing below


def test_smollm2_the_default_model_has_no_fim_template() -> None:
    """SmolLM2-135M has no FIM tokens: `fim: auto` says off, completions stay prefix-only."""
    from midword.engine import load_tokenizer
    from midword.engine.model.files import prepare_model
    from midword.engine.sample.fim import detect_template, model_config

    from midword.models import find_smollm2

    found = find_smollm2()  # not default_model(): the test suite pins the small model
    if found is None:
        pytest.skip("SmolLM2-135M is not installed here")
    source = prepare_model(str(found), device="cpu", dtype="auto")
    tok = load_tokenizer(source)
    assert "<|endoftext|>" in {a.content for a in tok.added}
    assert detect_template(tok, model_config(source)) is None
