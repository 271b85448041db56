"""Completeness fuzz of the streamed Valid Covering Tree, shared by
``tests/engine/test_completeness.py`` (1 MB per tokenizer) and
``benchmarks/bench_completeness.py`` (10 MB and more). Imports no test framework.

For a random text X and a cut point k, the canonical encoding of X (the real
``tokenizers`` encoder), cut after its first token that extends past byte k (the
whole encoding when none does), must be a path from the root of VCT(X[:k]) built by
streaming X byte by byte, and the streamed trunk must equal the matching prefix of
that encoding.

Texts come from a seeded generator (:func:`fragments`): slices of :data:`CORPUS`,
recombinations of its pieces, code, prose with contractions, CJK, emoji, other
scripts, digit runs, whitespace runs with tabs and CRLF, special-token-looking text,
then random mutations. A path is checked cheaply by :func:`covers`, which asks the
tree builder about that one path only (the settled trunk must be its prefix; the rest
of the trunk is what every path shares); a random share of the cuts
(``Config.tree_rate``) is also checked against the whole :meth:`VCT.tree`
(:func:`is_path`), and the two must agree. :func:`self_check` shows the check fails on
wrong paths. Texts holding non-special added text (Qwen's ``<think>``, DeepSeek's
``<｜User｜>``, matched before pre-tokenization) are streamed like the others and
counted in ``Report.added_text``.
"""

from __future__ import annotations

import random
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from midword.engine import VCT, BPETokenizer, Engine, Tree, load_engine

from .chars import char_completions
from .corpus import CORPUS
from .fixtures import real_encoder, tokenizer_path

MAX_FRAGMENT_BYTES = 1500
EXAMPLES_KEPT = 5


# ------------------------------------------------------------------- the check
def canonical_cut(ids: Sequence[int], tok: BPETokenizer, k: int) -> list[int]:
    """The encoding cut after its first token that extends past byte ``k`` (all of it
    when none does)."""
    pos = 0
    for n, t in enumerate(ids):
        pos += len(tok.token_bytes[t] or b"")
        if pos > k:
            return list(ids[: n + 1])
    return list(ids)


def is_path(tree: Tree, seq: Sequence[int]) -> bool:
    """Is ``seq`` the trunk followed by a path from the root of the tail to a leaf, or
    to a node that ends exactly at the end of the prefix? (The whole tree is built.)"""
    trunk = tree.trunk
    if list(seq[: len(trunk)]) != trunk:
        return False
    rest = tuple(seq[len(trunk) :])
    for node in tree.nodes:
        n = len(node.path)
        if rest == node.path and node.ends_at_prefix_end:
            return True  # the encoding ends exactly at the cut
        if len(rest) == n + 1 and rest[:n] == node.path and rest[n] in node.leaves:
            return True
    return False


def covers(vct: VCT, seq: Sequence[int]) -> bool:
    """The engine's own one-path check (:meth:`VCT.covers`); a sample of cuts is also
    compared with the whole :meth:`VCT.tree` (``check_cut``), so the two cannot drift."""
    return vct.covers(seq)


# --------------------------------------------------------------- the counting
@dataclass
class Mismatch:
    """One failed cut: the streamed prefix, the expected ids and which check failed."""

    prefix: bytes
    expected: list[int]
    how: str

    def __str__(self) -> str:
        tail = self.prefix[-60:]
        return f"{self.how}: prefix ...{tail!r} ({len(self.prefix)} bytes), expected {self.expected[-6:]}"


@dataclass
class Report:
    """Counts of one fuzz run."""

    tokenizer: str
    fragments: int = 0
    bytes_streamed: int = 0
    cuts: int = 0
    tree_cuts: int = 0
    mismatches: int = 0
    skipped: int = 0  # fragments whose encoding does not decode to them (should be none)
    added_text: int = 0  # fragments holding a non-special added text
    seconds: float = 0.0
    examples: list[Mismatch] = field(default_factory=list)

    def record(self, prefix: bytes, expected: list[int], how: str) -> None:
        self.mismatches += 1
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append(Mismatch(prefix, expected, how))

    def summary(self) -> str:
        head = (
            f"{self.tokenizer}: {self.bytes_streamed} bytes streamed in {self.fragments} "
            f"fragments, {self.cuts} cuts checked ({self.tree_cuts} against the whole tree), "
            f"{self.mismatches} mismatches, {self.skipped} skipped, "
            f"{self.added_text} holding added text, {self.seconds:.1f} s"
        )
        return "\n  ".join([head, *map(str, self.examples)])


