"""Prompts kept within the positions a model takes (engine/model/context_fit.py, server/live.py).

A tiny GPT-2 (learned absolute positions, 64 of them) fails with an index error on a
longer prompt, so the language server's 4,096-byte window broke it; a rotary model (the
shipped test model has 512 positions) silently read positions it never saw. The server's
documents now cut whole lines from the front of the prompt until it fits, keep the cut
while the user types, and the answer is exactly the answer for the shorter prompt."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from midword.engine.model.context_fit import SUFFIX_SHARE, ContextFit

torch = pytest.importorskip("torch")

POSITIONS = 64


def lines(count: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    words = ["def", "x", "return", "self", "value", "é", "中文", "0x1F", "(", ")", ":"]
    out = []
    for i in range(count):
        out.append(" ".join(rng.choice(words) for _ in range(rng.randrange(1, 8))) + f" {i}")
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("seed", range(20))
def test_a_cut_drops_whole_lines_and_keeps_them_dropped_while_typing(seed: int) -> None:
    rng = random.Random(seed)
    prompt = lines(rng.randrange(5, 80), seed)
    if rng.random() < 0.3:  # one long line: cut inside it, on a character boundary
        prompt = prompt.replace(b"\n", b" ")
    fit = ContextFit(POSITIONS)
    used = rng.randrange(fit.room + 1, 4 * POSITIONS)
    cut = fit.refit(prompt, used)
    assert cut is not None and 0 < len(cut) < len(prompt) and prompt.endswith(cut)
    dropped = prompt[: len(prompt) - len(cut)]
    cut.decode("utf-8")  # never inside a character
    assert b"\n" not in prompt[:-1] or dropped.endswith(b"\n")  # whole lines when there are
    assert fit.dropped == dropped
    typed = prompt + b"y = 1"
    assert fit.apply(typed) == cut + b"y = 1"  # typing keeps the cut
    assert fit.apply(b"#" + typed) == b"#" + typed  # the front changed: start over uncut
    assert fit.dropped == b""


@pytest.mark.parametrize("seed", range(5))
def test_a_cut_never_starts_inside_a_character(seed: int) -> None:
    """Fuzz: short prompts of multi-byte characters (some ending in a partial one), cut
    hard; the kept part starts on a character. (A cut moved forward from inside the last
    character once kept only its continuation bytes: the busy-editor soak's PrefixError.)"""
    rng = random.Random(seed)
    alphabet = ["a", "é", "中", "😀", "\n", " ", "\u2028"]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))).encode()
        if rng.random() < 0.3:
            text = text[: rng.randrange(1, len(text) + 1)]
        fit = ContextFit(rng.choice([32, 64]))
        cut = fit.refit(text, rng.randrange(1, 400))
        if cut is not None:
            assert cut and cut[0] & 0xC0 != 0x80, (text, cut)
            assert fit.dropped + cut == text


def test_no_limit_and_short_prompts_are_left_alone() -> None:
    prompt = lines(50)
    assert ContextFit(None).refit(prompt, 10**6) is None
    fit = ContextFit(POSITIONS)
    assert fit.refit(prompt, fit.room) is None and fit.apply(prompt) == prompt


@pytest.fixture(scope="module")
def gpt2_backend():
    """A tiny random GPT-2 with 64 learned positions and the shipped test tokenizer."""
    from midword.engine.model.hf_backend import HFModel
    from midword.engine.tree.tables import load_engine
    from midword.server.live import SingleModel
    from transformers import GPT2Config, GPT2LMHeadModel

    from midword.models import shipped_test_model

    engine = load_engine(str(shipped_test_model()))
    config = GPT2Config(
        vocab_size=engine.tok.size,
        n_positions=POSITIONS,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config).eval()
    return SingleModel(HFModel(model), engine)


def greedy(max_tokens: int = 8):
    from midword.engine.sample.generate import Settings

    return Settings(temperature=0.0, max_tokens=max_tokens)


def test_a_long_buffer_completes_within_the_positions(gpt2_backend) -> None:
    from midword.engine.sample.generate import Completer

    doc = gpt2_backend.document()
    prefix = lines(60) + b"value = sel"
    doc.prepare(prefix, "bytesampler")
    result = doc.complete(prefix, greedy(), should_stop=None, cut=None, deadline=1e18)
    session = doc.completer.session
    assert session.cache_len() <= POSITIONS  # never a position the model lacks
    cut = prefix[len(doc.fit.dropped) :]
    assert doc.fit.dropped and cut.startswith(b"") and prefix.endswith(cut)
    # exact: the answer for the cut prompt, asked of a fresh completer without any fit
    fresh = Completer(gpt2_backend.model, gpt2_backend.engine)
    assert result.text == fresh.complete(cut, greedy()).text
    # typing keeps the cut: the same bytes dropped, and only the new tokens evaluated
    before = session.inference_tokens
    doc.prepare(prefix + b"f", "bytesampler")
    assert prefix + b"f" == doc.fit.dropped + cut + b"f"
    assert session.inference_tokens - before < 10


def test_the_command_line_cuts_a_long_prompt_and_says_so(tmp_path, gpt2_backend) -> None:
    """`midword complete` on a prompt longer than a 64-position GPT-2 takes: an answer,
    and a note on stderr, where it used to end in an index error."""
    import shutil

    from midword.models import shipped_test_model

    folder = tmp_path / "gpt2"
    gpt2_backend.model.model.save_pretrained(str(folder))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        source = shipped_test_model() / name
        if source.exists():
            shutil.copy(source, folder / name)
    prompt = tmp_path / "long.py"
    prompt.write_bytes(lines(60) + b"value = sel")
    run = _complete_cli(str(folder), "--prefix-file", str(prompt))
    assert run.returncode == 0, run.stderr
    assert "bytes were left out: the model takes 64 positions" in run.stderr


def test_a_fim_prompt_gives_the_suffix_a_third_and_fits() -> None:
    """The shipped model (512 positions, qwen-spm): a long prefix and a long suffix. The
    suffix keeps its first whole lines, at most a third of the room; the prefix is cut
    to fit the rest; the answer is exactly the answer for that prompt."""
    from midword.engine.model.hf_loading import load_hf_model
    from midword.engine.sample.fim import TEMPLATES, FimCompleter
    from midword.engine.tree.tables import load_engine
    from midword.server.live import SingleModel

    from midword.models import shipped_test_model

    folder = str(shipped_test_model())
    model, engine = load_hf_model(folder), load_engine(folder)
    backend = SingleModel(model, engine, fim=TEMPLATES["qwen-spm"])
    doc = backend.document()
    prefix, suffix = lines(200, seed=1) + b"value = sel", b"f\n" + lines(200, seed=2)
    doc.set_suffix(suffix)
    doc.prepare(prefix, "bytesampler")
    kept = doc.kept_suffix()
    assert suffix.startswith(kept) and kept.endswith(b"\n") and len(kept) < len(suffix)
    assert doc.fim.token_count(kept) <= doc.fit.room // SUFFIX_SHARE
    assert doc.fim.positions_used() <= doc.fit.room  # the whole prompt within the positions
    result = doc.complete(prefix, greedy(), should_stop=None, cut=None, deadline=1e18)
    assert doc.fim.session.inner.cache_len() <= model.context_length
    cut = prefix[len(doc.fit.dropped) :]
    fresh = FimCompleter(model, engine, TEMPLATES["qwen-spm"])
    assert result.text == fresh.complete(cut, kept, greedy()).text


def test_an_ensemble_fits_its_shortest_member(gpt2_backend) -> None:
    """Two members, 64 and 2,048 positions: the prompt is cut for the 64-position one, and
    the byte budget capped at the positions left; the answer is a fresh ensemble's on the
    cut prompt with that budget."""
    from dataclasses import replace

    from midword.engine.model.hf_backend import HFModel
    from midword.engine.sample.ensemble import Ensemble
    from midword.server.live import EnsembleModels

    from midword.testing.tiny_models import build_tiny_llama

    engine = gpt2_backend.engine
    llama = HFModel(build_tiny_llama(engine.tok.size, seed=3))
    members = [(gpt2_backend.model, engine), (llama, engine)]
    doc = EnsembleModels(members, [0.5, 0.5], "mix").document()
    assert doc.fit.max_context == POSITIONS
    prefix = lines(60) + b"value = sel"
    doc.prepare(prefix, "bytesampler")
    result = doc.complete(prefix, greedy(), should_stop=None, cut=None, deadline=1e18)
    sessions = [m.sampler.session for m in doc.ensemble.members]
    assert sessions[0].cache_len() <= POSITIONS
    cut = prefix[len(doc.fit.dropped) :]
    assert doc.fit.dropped and prefix.endswith(cut)
    fresh = Ensemble(members, [0.5, 0.5], "mix")
    fresh.reset(cut)
    room = doc.fit.new_tokens(fresh.positions_used())
    settings = replace(greedy(), mode="bytes", level="byte", method="bytesampler")
    settings = replace(settings, max_bytes=min(settings.byte_budget, room))
    assert result.text == fresh.complete(cut, settings).text


def test_the_command_line_keeps_a_long_suffix_to_its_share(tmp_path) -> None:
    """`midword complete --suffix-file` with the shipped FIM model: the suffix keeps its
    share of a 512-position context, so most of the room is left to the prefix (without
    the share, a long suffix left the prefix a few bytes)."""
    import re

    from midword.models import shipped_test_model

    prefix, suffix = tmp_path / "prefix.py", tmp_path / "suffix.py"
    prefix.write_bytes(lines(200, seed=1) + b"value = sel")
    suffix.write_bytes(b"f\n" + lines(200, seed=2))
    run = _complete_cli(
        str(shipped_test_model()), "--prefix-file", str(prefix), "--suffix-file", str(suffix)
    )
    assert run.returncode == 0, run.stderr
    dropped = int(re.search(r"first (\d+) bytes were left out", run.stderr).group(1))
    assert prefix.stat().st_size - dropped >= 300  # a hundred tokens and more kept


def _complete_cli(model: str, *files: str) -> subprocess.CompletedProcess[str]:
    """``midword complete`` of 4 tokens on the CPU with ``model``, the prompt read from
    ``files`` (``--prefix-file P``, ``--suffix-file S``), in a fresh process."""
    command = [sys.executable, "-m", "midword", "complete", "--model", model, "--device", "cpu"]
    return subprocess.run(
        [*command, "--max-tokens", "4", *files], capture_output=True, text=True, timeout=300
    )