def check_cut(vct: VCT, expected: list[int], report: Report, whole_tree: bool) -> bool:
    """Check one cut (also against the whole tree when ``whole_tree``), count it, and
    record a mismatch; True when it passed."""
    report.cuts += 1
    fast = covers(vct, expected)
    if whole_tree:
        report.tree_cuts += 1
        full = is_path(vct.tree(), expected)
        if fast != full:
            report.record(vct.prefix, expected, f"covers() says {fast}, tree() says {full}")
            return False
    if not fast:
        report.record(vct.prefix, expected, "not a path of the streamed tree")
    return fast


def cut_weight(data: bytes, k: int) -> float:
    """Relative chance of checking the cut after ``data[:k]``: 1 on a character
    boundary; inside a character, 64 / the number of characters that may complete it
    (the tree tries each of them, so a cut after a lone lead byte costs up to 64 times
    more)."""
    if k >= len(data) or not 0x80 <= data[k] < 0xC0:
        return 1.0
    start = k - 1
    while start > 0 and 0x80 <= data[start] < 0xC0:
        start -= 1
    return min(1.0, 64 / len(char_completions(data[start:k])))


def stream_fragment(
    engine: Engine, hf: Tokenizer, text: str, report: Report, rng: random.Random, cfg: Config
) -> None:
    """Stream ``text`` byte by byte, checking random cuts and always the end."""
    lead = getattr(engine, "lead", b"")  # SentencePiece: the dummy prefix's space
    if hasattr(engine, "lead"):
        text = text.replace("\u2581", "_")  # SentencePiece reads U+2581 as a space
    data = text.encode("utf-8")
    report.added_text += _holds_added_text(engine.tok, text)
    ids = hf.encode(text, add_special_tokens=False).ids
    report.fragments += 1
    if engine.tok.decode(ids) != lead + data:
        report.skipped += 1
        return
    vct = VCT(engine)
    for k in range(1, len(data) + 1):
        vct.push(data[k - 1])
        weight = cut_weight(data, k)
        if k == len(data) or rng.random() < cfg.cut_rate * weight:
            whole = weight == 1.0 and rng.random() < cfg.tree_rate
            check_cut(vct, canonical_cut(ids, engine.tok, k + len(lead)), report, whole)
    report.bytes_streamed += len(data)


def _holds_added_text(tok: BPETokenizer, text: str) -> bool:
    return any(added_id is not None for _, added_id in tok.split_added(text))


@dataclass(frozen=True)
class Config:
    """``cut_rate``: chance of checking the cut after a byte on a character boundary
    (see :func:`cut_weight` inside one); ``tree_rate``: chance that a checked cut is
    also checked against the whole :meth:`VCT.tree` (only where the prefix ends on a
    character boundary or one byte short of one: elsewhere a whole tree takes seconds).
    """

    cut_rate: float = 0.003
    tree_rate: float = 0.005


def run(
    name: str,
    total_bytes: int,
    seed: int = 0,
    cfg: Config = Config(),  # noqa: B008  (frozen)
    progress: Callable[[Report], None] | None = None,
) -> Report:
    """Stream at least ``total_bytes`` of fragments through tokenizer ``name``."""
    path = tokenizer_path(name)
    engine, hf = load_engine(str(path)), real_encoder(path)
    report = Report(name)
    rng = random.Random(seed ^ 0x5EED)
    start = time.perf_counter()
    for text in fragments(seed):
        if report.bytes_streamed >= total_bytes:
            break
        stream_fragment(engine, hf, text, report, rng, cfg)
        report.seconds = time.perf_counter() - start
        if progress is not None and report.fragments % 50 == 0:
            progress(report)
    report.seconds = time.perf_counter() - start
    return report


# ------------------------------------------------------------- the self-check
@dataclass
class SelfCheck:
    """How :func:`self_check` went: sequences the whole tree rejects and that were
    reported as mismatches, leaves the whole tree holds and :func:`covers` accepted."""

    wrong: int = 0
    wrong_leaves: int = 0  # of ``wrong``: a leaf swapped for one with the right bytes
    wrong_reported: int = 0
    right: int = 0
    right_accepted: int = 0


def self_check(name: str, cuts: int, seed: int = 7) -> SelfCheck:
    """Feed the checker sequences that are wrong on purpose: at random cuts (until
    ``cuts`` wrong leaves were tried), the real leaf replaced by tokens with the right bytes that the whole tree does not
    hold, and the first token replaced by another; also other leaves the tree holds."""
    path = tokenizer_path(name)
    engine, hf = load_engine(str(path)), real_encoder(path)
    rng, out, report = random.Random(seed), SelfCheck(), Report(name)
    for text in fragments(seed):
        if out.wrong_leaves >= cuts:
            return out
        data = text.encode("utf-8")
        ids = hf.encode(text, add_special_tokens=False).ids
        if engine.tok.decode(ids) != data:
            continue
        vct = VCT(engine)
        for k in range(1, len(data)):
            vct.push(data[k - 1])
            if cut_weight(data, k) == 1.0 and rng.random() < 0.02:
                _self_check_cut(vct, canonical_cut(ids, engine.tok, k), rng, out, report)
    return out


def _self_check_cut(
    vct: VCT, expected: list[int], rng: random.Random, out: SelfCheck, report: Report
) -> None:
    tree = vct.tree()
    head, leaf = expected[:-1], expected[-1]
    node = next((n for n in tree.nodes if [*tree.trunk, *n.path] == head), None)
    if node is None or leaf not in node.leaves:
        return  # the encoding ends at the cut, or a real mismatch (the main run counts it)
    leaves = set(node.leaves.tolist())
    for other in _same_bytes(vct, head, rng):
        seq = [*head, other]
        if other in leaves:
            out.right += 1
            out.right_accepted += covers(vct, seq)
        else:
            out.wrong += 1
            out.wrong_leaves += 1
            out.wrong_reported += not check_cut(vct, seq, report, whole_tree=True)
    first = (expected[0] + 1) % vct.tok.size
    if vct.tok.token_bytes[first] is not None and len(expected) > 1:
        out.wrong += 1
        out.wrong_reported += not check_cut(vct, [first, *expected[1:]], report, True)


def _same_bytes(vct: VCT, head: list[int], rng: random.Random) -> list[int]:
    """A few tokens that could follow ``head`` as far as bytes go (start with what is left
    of the prefix, reach past it)."""
    rest = vct.prefix[len(vct.tok.decode(head)) :]
    e = vct.engine
    lo, hi = e.token_range(rest)
    ids = e.sorted_ids[lo:hi][e.sorted_len[lo:hi] > len(rest)].tolist()
    return rng.sample(ids, min(6, len(ids)))


# ------------------------------------------------------------ the fragments
SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|reserved_special_token_7|>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|endofprompt|>", "<|channel|>", "<|return|>", "<think>", "</think>", "<tool_call>",
    "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜fim▁hole｜>", "<｜tool▁sep｜>",
    "<|endof", "<｜Us", "<thin", "|>", "<|", "▁",
]  # fmt: skip
_WORDS = (
    "the of and to in is it you that he was for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your "
    "how said an each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did number "
    "sound no most people my over know water than call first who may down side been now find "
    "Hello World Python JSON HTTPServer iPhone McDonald O'Neil naïve café résumé Ångström "
    "straße Œuvre ﬁnal"
)
WORDS = _WORDS.split()
PUNCTUATION = [",", ".", "!", "?", ";", ":", "..."]
NUMBER_ENDS = [".", ",", "_", " ", "e-", "x", "-", "%", ""]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M",
                "'LL", "'D", "'Ve", "'lL", "'", "''", "'v", "'l", "'r", "’s", "'x"]  # fmt: skip
IDENTS = ["self", "x", "i", "_", "__init__", "assertEqual", "get_value", "HTTPServer", "fooBar",
          "np", "torch", "π", "变量", "kMaxSize", "T", "x1", "a_b_c", "$el", "@Override"]  # fmt: skip
KEYWORDS = ["def", "class", "return", "if", "else:", "for", "in", "while", "import", "from",
            "const", "let", "function", "fn", "pub", "struct", "#include", "int", "void"]  # fmt: skip
OPERATORS = ["=", "==", "!=", "+=", "->", "=>", "::", ".", ",", ";", ":", "(", ")", "[", "]", "{",
             "}", "<", ">", "<=", "**", "//", "/*", "*/", "#", "@", "&&", "||", "!", "?", "...",
             "`", "~", "^", "%", "\\", '"', "'", '"""', "```"]  # fmt: skip
SPACES = [" ", "  ", "    ", "\t", "\n", "\r\n", "\r", "\n\n", "\u3000", "\xa0", "\u2003",
          "\u200b", "\x0b", "\x0c", " \n", "\t\n", "\n    ", "\n\t\t"]  # fmt: skip
EMOJI = ["😀", "👍🏽", "🇺🇸", "👨‍👩‍👧", "❤️", "1️⃣", "🤖", "🔥", "✅", "🏳️‍🌈", "🧑🏿‍💻", "☕", "™", "©"]
SCRIPTS = [
    (0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0xAC00, 0xD7A3),
    (0x0400, 0x04FF), (0x0370, 0x03FF), (0x0600, 0x06FF), (0x05D0, 0x05EA),
    (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x00C0, 0x024F), (0x1E00, 0x1EFF),
    (0xFF01, 0xFF5E), (0x2000, 0x206F), (0x2190, 0x22FF), (0x0300, 0x036F),
]  # fmt: skip
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "²³¹", "½⅓", "Ⅻ"]


def _pick(rng: random.Random, items: Sequence[str]) -> str:
    return items[rng.randrange(len(items))]


def _corpus_slice(rng: random.Random) -> str:
    text = _pick(rng, CORPUS) if rng.random() < 0.5 else "".join(CORPUS)
    i = rng.randrange(len(text))
    return text[i : i + rng.randrange(1, 200)]


def _recombined(rng: random.Random) -> str:
    """Corpus pieces (words, space runs, punctuation) reassembled in a random order."""
    pieces = [p for line in CORPUS for p in line.split(" ")]
    return " ".join(_pick(rng, pieces) for _ in range(rng.randrange(1, 12)))


def _code(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randrange(3, 30)):
        roll = rng.random()
        pool = IDENTS if roll < 0.35 else KEYWORDS if roll < 0.5 else OPERATORS
        if roll > 0.85:
            pool = SPACES
        out.append(_pick(rng, pool))
        if rng.random() < 0.4:
            out.append(" ")
    return "".join(out)


def _prose(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randrange(2, 25)):
        word = _pick(rng, WORDS)
        word = word.upper() if rng.random() < 0.1 else word.title() if rng.random() < 0.2 else word
        if rng.random() < 0.15:
            word += _pick(rng, CONTRACTIONS)
        if rng.random() < 0.15:
            word += _pick(rng, PUNCTUATION)
        out.append(word)
    return " ".join(out)


def _script(rng: random.Random) -> str:
    lo, hi = SCRIPTS[rng.randrange(len(SCRIPTS))]
    chars = [chr(rng.randint(lo, hi)) for _ in range(rng.randrange(1, 20))]
    return "".join(c for c in chars if unicodedata.category(c) not in ("Cn", "Cs", "Co"))


def _digits(rng: random.Random) -> str:
    digits = _pick(rng, DIGITS) if rng.random() < 0.2 else DIGITS[0]
    run = "".join(_pick(rng, digits) for _ in range(rng.randrange(1, 30)))
    return run + _pick(rng, NUMBER_ENDS) if rng.random() < 0.6 else run


def _space(rng: random.Random) -> str:
    return "".join(_pick(rng, SPACES) for _ in range(rng.randrange(1, 8)))


def _misc(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return "".join(_pick(rng, EMOJI) for _ in range(rng.randrange(1, 5)))
    if roll < 0.75:
        return _pick(rng, SPECIALS)
    return "".join(chr(rng.randrange(0, 0x80)) for _ in range(rng.randrange(1, 10)))


PIECES: list[tuple[float, Callable[[random.Random], str]]] = [
    (0.2, _corpus_slice), (0.12, _recombined), (0.18, _code), (0.15, _prose),
    (0.1, _script), (0.08, _digits), (0.09, _space), (0.08, _misc),
]  # fmt: skip


def _piece(rng: random.Random) -> str:
    roll = rng.random()
    for weight, make in PIECES:
        if roll < weight:
            return make(rng)
        roll -= weight
    return _corpus_slice(rng)


def _mutate(rng: random.Random, text: str) -> str:
    """A few random edits: delete, duplicate, change case, splice in a piece."""
    for _ in range(rng.randrange(0, 4)):
        if not text:
            break
        i = rng.randrange(len(text))
        j = min(len(text), i + rng.randrange(1, 12))
        roll = rng.random()
        if roll < 0.25:
            text = text[:i] + text[j:]
        elif roll < 0.5:
            text = text[:j] + text[i:j] * rng.randrange(1, 4) + text[j:]
        elif roll < 0.7:
            text = text[:i] + text[i:j].swapcase() + text[j:]
        else:
            text = text[:i] + _piece(rng) + text[i:]
    return text


def fragment(rng: random.Random) -> str:
    """One random text: a few pieces, mutated, NFC-normalized (Qwen's normalizer would
    otherwise change the bytes), at most :data:`MAX_FRAGMENT_BYTES` bytes."""
    text = _mutate(rng, "".join(_piece(rng) for _ in range(rng.randrange(1, 10))))
    data = text.encode("utf-8")[: rng.randrange(1, MAX_FRAGMENT_BYTES + 1)]
    return unicodedata.normalize("NFC", data.decode("utf-8", errors="ignore")) or "x"


def fragments(seed: int) -> Iterator[str]:
    """The endless, deterministic stream of fragments for ``seed``."""
    rng = random.Random(seed)
    while True:
        yield fragment(rng)
